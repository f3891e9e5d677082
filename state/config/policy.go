package config

import "time"

// Policy types accepted in PolicySpec.Type. This is the one list of policy
// names: decider/policy builds and names its policies with these constants.
const (
	PolicyRoundRobin   = "round_robin"
	PolicyRandom       = "random"
	PolicyPowerOfTwo   = "power_of_two"
	PolicyLoadBased    = "load_based"
	PolicyCacheAware   = "cache_aware"
	PolicySessionAware = "session_aware"
	PolicySticky       = "sticky"
	PolicyTTFTAware    = "ttft_aware"
)

// PolicyTypes returns every accepted policy type, in documentation order.
func PolicyTypes() []string {
	return []string{PolicyRoundRobin, PolicyRandom, PolicyPowerOfTwo, PolicyLoadBased,
		PolicyCacheAware, PolicySessionAware, PolicySticky, PolicyTTFTAware}
}

// StickyFallbacks returns the policy types a sticky policy may fall back to;
// the first is the default.
func StickyFallbacks() []string {
	return []string{PolicyRoundRobin, PolicyRandom, PolicyPowerOfTwo, PolicyLoadBased}
}

// Defaults applied by [PolicySpec.Resolved] (docs/decisions.md, "cache_aware",
// "ttft_aware" and "session_aware and sticky").
const (
	DefaultMinMatchTokens      int64   = 1024
	DefaultCandidateMin        int64   = 8
	DefaultCandidateRatio      float64 = 0.05
	DefaultCandidateMax        int64   = 32
	DefaultSwitchMarginTokens  int64   = 1024
	DefaultPressureGuard               = true
	DefaultGuardAbsoluteTokens int64   = 8192
	DefaultGuardFactor         float64 = 1.5
	DefaultMissChoices         int64   = 2

	DefaultPrefillTokensPerSec  int64 = 10000
	DefaultTypicalRequestTokens int64 = 2048
	DefaultHotSpotMarginMillis  int64 = 250

	DefaultIdleTimeout    = 600 * time.Second
	DefaultStickyFallback = PolicyRoundRobin
)

// PolicySpec attaches a policy to a group or a stage default. Only Type is
// required; every other field is optional and belongs to the policy types
// noted beside it (setting one for another type is a validation error). Use
// [PolicySpec.Resolved] to read it with defaults applied.
type PolicySpec struct {
	// Type is one of [PolicyTypes].
	Type string `json:"type" yaml:"type"`
	// Admission holds hard per-engine caps; nil admits everything. All types.
	Admission *AdmissionSpec `json:"admission,omitempty" yaml:"admission,omitempty"`

	// MinMatchTokens is the minimum prefix hit, in tokens (cache_aware;
	// default 1024; >= 0).
	MinMatchTokens *int64 `json:"min_match_tokens,omitempty" yaml:"min_match_tokens,omitempty"`
	// MinMatchRatio is the optional minimum hit as a fraction of the input
	// (cache_aware; unset; in (0, 1]).
	MinMatchRatio *float64 `json:"min_match_ratio,omitempty" yaml:"min_match_ratio,omitempty"`
	// CandidateMin is the lower bound on prefix holders kept (cache_aware;
	// default 8; >= 1).
	CandidateMin *int64 `json:"candidate_min,omitempty" yaml:"candidate_min,omitempty"`
	// CandidateRatio is the fraction of the group kept as holders
	// (cache_aware; default 0.05; in [0, 1]).
	CandidateRatio *float64 `json:"candidate_ratio,omitempty" yaml:"candidate_ratio,omitempty"`
	// CandidateMax is the upper bound on holders kept (cache_aware; default
	// 32; >= the effective CandidateMin).
	CandidateMax *int64 `json:"candidate_max,omitempty" yaml:"candidate_max,omitempty"`
	// SwitchMarginTokens is how many more uncached tokens a holder may have
	// and still be considered (cache_aware; default 1024; >= 0).
	SwitchMarginTokens *int64 `json:"switch_margin_tokens,omitempty" yaml:"switch_margin_tokens,omitempty"`
	// PressureGuard enables the pressure guard (cache_aware; default true).
	PressureGuard *bool `json:"pressure_guard,omitempty" yaml:"pressure_guard,omitempty"`
	// GuardAbsoluteTokens is the guard's absolute waiting-uncached-token
	// threshold (cache_aware; default 8192; > 0).
	GuardAbsoluteTokens *int64 `json:"guard_absolute_tokens,omitempty" yaml:"guard_absolute_tokens,omitempty"`
	// GuardAbsoluteMillis is the guard's optional absolute queue-time
	// threshold in milliseconds (cache_aware; unset; > 0).
	GuardAbsoluteMillis *int64 `json:"guard_absolute_ms,omitempty" yaml:"guard_absolute_ms,omitempty"`
	// GuardFactor is the guard's relative factor (cache_aware; default 1.5;
	// > 1).
	GuardFactor *float64 `json:"guard_factor,omitempty" yaml:"guard_factor,omitempty"`
	// QueueLimit is the soft queue gate on waiting requests (cache_aware;
	// unset; >= 1).
	QueueLimit *int64 `json:"queue_limit,omitempty" yaml:"queue_limit,omitempty"`
	// SaturationFloor is the saturation-pin floor (cache_aware; unset;
	// requires QueueLimit; 1 <= floor <= QueueLimit).
	SaturationFloor *int64 `json:"saturation_floor,omitempty" yaml:"saturation_floor,omitempty"`
	// MissChoices is k of the power-of-k miss fallback (cache_aware;
	// default 2; >= 1).
	MissChoices *int64 `json:"miss_choices,omitempty" yaml:"miss_choices,omitempty"`

	// DefaultPrefillTokensPerSec is the prefill throughput of one
	// data-parallel rank assumed while an engine reports none (ttft_aware;
	// default 10000; >= 1).
	DefaultPrefillTokensPerSec *int64 `json:"default_prefill_tokens_per_s,omitempty" yaml:"default_prefill_tokens_per_s,omitempty"`
	// TypicalRequestTokens is the prefill cost, in uncached tokens, assumed
	// per request when an engine's pending prefill tokens are unknown
	// (ttft_aware; default 2048; >= 1).
	TypicalRequestTokens *int64 `json:"typical_request_tokens,omitempty" yaml:"typical_request_tokens,omitempty"`
	// HotSpotMarginMillis is how much longer an estimated time to first
	// token on an engine that admits at once may be and still be preferred
	// to a best estimate on an engine whose batch is full (ttft_aware;
	// default 250; >= 0, 0 turns the guard off).
	HotSpotMarginMillis *int64 `json:"hot_spot_margin_ms,omitempty" yaml:"hot_spot_margin_ms,omitempty"`

	// IdleTimeout expires idle bindings (session_aware and sticky; default
	// 600s; > 0).
	IdleTimeout *Duration `json:"idle_timeout,omitempty" yaml:"idle_timeout,omitempty"`
	// Fallback picks for new or missing routing keys (sticky; one of
	// [StickyFallbacks]; default round_robin).
	Fallback *string `json:"fallback,omitempty" yaml:"fallback,omitempty"`
}

// AdmissionSpec holds optional hard per-engine caps; an unset cap is not
// checked. A set cap is >= 1 and rejects an engine whose metric is at or
// above it.
type AdmissionSpec struct {
	// MaxRunningRequests caps the engine's reported running requests.
	MaxRunningRequests *int64 `json:"max_running_requests,omitempty" yaml:"max_running_requests,omitempty"`
	// MaxWaitingRequests caps the engine's reported waiting requests.
	MaxWaitingRequests *int64 `json:"max_waiting_requests,omitempty" yaml:"max_waiting_requests,omitempty"`
	// MaxKVTokens caps the engine's reported KV tokens in use.
	MaxKVTokens *int64 `json:"max_kv_tokens,omitempty" yaml:"max_kv_tokens,omitempty"`
	// MaxPendingPrefillTokens caps the engine's reported waiting uncached
	// tokens.
	MaxPendingPrefillTokens *int64 `json:"max_pending_prefill_tokens,omitempty" yaml:"max_pending_prefill_tokens,omitempty"`
	// MaxInflightRequests caps this router's in-flight requests to the
	// engine (replaces the dropped max_in_flight and filter: overloaded).
	MaxInflightRequests *int64 `json:"max_inflight_requests,omitempty" yaml:"max_inflight_requests,omitempty"`
}

// DefaultPolicy returns the policy for stage when neither the group nor the
// document sets one: power-of-two with no admission caps. Every stage shares
// it today; taking the stage keeps call sites right if that changes.
func DefaultPolicy(stage string) PolicySpec {
	return PolicySpec{Type: PolicyPowerOfTwo}
}

// ResolvedPolicy is a PolicySpec with every default applied, so consumers
// never re-implement defaults. Settings that do not apply to Type are zero.
type ResolvedPolicy struct {
	// Type is one of [PolicyTypes].
	Type string
	// Admission holds the hard caps; zero fields are unchecked.
	Admission AdmissionLimits
	// CacheAware holds cache_aware tuning; zero unless Type is cache_aware.
	CacheAware CacheAwareSettings
	// TTFTAware holds ttft_aware tuning; zero unless Type is ttft_aware.
	TTFTAware TTFTAwareSettings
	// IdleTimeout is the binding idle expiry for session_aware and sticky;
	// zero otherwise.
	IdleTimeout time.Duration
	// Fallback is sticky's fallback policy type; empty otherwise.
	Fallback string
}

// AdmissionLimits holds resolved admission caps; 0 means the cap is unset
// (a set cap is always >= 1).
type AdmissionLimits struct {
	MaxRunningRequests      int64 // reported running requests
	MaxWaitingRequests      int64 // reported waiting requests
	MaxKVTokens             int64 // reported KV tokens in use
	MaxPendingPrefillTokens int64 // reported waiting uncached tokens
	MaxInflightRequests     int64 // router-local in-flight requests
}

// CacheAwareSettings holds resolved cache_aware tuning. Fields whose
// documented default is "unset" are 0 when unset.
// Each field has the meaning of the PolicySpec field of the same name.
type CacheAwareSettings struct {
	MinMatchTokens      int64   // minimum prefix hit in tokens
	MinMatchRatio       float64 // minimum hit fraction; 0 when the ratio gate is off
	CandidateMin        int64   // lower bound on holders kept
	CandidateRatio      float64 // fraction of the group kept as holders
	CandidateMax        int64   // upper bound on holders kept
	SwitchMarginTokens  int64   // uncached-token margin for considering a holder
	PressureGuard       bool    // whether the pressure guard may switch holders
	GuardAbsoluteTokens int64   // guard's absolute waiting-uncached-token threshold
	GuardAbsoluteMillis int64   // guard's queue-time threshold; 0 when off
	GuardFactor         float64 // guard's relative factor (> 1)
	QueueLimit          int64   // soft queue gate on waiting requests; 0 when off
	SaturationFloor     int64   // saturation-pin floor; 0 when off
	MissChoices         int64   // k of the power-of-k miss fallback
}

// TTFTAwareSettings holds resolved ttft_aware tuning. Each field has the
// meaning of the PolicySpec field of the same name.
type TTFTAwareSettings struct {
	DefaultPrefillTokensPerSec int64 // per-rank prefill rate assumed when none is reported
	TypicalRequestTokens       int64 // uncached tokens assumed per request of unknown size
	HotSpotMarginMillis        int64 // hot-spot guard margin; 0 turns the guard off
}

// Resolved returns p with every default applied. It assumes p is valid (see
// [Document.Validate]); out-of-range values are passed through unchanged.
func (p PolicySpec) Resolved() ResolvedPolicy {
	r := ResolvedPolicy{Type: p.Type}
	if a := p.Admission; a != nil {
		r.Admission = AdmissionLimits{
			MaxRunningRequests:      deref(a.MaxRunningRequests, 0),
			MaxWaitingRequests:      deref(a.MaxWaitingRequests, 0),
			MaxKVTokens:             deref(a.MaxKVTokens, 0),
			MaxPendingPrefillTokens: deref(a.MaxPendingPrefillTokens, 0),
			MaxInflightRequests:     deref(a.MaxInflightRequests, 0),
		}
	}
	switch p.Type {
	case PolicyCacheAware:
		r.CacheAware = CacheAwareSettings{
			MinMatchTokens:      deref(p.MinMatchTokens, DefaultMinMatchTokens),
			MinMatchRatio:       deref(p.MinMatchRatio, 0),
			CandidateMin:        deref(p.CandidateMin, DefaultCandidateMin),
			CandidateRatio:      deref(p.CandidateRatio, DefaultCandidateRatio),
			CandidateMax:        deref(p.CandidateMax, DefaultCandidateMax),
			SwitchMarginTokens:  deref(p.SwitchMarginTokens, DefaultSwitchMarginTokens),
			PressureGuard:       deref(p.PressureGuard, DefaultPressureGuard),
			GuardAbsoluteTokens: deref(p.GuardAbsoluteTokens, DefaultGuardAbsoluteTokens),
			GuardAbsoluteMillis: deref(p.GuardAbsoluteMillis, 0),
			GuardFactor:         deref(p.GuardFactor, DefaultGuardFactor),
			QueueLimit:          deref(p.QueueLimit, 0),
			SaturationFloor:     deref(p.SaturationFloor, 0),
			MissChoices:         deref(p.MissChoices, DefaultMissChoices),
		}
	case PolicyTTFTAware:
		r.TTFTAware = TTFTAwareSettings{
			DefaultPrefillTokensPerSec: deref(p.DefaultPrefillTokensPerSec, DefaultPrefillTokensPerSec),
			TypicalRequestTokens:       deref(p.TypicalRequestTokens, DefaultTypicalRequestTokens),
			HotSpotMarginMillis:        deref(p.HotSpotMarginMillis, DefaultHotSpotMarginMillis),
		}
	case PolicySessionAware:
		r.IdleTimeout = deref(p.IdleTimeout, Duration{DefaultIdleTimeout}).Duration
	case PolicySticky:
		r.IdleTimeout = deref(p.IdleTimeout, Duration{DefaultIdleTimeout}).Duration
		r.Fallback = deref(p.Fallback, DefaultStickyFallback)
	}
	return r
}

// Clone returns a deep copy of p.
func (p PolicySpec) Clone() PolicySpec {
	if p.Admission != nil {
		a := *p.Admission
		a.MaxRunningRequests = clonePtr(a.MaxRunningRequests)
		a.MaxWaitingRequests = clonePtr(a.MaxWaitingRequests)
		a.MaxKVTokens = clonePtr(a.MaxKVTokens)
		a.MaxPendingPrefillTokens = clonePtr(a.MaxPendingPrefillTokens)
		a.MaxInflightRequests = clonePtr(a.MaxInflightRequests)
		p.Admission = &a
	}
	p.MinMatchTokens = clonePtr(p.MinMatchTokens)
	p.MinMatchRatio = clonePtr(p.MinMatchRatio)
	p.CandidateMin = clonePtr(p.CandidateMin)
	p.CandidateRatio = clonePtr(p.CandidateRatio)
	p.CandidateMax = clonePtr(p.CandidateMax)
	p.SwitchMarginTokens = clonePtr(p.SwitchMarginTokens)
	p.PressureGuard = clonePtr(p.PressureGuard)
	p.GuardAbsoluteTokens = clonePtr(p.GuardAbsoluteTokens)
	p.GuardAbsoluteMillis = clonePtr(p.GuardAbsoluteMillis)
	p.GuardFactor = clonePtr(p.GuardFactor)
	p.QueueLimit = clonePtr(p.QueueLimit)
	p.SaturationFloor = clonePtr(p.SaturationFloor)
	p.MissChoices = clonePtr(p.MissChoices)
	p.DefaultPrefillTokensPerSec = clonePtr(p.DefaultPrefillTokensPerSec)
	p.TypicalRequestTokens = clonePtr(p.TypicalRequestTokens)
	p.HotSpotMarginMillis = clonePtr(p.HotSpotMarginMillis)
	p.IdleTimeout = clonePtr(p.IdleTimeout)
	p.Fallback = clonePtr(p.Fallback)
	return p
}

func (p *PolicySpec) clonePtr() *PolicySpec {
	if p == nil {
		return nil
	}
	c := p.Clone()
	return &c
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
