package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTTFTSLO(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want TTFTSLO
	}{
		{name: "absent", in: `buckets: [{id: a, groups: {plain: {}}}]`, want: TTFTSLO{}},
		{name: "disabled", in: `ttft_slo: {enabled: false, max_target_ms: 5}`, want: TTFTSLO{}},
		{name: "defaults", in: `ttft_slo: {enabled: true}`, want: TTFTSLO{Enabled: true, MaxTargetMillis: 600000,
			Estimate: TTFTAwareSettings{DefaultPrefillTokensPerSec: 10000, TypicalRequestTokens: 2048}}},
		{name: "set", in: `
ttft_slo:
  enabled: true
  max_target_ms: 30000
  default_prefill_tokens_per_s: 4000
  typical_request_tokens: 512
`, want: TTFTSLO{Enabled: true, MaxTargetMillis: 30000,
			Estimate: TTFTAwareSettings{DefaultPrefillTokensPerSec: 4000, TypicalRequestTokens: 512}}},
		{name: "json", in: `{"ttft_slo": {"enabled": true, "max_target_ms": 1}}`, want: TTFTSLO{Enabled: true, MaxTargetMillis: 1,
			Estimate: TTFTAwareSettings{DefaultPrefillTokensPerSec: 10000, TypicalRequestTokens: 2048}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc, err := Parse([]byte(tt.in), FormatAuto)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, doc.ResolvedTTFTSLO()); diff != "" {
				t.Errorf("ResolvedTTFTSLO() mismatch (-want +got):\n%s", diff)
			}
			if doc.IsEmpty() && doc.TTFTSLO != nil {
				t.Errorf("IsEmpty() with a ttft_slo block")
			}
			// The block survives a round trip through both encodings and Clone.
			for _, f := range []Format{FormatYAML, FormatJSON} {
				b, err := Marshal(doc, f)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(doc, mustParse(t, b, f)); diff != "" {
					t.Errorf("Parse(Marshal(%v)) mismatch (-want +got):\n%s", f, diff)
				}
			}
			if diff := cmp.Diff(doc, doc.Clone()); diff != "" {
				t.Errorf("Clone() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTTFTSLOProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []Problem
	}{
		{name: "enabled missing", in: `
ttft_slo:
  max_target_ms: 1000
`, want: []Problem{{"ttft_slo.enabled", "required; set true to try the buckets whose predicted time to first token meets a request's ttft_slo_ms first, or false to ignore request targets (line 2)"}}},
		{name: "ranges", in: `
ttft_slo:
  enabled: true
  max_target_ms: 0
  default_prefill_tokens_per_s: 0
  typical_request_tokens: -1
`, want: []Problem{
			{"ttft_slo.max_target_ms", "must be in [1, 86400000] (one day); omit it for 600000 (ten minutes) (line 4)"},
			{"ttft_slo.default_prefill_tokens_per_s", "must be >= 1; omit it for 10000 (line 5)"},
			{"ttft_slo.typical_request_tokens", "must be >= 1; omit it for 2048 (line 6)"},
		}},
		{name: "absurd max", in: `ttft_slo: {enabled: true, max_target_ms: 86400001}`, want: []Problem{
			{"ttft_slo.max_target_ms", "must be in [1, 86400000] (one day); omit it for 600000 (ten minutes) (line 1)"}}},
		{name: "types and unknown keys", in: `
ttft_slo:
  enabled: "yes"
  max_target_ms: 1.5
  target_ms: 100
`, want: []Problem{
			{"ttft_slo.enabled", "must be true or false, not a string (line 3)"},
			{"ttft_slo.max_target_ms", "must be an integer, not a number (line 4)"},
			{"ttft_slo.target_ms", "unknown key; valid keys here are enabled, max_target_ms, default_prefill_tokens_per_s, typical_request_tokens (line 5)"},
		}},
		{name: "not a mapping", in: `ttft_slo: true`, want: []Problem{{"ttft_slo", "must be a mapping, not a boolean (line 1)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.in), FormatAuto)
			if diff := cmp.Diff(tt.want, problemsOf(t, err)); diff != "" {
				t.Errorf("Parse() problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
