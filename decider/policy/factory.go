package policy

import (
	"fmt"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
)

// New builds the policy a validated configuration describes, wired to the shared state in deps.
// Types whose state dependencies this decider does not provide return an error wrapping
// ErrInvalidConfiguration, so the configuration is refused at load time, never at request time.
func New(spec config.PolicySpec, deps Deps) (Policy, error) {
	limits := Limits(spec.Admission)
	switch spec.Type {
	case TypeRoundRobin:
		return NewRoundRobin(deps, limits), nil
	case TypeRandom:
		return NewRandom(deps, limits), nil
	case TypePowerOfTwo, "":
		return NewPowerOfTwo(deps, limits), nil
	case TypeLoadBased:
		return NewLeastLoad(deps, limits), nil
	case TypeCacheAware, TypeSessionAware, TypeSticky:
		return nil, fmt.Errorf("policy type %q is not supported by this release of the decider; use power_of_two, load_based, round_robin or random: %w", spec.Type, ErrInvalidConfiguration)
	}
	return nil, fmt.Errorf("unknown policy type %q: %w", spec.Type, ErrInvalidConfiguration)
}

// Limits converts a configuration admission object to admission caps (unset caps are zero).
func Limits(a *config.AdmissionSpec) admission.Limits {
	if a == nil {
		return admission.Limits{}
	}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return admission.Limits{
		MaxRunningRequests:      val(a.MaxRunningRequests),
		MaxWaitingRequests:      val(a.MaxWaitingRequests),
		MaxKVTokens:             val(a.MaxKVTokens),
		MaxPendingPrefillTokens: val(a.MaxPendingPrefillTokens),
		MaxInflightRequests:     val(a.MaxInflightRequests),
	}
}
