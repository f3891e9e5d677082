package config

import (
	"fmt"
	"slices"
	"strings"
)

// policySetting is one optional, per-type setting of a PolicySpec: its key,
// how the schema walk decodes it and the rules Validate checks, in one
// place. policySettings is the one list of them.
type policySetting struct {
	field[PolicySpec]
	types []string // the policy types it applies to
	guard bool     // pressure-guard tuning
	isSet func(*PolicySpec) bool
	check func(*PolicySpec) string // range problem, or ""
}

// setting describes the setting key of the *T field that ref points to:
// read decodes its value, check (when not nil) returns what is wrong with
// a set value v of p, or "".
func setting[T any](key string, types []string, ref func(*PolicySpec) **T,
	read func(*decoder, *node, string) (T, bool), check func(p *PolicySpec, v T) string) policySetting {
	return policySetting{
		field: field[PolicySpec]{key, func(d *decoder, p *PolicySpec, v *node, path string) {
			*ref(p) = opt(read(d, v, path))
		}},
		types: types,
		isSet: func(p *PolicySpec) bool { return *ref(p) != nil },
		check: func(p *PolicySpec) string {
			if check == nil {
				return ""
			}
			return check(p, **ref(p))
		},
	}
}

// guardTuning marks s as tuning of the pressure guard.
func guardTuning(s policySetting) policySetting {
	s.guard = true
	return s
}

var (
	cacheOnly  = []string{PolicyCacheAware}
	ttftOnly   = []string{PolicyTTFTAware}
	bindingTTL = []string{PolicySessionAware, PolicySticky}
)

// policySettings lists the settings in documentation order.
var policySettings = []policySetting{
	setting("min_match_tokens", cacheOnly, func(p *PolicySpec) **int64 { return &p.MinMatchTokens }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 0, "") }),
	setting("min_match_ratio", cacheOnly, func(p *PolicySpec) **float64 { return &p.MinMatchRatio }, (*decoder).float,
		func(_ *PolicySpec, r float64) string {
			if !(r > 0 && r <= 1) {
				return "must be in (0, 1]; omit it to turn the ratio gate off"
			}
			return ""
		}),
	setting("candidate_min", cacheOnly, func(p *PolicySpec) **int64 { return &p.CandidateMin }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 1, "") }),
	setting("candidate_ratio", cacheOnly, func(p *PolicySpec) **float64 { return &p.CandidateRatio }, (*decoder).float,
		func(_ *PolicySpec, r float64) string {
			if !(r >= 0 && r <= 1) {
				return "must be in [0, 1]"
			}
			return ""
		}),
	setting("candidate_max", cacheOnly, func(p *PolicySpec) **int64 { return &p.CandidateMax }, (*decoder).int,
		func(p *PolicySpec, v int64) string {
			lo := deref(p.CandidateMin, DefaultCandidateMin)
			if lo < 1 {
				return atLeast(v, 1, "")
			}
			if v < lo {
				if p.CandidateMin == nil {
					return fmt.Sprintf("must be >= candidate_min (default %d); raise it or set a lower candidate_min", lo)
				}
				return fmt.Sprintf("must be >= candidate_min (%d); raise it or lower candidate_min", lo)
			}
			return ""
		}),
	setting("switch_margin_tokens", cacheOnly, func(p *PolicySpec) **int64 { return &p.SwitchMarginTokens }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 0, "") }),
	guardTuning(setting("pressure_guard", cacheOnly, func(p *PolicySpec) **bool { return &p.PressureGuard }, (*decoder).bool, nil)),
	guardTuning(setting("guard_absolute_tokens", cacheOnly, func(p *PolicySpec) **int64 { return &p.GuardAbsoluteTokens }, (*decoder).int,
		func(p *PolicySpec, v int64) string { return guardOn(p, atLeast(v, 1, "")) })),
	guardTuning(setting("guard_absolute_ms", cacheOnly, func(p *PolicySpec) **int64 { return &p.GuardAbsoluteMillis }, (*decoder).int,
		func(p *PolicySpec, v int64) string {
			return guardOn(p, atLeast(v, 1, "omit it to turn the queue-time threshold off"))
		})),
	guardTuning(setting("guard_factor", cacheOnly, func(p *PolicySpec) **float64 { return &p.GuardFactor }, (*decoder).float,
		func(p *PolicySpec, f float64) string {
			if !(f > 1) {
				return guardOn(p, "must be > 1, such as 1.5")
			}
			return guardOn(p, "")
		})),
	setting("queue_limit", cacheOnly, func(p *PolicySpec) **int64 { return &p.QueueLimit }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 1, "omit it to turn the soft queue gate off") }),
	setting("saturation_floor", cacheOnly, func(p *PolicySpec) **int64 { return &p.SaturationFloor }, (*decoder).int,
		func(p *PolicySpec, f int64) string {
			switch {
			case p.QueueLimit == nil:
				return "requires queue_limit; set queue_limit >= saturation_floor or remove saturation_floor"
			case f < 1:
				return "must be >= 1"
			case *p.QueueLimit >= 1 && f > *p.QueueLimit:
				return fmt.Sprintf("must be <= queue_limit (%d); lower it or raise queue_limit", *p.QueueLimit)
			}
			return ""
		}),
	setting("miss_choices", cacheOnly, func(p *PolicySpec) **int64 { return &p.MissChoices }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 1, "") }),
	setting("default_prefill_tokens_per_s", ttftOnly, func(p *PolicySpec) **int64 { return &p.DefaultPrefillTokensPerSec }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 1, "") }),
	setting("typical_request_tokens", ttftOnly, func(p *PolicySpec) **int64 { return &p.TypicalRequestTokens }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 1, "") }),
	setting("hot_spot_margin_ms", ttftOnly, func(p *PolicySpec) **int64 { return &p.HotSpotMarginMillis }, (*decoder).int,
		func(_ *PolicySpec, v int64) string { return atLeast(v, 0, "0 turns the hot-spot guard off") }),
	setting("idle_timeout", bindingTTL, func(p *PolicySpec) **Duration { return &p.IdleTimeout }, (*decoder).duration,
		func(_ *PolicySpec, t Duration) string {
			if t.Duration <= 0 {
				return `must be positive, such as "600s"`
			}
			return ""
		}),
	setting("fallback", []string{PolicySticky}, func(p *PolicySpec) **string { return &p.Fallback }, (*decoder).str,
		func(_ *PolicySpec, f string) string {
			if msg, ok := droppedTypes[f]; ok {
				return fmt.Sprintf("%q %s", f, msg)
			}
			if !slices.Contains(StickyFallbacks(), f) {
				return fmt.Sprintf("unknown fallback %q; use one of %s", f, strings.Join(StickyFallbacks(), ", "))
			}
			return ""
		}),
}

func atLeast(v, lo int64, hint string) string {
	if v >= lo {
		return ""
	}
	msg := fmt.Sprintf("must be >= %d", lo)
	if hint != "" {
		msg += "; " + hint
	}
	return msg
}

// guardOn adds a problem for guard tuning that pressure_guard: false
// would silently ignore.
func guardOn(p *PolicySpec, rangeProblem string) string {
	if rangeProblem != "" {
		return rangeProblem
	}
	if p.PressureGuard != nil && !*p.PressureGuard {
		return "has no effect with pressure_guard: false; remove it or set pressure_guard: true"
	}
	return ""
}

// admissionCap is one cap of an AdmissionSpec: its key and its field.
type admissionCap struct {
	key   string
	limit func(*AdmissionSpec) **int64
}

// admissionCaps lists the caps in documentation order.
var admissionCaps = []admissionCap{
	{"max_running_requests", func(a *AdmissionSpec) **int64 { return &a.MaxRunningRequests }},
	{"max_waiting_requests", func(a *AdmissionSpec) **int64 { return &a.MaxWaitingRequests }},
	{"max_kv_tokens", func(a *AdmissionSpec) **int64 { return &a.MaxKVTokens }},
	{"max_pending_prefill_tokens", func(a *AdmissionSpec) **int64 { return &a.MaxPendingPrefillTokens }},
	{"max_inflight_requests", func(a *AdmissionSpec) **int64 { return &a.MaxInflightRequests }},
}
