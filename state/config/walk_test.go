package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseShapes covers each generic walk (walk.go) at every schema place
// that uses it: a case the schema exercises at one place (a duplicate
// model id, a null list item, a value out of range) also holds at the
// others.
func TestParseShapes(t *testing.T) {
	t.Parallel()
	// engine places a worker's settings at line 3.
	engine := func(body string) string {
		return "workers:\n  - {id: p, url: \"http://p\", models: [m], role: prefill,\n     " + body + "}\n"
	}
	tests := []struct {
		name string
		in   string
		want []Problem
	}{
		// mapOf: models and labels.
		{name: "duplicate model id", in: "models:\n  m: {}\n  m: {}\n", want: []Problem{
			{`models["m"]`, "duplicate key; it is first set at line 2, keep one (line 3)"},
		}},
		{name: "duplicate label", in: engine("labels: {zone: a, zone: b}"), want: []Problem{
			{`workers[0].labels["zone"]`, "duplicate key; it is first set at line 3, keep one (line 3)"},
		}},
		{name: "models not a mapping", in: "models: [m]\n", want: []Problem{
			{"models", "must be a mapping of model id to settings, not a list (line 1)"},
		}},
		{name: "labels not a mapping", in: engine("labels: zone"), want: []Problem{
			{"workers[0].labels", "must be a mapping of strings, not a string (line 3)"},
		}},
		{name: "model settings not a mapping", in: "models:\n  m: 3\n", want: []Problem{
			{`models["m"]`, "must be a mapping, not an integer (line 2)"},
		}},
		// listOf: workers, buckets and string lists.
		{name: "workers not a list", in: "workers: 3\n", want: []Problem{
			{"workers", "must be a list, not an integer (line 1)"},
		}},
		{name: "buckets not a list", in: "buckets: {a: 1}\n", want: []Problem{
			{"buckets", "must be a list, not a mapping (line 1)"},
		}},
		{name: "null worker", in: "workers: [~]\n", want: []Problem{
			{"workers[0]", "must be a mapping, not null (line 1)"},
		}},
		{name: "null bucket", in: "buckets:\n  -\n", want: []Problem{
			{"buckets[0]", "must be a mapping, not null (line 2)"},
		}},
		{name: "lora adapters", in: engine("lora_adapters: [a, ~, [b]]"), want: []Problem{
			{"workers[0].lora_adapters[1]", "must be a string, not null (line 3)"},
			{"workers[0].lora_adapters[2]", "must be a string, not a list (line 3)"},
		}},
		{name: "engine models not a list", in: "workers:\n  - {id: p, url: \"http://p\", role: plain, models: m}\n", want: []Problem{
			{"workers[0].models", "must be a list of strings, not a string (line 2)"},
		}},
		// intIn: bootstrap_port and dp_size.
		{name: "port below range", in: engine("bootstrap_port: 0"), want: []Problem{
			{"workers[0].bootstrap_port", "must be a port number between 1 and 65535 (line 3)"},
		}},
		{name: "dp_size above range", in: engine("dp_size: 1025"), want: []Problem{
			{"workers[0].dp_size", "must be between 0 and 1024 (line 3)"},
		}},
		{name: "dp_size below range", in: engine("dp_size: -1"), want: []Problem{
			{"workers[0].dp_size", "must be between 0 and 1024 (line 3)"},
		}},
		{name: "dp_size not an integer", in: engine("dp_size: 1.5"), want: []Problem{
			{"workers[0].dp_size", "must be an integer, not a number (line 3)"},
		}},
		// objectOf: optional mappings.
		{name: "admission not a mapping", in: "default_policy: {plain: {type: random, admission: 3}}\n", want: []Problem{
			{"default_policy.plain.admission", "must be a mapping, not an integer (line 1)"},
		}},
		{name: "default_policy not a mapping", in: "default_policy: [plain]\n", want: []Problem{
			{"default_policy", "must be a mapping, not a list (line 1)"},
		}},
		{name: "model default_policy not a mapping", in: "models: {m: {default_policy: 1}}\n", want: []Problem{
			{`models["m"].default_policy`, "must be a mapping, not an integer (line 1)"},
		}},
		{name: "limits not a mapping", in: "buckets:\n  - id: a\n    limits: 5\n    groups: {plain: {}}\n", want: []Problem{
			{"buckets[0].limits", "must be a mapping, not an integer (line 3)"},
		}},
		{name: "null groups", in: "buckets:\n  - id: a\n    groups:\n", want: []Problem{
			{"buckets[0].groups", "required; set exactly one of plain or pd (line 3)"},
		}},
		{name: "group not a mapping", in: "buckets:\n  - id: a\n    groups: {plain: [x]}\n", want: []Problem{
			{"buckets[0].groups.plain", "must be a mapping, not a list (line 3)"},
		}},
		// The settings tables: admission caps and policy settings.
		{name: "admission keys", in: "default_policy: {plain: {type: random, admission: {max_runing_requests: 1, colour: 2, max_kv_tokens: x}}}\n", want: []Problem{
			{"default_policy.plain.admission.max_runing_requests", `unknown key; did you mean "max_running_requests"? (line 1)`},
			{"default_policy.plain.admission.colour", "unknown key; valid keys here are max_running_requests, max_waiting_requests, max_kv_tokens, max_pending_prefill_tokens, max_inflight_requests (line 1)"},
			{"default_policy.plain.admission.max_kv_tokens", "must be an integer, not a string (line 1)"},
		}},
		{name: "policy settings of the wrong type", in: "default_policy:\n  prefill: {type: cache_aware, candidate_ratio: [1], queue_limit: 1.5, fallback: {a: 1}}\n", want: []Problem{
			{"default_policy.prefill.candidate_ratio", "must be a number, not a list (line 2)"},
			{"default_policy.prefill.queue_limit", "must be an integer, not a number (line 2)"},
			{"default_policy.prefill.fallback", "must be a string, not a mapping (line 2)"},
		}},
		{name: "null optional settings", in: "default_policy: {plain: {type: random, admission: ~, fallback: ~}, decode: ~}\nmodels: {m: ~}\n"},
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

// TestParseShapeValues: what the generic walks yield for absent, empty and
// null values.
func TestParseShapeValues(t *testing.T) {
	t.Parallel()
	in := `
workers:
  - {id: p, url: "http://p", models: [m], role: plain, labels: {}, lora_adapters: []}
  - {id: q, url: "http://q", models: [m], role: plain, labels: {zone: ~}, lora_adapters: ~}
buckets:
  - id: a
    limits: ~
    groups: {plain: {worker_ids: ~}}
  - id: b
    groups: {plain: {worker_ids: []}}
  - id: c
    groups: {pd: ~}
default_policy: {plain: ~, decode: {type: random, admission: ~}}
models: {}
`
	want := &Document{
		Engines: []EngineSpec{
			{ID: "p", URL: "http://p", Models: []string{"m"}, Role: RolePlain, LoRAAdapters: []string{}},
			{ID: "q", URL: "http://q", Models: []string{"m"}, Role: RolePlain, Labels: map[string]string{"zone": ""}},
		},
		Buckets: []BucketSpec{
			{ID: "a", Groups: GroupsSpec{Plain: &GroupSpec{}}},
			{ID: "b", Groups: GroupsSpec{Plain: &GroupSpec{EngineIDs: ids()}}},
			{ID: "c", Groups: GroupsSpec{PD: &PDSpec{}}},
		},
		DefaultPolicy: &StagePolicies{Decode: &PolicySpec{Type: PolicyRandom}},
	}
	_, err := Parse([]byte(in), FormatYAML)
	// The pd bucket without groups is invalid; decode the rest of the
	// document without it.
	if diff := cmp.Diff([]Problem{
		{"buckets[2].groups.pd.prefill", "required; a pd bucket needs both prefill and decode groups (line 12)"},
		{"buckets[2].groups.pd.decode", "required; a pd bucket needs both prefill and decode groups (line 12)"},
	}, problemsOf(t, err)); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
	d := newDecoder(droppedKey)
	tree, problems := yamlTree([]byte(in))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if diff := cmp.Diff(want, d.document(tree)); diff != "" {
		t.Errorf("decoded document mismatch (-want +got):\n%s", diff)
	}
	if len(d.problems) > 0 {
		t.Errorf("schema walk problems: %v", d.problems)
	}
}
