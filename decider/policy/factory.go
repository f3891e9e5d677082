package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
)

// New builds the policy a validated configuration describes, wired to the shared state in deps.
// A policy whose state dependency deps lacks (a prefix source for cache_aware, an affinity store
// for session_aware and sticky) is an error wrapping ErrInvalidConfiguration, so the
// configuration is refused at load time, never at request time.
func New(spec config.PolicySpec, deps Deps) (Policy, error) {
	r := spec.Resolved()
	limits := admissionLimits(r.Admission)
	switch r.Type {
	case config.PolicyRoundRobin, config.PolicyRandom, config.PolicyPowerOfTwo, config.PolicyLoadBased, "":
		return newBasic(r.Type, deps, limits), nil
	case config.PolicyCacheAware:
		if deps.Prefix == nil {
			return nil, fmt.Errorf("policy cache_aware needs a KV prefix index; start the decider with KV-event ingestion: %w", ErrInvalidConfiguration)
		}
		return newCacheAware(deps, limits, r.CacheAware, deps.Prefix), nil
	case config.PolicyTTFTAware:
		// Without KV ingestion every engine is cold; the policy still runs (and says so).
		return newTTFTAware(deps, limits, r.TTFTAware, deps.Prefix), nil
	case config.PolicySessionAware:
		if deps.Affinity == nil {
			return nil, fmt.Errorf("policy session_aware needs an affinity store: %w", ErrInvalidConfiguration)
		}
		return newSessionAware(deps, limits, deps.Affinity, r.IdleTimeout), nil
	case config.PolicySticky:
		if deps.Affinity == nil {
			return nil, fmt.Errorf("policy sticky needs an affinity store: %w", ErrInvalidConfiguration)
		}
		if !slices.Contains(config.StickyFallbacks(), r.Fallback) {
			return nil, fmt.Errorf("sticky fallback %q: use one of %s: %w", r.Fallback, strings.Join(config.StickyFallbacks(), ", "), ErrInvalidConfiguration)
		}
		return newSticky(deps, limits, deps.Affinity, r.IdleTimeout, newBasic(r.Fallback, deps, admission.Limits{})), nil
	}
	return nil, fmt.Errorf("unknown policy type %q: %w", spec.Type, ErrInvalidConfiguration)
}

// basics is what every load-reading policy holds: its dependencies and its admission caps.
type basics struct {
	deps   Deps
	limits admission.Limits
}

// newBasic returns the policy of a type that needs nothing but basics: round_robin, random,
// load_based, and power_of_two (also for "", the default type).
func newBasic(typ string, deps Deps, limits admission.Limits) Policy {
	switch typ {
	case config.PolicyRoundRobin:
		return newRoundRobin(deps, limits)
	case config.PolicyRandom:
		return newRandom(deps, limits)
	case config.PolicyLoadBased:
		return newLeastLoad(deps, limits)
	}
	return newPowerOfTwo(deps, limits)
}

// admissionLimits converts resolved configuration caps to admission caps (unset caps are zero
// in both).
func admissionLimits(a config.AdmissionLimits) admission.Limits {
	return admission.Limits{
		MaxRunningRequests:      a.MaxRunningRequests,
		MaxWaitingRequests:      a.MaxWaitingRequests,
		MaxKVTokens:             a.MaxKVTokens,
		MaxPendingPrefillTokens: a.MaxPendingPrefillTokens,
		MaxInflightRequests:     a.MaxInflightRequests,
	}
}
