// Package admission holds AdmissionLimits: the per-engine caps a policy checks on the engine it
// selected. Admission observes load; it never ranks engines, picks replacements, reserves capacity
// or changes buckets.
package admission

import (
	"github.com/sluicehq/sluice/state/loadtable"
)

// Limit names, used as rejection reasons. They are the configuration field names so an operator
// can read a rejection and find the cap that caused it.
const (
	LimitRunningRequests      = "max_running_requests"
	LimitWaitingRequests      = "max_waiting_requests"
	LimitKVTokens             = "max_kv_tokens"
	LimitPendingPrefillTokens = "max_pending_prefill_tokens"
	LimitInflightRequests     = "max_inflight_requests"
)

// Limits is a set of optional absolute caps. A zero cap is unset and not checked, so the zero
// value admits everything (see docs/decisions.md, "Admission"). A set cap rejects when the
// engine's metric is at or above it.
type Limits struct {
	MaxRunningRequests      int64
	MaxWaitingRequests      int64
	MaxKVTokens             int64
	MaxPendingPrefillTokens int64
	MaxInflightRequests     int64
}

// Metrics is what admission reads for one engine: the view from the snapshot the policy already
// captured for selection, and the router-local in-flight counter, which is always known.
type Metrics struct {
	// View is the engine's reported load; meaningful only when Known.
	View loadtable.View
	// Known is false when the engine has no fresh, complete report. Reported caps then fail open.
	Known bool
	// InFlight is the router-local count of requests dispatched and not yet released.
	InFlight int64
}

// Check returns "" when the engine is admitted, or the name of the first cap it violates.
// Reported metrics that are unknown pass their caps (unknown is never zero); pending-prefill
// tokens are only reported by native views, so a basic view passes that cap too. KV tokens are
// the tokens the engine reports in use.
func (l Limits) Check(m Metrics) string {
	if m.Known {
		v := &m.View
		switch {
		case l.MaxRunningRequests > 0 && v.Running >= l.MaxRunningRequests:
			return LimitRunningRequests
		case l.MaxWaitingRequests > 0 && v.Waiting >= l.MaxWaitingRequests:
			return LimitWaitingRequests
		case l.MaxKVTokens > 0 && v.KVUsedTokens >= l.MaxKVTokens:
			return LimitKVTokens
		case l.MaxPendingPrefillTokens > 0 && v.Native && v.WaitingUncachedTokens >= l.MaxPendingPrefillTokens:
			return LimitPendingPrefillTokens
		}
	}
	if l.MaxInflightRequests > 0 && m.InFlight >= l.MaxInflightRequests {
		return LimitInflightRequests
	}
	return ""
}
