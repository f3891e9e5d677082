package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t *testing.T, data []byte, f Format) *Document {
	t.Helper()
	d, err := Parse(data, f)
	if err != nil {
		t.Fatalf("Parse() error: %v", err)
	}
	return d
}

// problemsOf extracts the problems of a *ValidationError, or fails.
func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var verr *ValidationError
	if !errors.As(err, &verr) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error = %T %v, want *ValidationError matching ErrInvalid", err, err)
	}
	return verr.Problems
}

func TestParsePolicyDesignExample(t *testing.T) {
	t.Parallel()
	d := mustParse(t, readTestdata(t, "policy_design_example.yaml"), FormatAuto)
	want := &Document{Buckets: []BucketSpec{
		{
			ID: "short-context", Rank: 10, Limits: Limits{Min: 0, Max: ptr[int64](4096)}, MaxContextTokens: ptr[int64](8192),
			Groups: GroupsSpec{PD: &PDSpec{
				Prefill: &GroupSpec{EngineIDs: ids("P1", "P2"), Policy: &PolicySpec{Type: PolicyCacheAware,
					Admission: &AdmissionSpec{MaxRunningRequests: ptr[int64](64), MaxKVTokens: ptr[int64](1048576)}}},
				Decode: &GroupSpec{EngineIDs: ids("D1", "D2"), Policy: &PolicySpec{Type: PolicyPowerOfTwo,
					Admission: &AdmissionSpec{MaxRunningRequests: ptr[int64](64), MaxKVTokens: ptr[int64](1048576)}}},
			}},
		},
		{
			ID: "long-context", Rank: 20, Limits: Limits{Min: 0, Max: ptr[int64](131072)}, MaxContextTokens: ptr[int64](131072),
			Groups: GroupsSpec{PD: &PDSpec{
				Prefill: &GroupSpec{EngineIDs: ids("P3", "P4"), Policy: &PolicySpec{Type: PolicyCacheAware,
					Admission: &AdmissionSpec{MaxRunningRequests: ptr[int64](64), MaxKVTokens: ptr[int64](1048576)}}},
				Decode: &GroupSpec{EngineIDs: ids("D3", "D4"), Policy: &PolicySpec{Type: PolicyPowerOfTwo,
					Admission: &AdmissionSpec{MaxRunningRequests: ptr[int64](64), MaxKVTokens: ptr[int64](1048576)}}},
			}},
		},
	}}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("Parse(§7 example) mismatch (-want +got):\n%s", diff)
	}
	js, err := Marshal(d, FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "policy_design_example.golden.json", js)
	// The JSON form is itself a valid input and means the same.
	if diff := cmp.Diff(d, mustParse(t, js, FormatAuto)); diff != "" {
		t.Errorf("Parse(JSON form) mismatch (-yaml +json):\n%s", diff)
	}
}

func TestParseFull(t *testing.T) {
	t.Parallel()
	d := mustParse(t, readTestdata(t, "full.yaml"), FormatYAML)
	y, err := Marshal(d, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "full.golden.yaml", y)
	if got := d.Engines[0].BootstrapPort; got != 8998 {
		t.Errorf("bootstrap_port = %d, want 8998", got)
	}
	p := d.PolicyFor("llama", StagePrefill, d.Buckets[0].Groups.PD.Prefill).Resolved()
	if p.CacheAware.MinMatchTokens != 2048 || p.CacheAware.CandidateMax != 16 || p.CacheAware.QueueLimit != 4 {
		t.Errorf("resolved cache_aware = %+v", p.CacheAware)
	}
	if got := d.PolicyFor("llama", StagePlain, nil).Resolved().IdleTimeout; got != 90*time.Second {
		t.Errorf("models.llama plain idle_timeout = %v, want 1m30s", got)
	}
}

func TestParseProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []Problem
	}{
		{name: "empty", in: ""},
		{name: "comments only", in: "# nothing\n"},
		{name: "null document", in: "~\n"},
		{name: "empty json object", in: " {}"},
		{name: "root not a mapping", in: "- a\n- b\n", want: []Problem{
			{"", "must be a mapping, not a list (line 1)"},
		}},
		{name: "yaml syntax", in: "buckets: [\n", want: []Problem{
			{"", "invalid YAML: line 1: did not find expected node content"},
		}},
		{name: "two yaml documents", in: "buckets: ~\n---\nworkers: ~\n", want: []Problem{
			{"", "more than one YAML document; put the whole configuration in one (line 2)"},
		}},
		{name: "unknown keys", in: `
bucket: []
buckets:
  - id: a
    rnak: 3
    groups: {plain: {policy: {typ: random, colour: blue}}}
`, want: []Problem{
			{"bucket", `unknown key; did you mean "buckets"? (line 2)`},
			{"buckets[0].rnak", `unknown key; did you mean "rank"? (line 5)`},
			{"buckets[0].groups.plain.policy.typ", `unknown key; did you mean "type"? (line 6)`},
			{"buckets[0].groups.plain.policy.colour", "unknown key; valid keys here are type, admission, min_match_tokens, min_match_ratio, candidate_min, candidate_ratio, candidate_max, switch_margin_tokens, pressure_guard, guard_absolute_tokens, guard_absolute_ms, guard_factor, queue_limit, saturation_floor, miss_choices, default_prefill_tokens_per_s, typical_request_tokens, hot_spot_margin_ms, idle_timeout, fallback (line 6)"},
			{"buckets[0].groups.plain.policy.type", "required; use one of round_robin, random, power_of_two, load_based, cache_aware, session_aware, sticky, ttft_aware (line 6)"},
		}},
		{name: "type mismatches", in: `
buckets:
  - id: [a]
    rank: high
    limits: {min: 1.5, max: 99999999999999999999}
    max_context_tokens: true
    models: m
    groups:
      plain:
        worker_ids: [x, {y: 1}, ~]
        policy:
          type: cache_aware
          pressure_guard: "yes"
          min_match_ratio: .nan
          guard_factor: high
          idle_timeout: 600
  - 7
`, want: []Problem{
			{"buckets[0].id", "must be a string, not a list (line 3)"},
			{"buckets[0].rank", "must be an integer, not a string (line 4)"},
			{"buckets[0].limits.min", "must be an integer, not a number (line 5)"},
			{"buckets[0].limits.max", "must be an integer, not a number (line 5)"},
			{"buckets[0].max_context_tokens", "must be an integer, not a boolean (line 6)"},
			{"buckets[0].models", "must be a list of strings, not a string (line 7)"},
			{"buckets[0].groups.plain.worker_ids[1]", "must be a string, not a mapping (line 10)"},
			{"buckets[0].groups.plain.worker_ids[2]", "must be a string, not null (line 10)"},
			{"buckets[0].groups.plain.policy.pressure_guard", "must be true or false, not a string (line 13)"},
			{"buckets[0].groups.plain.policy.min_match_ratio", "must be a finite number (line 14)"},
			{"buckets[0].groups.plain.policy.guard_factor", "must be a number, not a string (line 15)"},
			{"buckets[0].groups.plain.policy.idle_timeout", `must be a Go duration string such as "600s" (line 16)`},
			{"buckets[1]", "must be a mapping, not an integer (line 17)"},
		}},
		{name: "shape errors hide their consequences", in: `
buckets:
  - id: a
    groups: {pd: [x]}
  - id: b
    groups: 3
  - id: c
    groups:
      pd: {prefill: 1, decode: {}}
`, want: []Problem{
			{"buckets[0].groups.pd", "must be a mapping, not a list (line 4)"},
			{"buckets[1].groups", "must be a mapping, not an integer (line 6)"},
			{"buckets[2].groups.pd.prefill", "must be a mapping, not an integer (line 9)"},
		}},
		{name: "integers written as whole floats and hex", in: `
buckets:
  - id: a
    rank: 1e1
    limits: {max: 0x1000}
    groups: {plain: {}}
`},
		{name: "duplicate keys", in: `
buckets:
  - id: a
    id: b
    groups: {plain: {}}
`, want: []Problem{
			{"buckets[0].id", "duplicate key; it is first set at line 3, keep one (line 4)"},
		}},
		{name: "null groups are empty groups", in: `
buckets:
  - id: a
    groups:
      plain:
  - id: b
    groups:
      pd:
        prefill:
        decode: ~
  - id: c
    groups:
      pd:
`, want: []Problem{
			{"buckets[2].groups.pd.prefill", "required; a pd bucket needs both prefill and decode groups (line 13)"},
			{"buckets[2].groups.pd.decode", "required; a pd bucket needs both prefill and decode groups (line 13)"},
		}},
		{name: "policy written as a bare type", in: `
default_policy:
  plain: round_robin
  prefill: score_policy
`, want: []Problem{
			{"default_policy.plain", "must be a mapping; write {type: round_robin} (line 3)"},
			{"default_policy.prefill", `policy "score_policy" removed; use cache_aware (prefix reuse) or power_of_two (load) (line 4)`},
		}},
		{name: "validation problems carry lines", in: `
workers:
  - id: p1
    url: http://p1
    models: [m]
    role: prefill
buckets:
  - id: a
    groups:
      pd:
        prefill: {worker_ids: [p1]}
        decode:
          worker_ids: [p1]
          policy: {type: cache_aware, fallback: random}
`, want: []Problem{
			{"buckets[0].groups.pd.decode.worker_ids[0]", `worker "p1" has role prefill; a decode group takes decode engines (line 13)`},
			{"buckets[0].groups.pd.decode.policy.type", "cache_aware needs prefill work; use power_of_two or load_based for decode (line 14)"},
			{"buckets[0].groups.pd.decode.policy.fallback", "only valid for type sticky (type is cache_aware) (line 14)"},
		}},
		{name: "explicit empty buckets", in: "buckets: []\n", want: []Problem{
			{"buckets", "empty list; omit the key for the default plain and pd buckets (line 1)"},
		}},
		{name: "anchors and merge keys", in: `
default_policy:
  prefill: &cache {type: cache_aware, min_match_tokens: 512}
buckets:
  - id: a
    groups:
      plain:
        policy:
          <<: *cache
          min_match_tokens: 256
`},
		{name: "alias cycle", in: "a: &x [*x]\n", want: []Problem{
			{"", "alias *x refers to a value that contains it (line 1)"},
			{"a", `unknown key; valid keys here are workers, buckets, default_policy, models, ttft_slo, shards (line 1)`},
		}},
		{name: "model map keys", in: `
models:
  "org/m": {default_policy: {decode: {type: cache_aware}}}
  m2: {defaults: {}}
`, want: []Problem{
			{`models["org/m"].default_policy.decode.type`, "cache_aware needs prefill work; use power_of_two or load_based for decode (line 3)"},
			{`models["m2"].defaults`, `unknown key; valid keys here are default_policy (line 4)`},
		}},
		{name: "labels and ports", in: `
workers:
  - id: p
    url: http://p
    models: [m]
    role: prefill
    bootstrap_port: 70000
    labels: {zone: [a]}
`, want: []Problem{
			{"workers[0].bootstrap_port", "must be a port number between 1 and 65535 (line 7)"},
			{`workers[0].labels["zone"]`, "must be a string, not a list (line 8)"},
		}},
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

func TestParseDroppedOptions(t *testing.T) {
	t.Parallel()
	const (
		fused    = "removed; use cache_aware (prefix reuse) or power_of_two (load)"
		legacy   = "removed; use session_aware or sticky"
		stable   = "removed; each PD bucket picks prefill and decode from its own groups"
		affinity = "removed; only strict admitted-binding reuse remains (session_aware/sticky)"
		prefix   = "removed; not equivalent to cache_aware's min_match_tokens gate — set policy type cache_aware with min_match_tokens"
		inflight = "removed; use admission.max_inflight_requests"
	)
	// policyAt places a policy body in a plain bucket's group at line 4.
	policyAt := func(body string) string {
		return "buckets:\n  - id: a\n    groups:\n      plain: {policy: " + body + "}\n"
	}
	tests := []struct {
		name string
		in   string
		want []Problem
	}{
		{"type fused_score", policyAt("{type: fused_score}"), []Problem{
			{"buckets[0].groups.plain.policy.type", `type "fused_score" ` + fused + " (line 4)"}}},
		{"type score_policy", policyAt("{type: score_policy}"), []Problem{
			{"buckets[0].groups.plain.policy.type", `type "score_policy" ` + fused + " (line 4)"}}},
		{"fuse keys", policyAt("{type: power_of_two, fuse: [load], fuse_terms: x, fuse_weights: {a: 1}}"), []Problem{
			{"buckets[0].groups.plain.policy.fuse", fused + " (line 4)"},
			{"buckets[0].groups.plain.policy.fuse_terms", fused + " (line 4)"},
			{"buckets[0].groups.plain.policy.fuse_weights", fused + " (line 4)"}}},
		{"type legacy_host_affinity", policyAt("{type: legacy_host_affinity}"), []Problem{
			{"buckets[0].groups.plain.policy.type", `type "legacy_host_affinity" ` + legacy + " (line 4)"}}},
		{"key legacy_host_affinity", "legacy_host_affinity: true\n", []Problem{
			{"legacy_host_affinity", legacy + " (line 1)"}}},
		{"decode-policy legacy value", "decode_policy: legacy_host_affinity\n", []Problem{
			{"decode_policy", legacy + " (line 1)"}}},
		{"stable_pair top level", "stable_pair: true\n", []Problem{
			{"stable_pair", stable + " (line 1)"}}},
		{"stable-pair CLI spelling in bucket", "buckets:\n  - id: a\n    stable-pair: true\n    groups: {plain: {}}\n", []Problem{
			{"buckets[0].stable-pair", stable + " (line 3)"}}},
		{"affinity_mode soft", policyAt("{type: session_aware, affinity_mode: soft}"), []Problem{
			{"buckets[0].groups.plain.policy.affinity_mode", affinity + " (line 4)"}}},
		{"affinity_mode in group", "buckets:\n  - id: a\n    groups:\n      plain: {affinity_mode: strict}\n", []Problem{
			{"buckets[0].groups.plain.affinity_mode", affinity + " (line 4)"}}},
		{"filter prefix_cache", policyAt("{type: random, filter: prefix_cache}"), []Problem{
			{"buckets[0].groups.plain.policy.filter", prefix + " (line 4)"}}},
		{"prefix_cache_min_share", "default_policy:\n  plain: {type: cache_aware, prefix_cache_min_share: 0.5}\n", []Problem{
			{"default_policy.plain.prefix_cache_min_share", prefix + " (line 2)"}}},
		{"filter overloaded", "filter: overloaded\n", []Problem{
			{"filter", inflight + " (line 1)"}}},
		{"filter list", "buckets:\n  - id: a\n    filter: [overloaded, prefix_cache]\n    groups: {plain: {}}\n", []Problem{
			{"buckets[0].filter[0]", inflight + " (line 3)"},
			{"buckets[0].filter[1]", prefix + " (line 3)"}}},
		{"max_in_flight", policyAt("{type: random, max_in_flight: 8}"), []Problem{
			{"buckets[0].groups.plain.policy.max_in_flight", inflight + " (line 4)"}}},
		{"max-in-flight in admission", policyAt("{type: random, admission: {max-in-flight: 8}}"), []Problem{
			{"buckets[0].groups.plain.policy.admission.max-in-flight", inflight + " (line 4)"}}},
		{"sticky fallback legacy", policyAt("{type: sticky, fallback: legacy_host_affinity}"), []Problem{
			{"buckets[0].groups.plain.policy.fallback", `"legacy_host_affinity" ` + legacy + " (line 4)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.in), FormatYAML)
			if diff := cmp.Diff(tt.want, problemsOf(t, err)); diff != "" {
				t.Errorf("Parse(%q) problems mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		f    Format
		want []Problem
	}{
		{name: "valid", f: FormatJSON, in: `{"buckets":[{"id":"a","groups":{"plain":{"worker_ids":[]}}}]}`},
		{name: "auto detects json", f: FormatAuto, in: "\n  {\"buckets\": [{\"id\": \"a\", \"groups\": {\"plain\": {}}}]}"},
		{name: "lines", f: FormatJSON, in: "{\n  \"buckets\": [\n    {\n      \"id\": \"a\",\n      \"fuse\": 1,\n      \"groups\": {\"plain\": {\"policy\": {\"type\": \"x\"}}}\n    }\n  ]\n}\n", want: []Problem{
			{"buckets[0].fuse", "removed; use cache_aware (prefix reuse) or power_of_two (load) (line 5)"},
			{"buckets[0].groups.plain.policy.type", `unknown policy type "x"; use one of round_robin, random, power_of_two, load_based, cache_aware, session_aware, sticky, ttft_aware (line 6)`},
		}},
		{name: "syntax", f: FormatJSON, in: "{\n\"buckets\": [,]}", want: []Problem{
			{"", "invalid JSON: invalid character ',' looking for beginning of value (line 2)"},
		}},
		{name: "trailing data", f: FormatJSON, in: `{} {}`, want: []Problem{
			{"", "invalid JSON: unexpected data after the top-level value (line 1)"},
		}},
		{name: "duplicate key", f: FormatJSON, in: "{\"buckets\": null,\n\"buckets\": []}", want: []Problem{
			{"buckets", "duplicate key; it is first set at line 1, keep one (line 2)"},
		}},
		{name: "number too large for int", f: FormatJSON, in: `{"buckets":[{"id":"a","rank":1e300,"groups":{"plain":{}}}]}`, want: []Problem{
			{"buckets[0].rank", "must be an integer, not a number (line 1)"},
		}},
		{name: "empty json", f: FormatJSON, in: ``, want: []Problem{
			{"", "invalid JSON: empty document (line 1)"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.in), tt.f)
			if diff := cmp.Diff(tt.want, problemsOf(t, err)); diff != "" {
				t.Errorf("Parse() problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseManyProblems(t *testing.T) {
	t.Parallel()
	_, err := Parse(readTestdata(t, "many_problems.yaml"), FormatAuto)
	if err == nil {
		t.Fatal("Parse(many_problems.yaml) succeeded, want every problem listed")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
	}
	golden(t, "many_problems.golden.txt", []byte(err.Error()+"\n"))
	if n := len(problemsOf(t, err)); n < 20 {
		t.Errorf("got %d problems, want every one of the >= 20 planted", n)
	}
}

func TestParseUnknownFormat(t *testing.T) {
	t.Parallel()
	if _, err := Parse([]byte("{}"), Format(9)); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("Parse(unknown format) = %v, want a non-validation error", err)
	}
}

func TestFormatForPath(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]Format{"a.json": FormatJSON, "a.YAML": FormatYAML, "b.yml": FormatYAML, "conf": FormatAuto} {
		if got := FormatForPath(path); got != want {
			t.Errorf("FormatForPath(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestParseBillionLaughs(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	_, err := Parse([]byte(b.String()), FormatYAML)
	if err == nil || !strings.Contains(err.Error(), "document too large") {
		t.Errorf("Parse(alias bomb) = %v, want document too large", err)
	}
}

func TestParseDeepJSON(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	_, err := Parse([]byte(`{"buckets":`+in+`}`), FormatJSON)
	if err == nil || !strings.Contains(err.Error(), "nested more than 1000 levels deep") {
		t.Errorf("Parse(deep JSON) = %v, want a nesting error", err)
	}
}
