package config

import "fmt"

// Defaults of the ttft_slo block.
const (
	// DefaultTTFTSLOMaxTargetMillis is the largest request target accepted
	// when ttft_slo.max_target_ms is unset: ten minutes. A target above it
	// is refused as a mistake (seconds sent as milliseconds, a timestamp).
	DefaultTTFTSLOMaxTargetMillis int64 = 600_000
	// maxTTFTSLOMaxTargetMillis bounds max_target_ms itself: one day.
	maxTTFTSLOMaxTargetMillis int64 = 86_400_000
)

// TTFTSLOSpec is the document's ttft_slo block: the time-to-first-token
// preference of the bucket order (docs/decisions.md, "TTFT target"). When
// enabled, a Decide request carrying ttft_slo_ms tries the buckets whose
// predicted time to first token meets it first, then the others, each part
// in capacity order; a request without a target keeps capacity order.
//
// The prediction is ttft_aware's estimate, whatever policy a group runs:
// DefaultPrefillTokensPerSec and TypicalRequestTokens play the part they
// play in a ttft_aware policy.
type TTFTSLOSpec struct {
	// Enabled is required in the block: true turns the preference on; false
	// keeps the block but ignores request targets (any value, valid or not).
	Enabled *bool `json:"enabled,omitempty" yaml:"enabled,omitempty"`
	// MaxTargetMillis is the largest ttft_slo_ms a request may carry; nil
	// means [DefaultTTFTSLOMaxTargetMillis].
	MaxTargetMillis *int64 `json:"max_target_ms,omitempty" yaml:"max_target_ms,omitempty"`
	// DefaultPrefillTokensPerSec is the per-rank prefill rate assumed for an
	// engine that reports none; nil means [DefaultPrefillTokensPerSec].
	DefaultPrefillTokensPerSec *int64 `json:"default_prefill_tokens_per_s,omitempty" yaml:"default_prefill_tokens_per_s,omitempty"`
	// TypicalRequestTokens is the prefill cost assumed per queued request
	// of unknown size; nil means [DefaultTypicalRequestTokens].
	TypicalRequestTokens *int64 `json:"typical_request_tokens,omitempty" yaml:"typical_request_tokens,omitempty"`
}

// TTFTSLO is a resolved ttft_slo block. Its zero value is the preference
// turned off.
type TTFTSLO struct {
	// Enabled reports whether request targets order the buckets.
	Enabled bool
	// MaxTargetMillis is the largest target accepted.
	MaxTargetMillis int64
	// Estimate holds the estimator's settings (HotSpotMarginMillis unused).
	Estimate TTFTAwareSettings
}

// ResolvedTTFTSLO returns d's resolved ttft_slo block: off when d or the block is
// nil or enabled is false. It assumes d is valid.
func (d *Document) ResolvedTTFTSLO() TTFTSLO {
	if d == nil || d.TTFTSLO == nil || d.TTFTSLO.Enabled == nil || !*d.TTFTSLO.Enabled {
		return TTFTSLO{}
	}
	s := d.TTFTSLO
	return TTFTSLO{
		Enabled:         true,
		MaxTargetMillis: deref(s.MaxTargetMillis, DefaultTTFTSLOMaxTargetMillis),
		Estimate: TTFTAwareSettings{
			DefaultPrefillTokensPerSec: deref(s.DefaultPrefillTokensPerSec, DefaultPrefillTokensPerSec),
			TypicalRequestTokens:       deref(s.TypicalRequestTokens, DefaultTypicalRequestTokens),
		},
	}
}

// clone returns a deep copy of s; nil yields nil.
func (s *TTFTSLOSpec) clone() *TTFTSLOSpec {
	if s == nil {
		return nil
	}
	return &TTFTSLOSpec{Enabled: clonePtr(s.Enabled), MaxTargetMillis: clonePtr(s.MaxTargetMillis),
		DefaultPrefillTokensPerSec: clonePtr(s.DefaultPrefillTokensPerSec), TypicalRequestTokens: clonePtr(s.TypicalRequestTokens)}
}

var ttftSLOFields = []field[TTFTSLOSpec]{
	{"enabled", func(d *decoder, s *TTFTSLOSpec, v *node, p string) { s.Enabled = opt(d.bool(v, p)) }},
	{"max_target_ms", func(d *decoder, s *TTFTSLOSpec, v *node, p string) { s.MaxTargetMillis = opt(d.int(v, p)) }},
	{"default_prefill_tokens_per_s", func(d *decoder, s *TTFTSLOSpec, v *node, p string) {
		s.DefaultPrefillTokensPerSec = opt(d.int(v, p))
	}},
	{"typical_request_tokens", func(d *decoder, s *TTFTSLOSpec, v *node, p string) { s.TypicalRequestTokens = opt(d.int(v, p)) }},
}

// ttftSLOField is the document's ttft_slo key.
var ttftSLOField = field[Document]{"ttft_slo", func(d *decoder, doc *Document, v *node, p string) {
	doc.TTFTSLO = objectOf(d, v, p, ttftSLOFields)
}}

// ttftSLO checks the ttft_slo block.
func (v *validator) ttftSLO(s *TTFTSLOSpec) {
	if s == nil {
		return
	}
	const p = "ttft_slo"
	if s.Enabled == nil {
		v.addf(join(p, "enabled"), "required; set true to try the buckets whose predicted time to first token meets a request's ttft_slo_ms first, or false to ignore request targets")
	}
	if m := s.MaxTargetMillis; m != nil && (*m < 1 || *m > maxTTFTSLOMaxTargetMillis) {
		v.addf(join(p, "max_target_ms"), "must be in [1, %d] (one day); omit it for %d (ten minutes)", maxTTFTSLOMaxTargetMillis, DefaultTTFTSLOMaxTargetMillis)
	}
	if r := s.DefaultPrefillTokensPerSec; r != nil {
		if msg := atLeast(*r, 1, fmt.Sprintf("omit it for %d", DefaultPrefillTokensPerSec)); msg != "" {
			v.addf(join(p, "default_prefill_tokens_per_s"), "%s", msg)
		}
	}
	if n := s.TypicalRequestTokens; n != nil {
		if msg := atLeast(*n, 1, fmt.Sprintf("omit it for %d", DefaultTypicalRequestTokens)); msg != "" {
			v.addf(join(p, "typical_request_tokens"), "%s", msg)
		}
	}
}
