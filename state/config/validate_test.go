package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

func ids(s ...string) *[]string {
	if s == nil {
		s = []string{}
	}
	return &s
}

// validDoc is a small valid document that test cases mutate.
func validDoc() *Document {
	return &Document{
		Engines: []EngineSpec{
			{ID: "P1", URL: "http://p1:30000", Models: []string{"m"}, Role: RolePrefill, BootstrapPort: 8998},
			{ID: "D1", URL: "https://d1:30000", Models: []string{"m"}, Role: RoleDecode},
			{ID: "A1", URL: "http://a1", Models: []string{"other"}, Role: RolePlain, Labels: map[string]string{"zone": "a"}},
		},
		Buckets: []BucketSpec{
			{
				ID: "short", Rank: 1, Limits: Limits{Min: 0, Max: ptr[int64](4096)}, MaxContextTokens: ptr[int64](8192),
				Groups: GroupsSpec{PD: &PDSpec{
					Prefill: &GroupSpec{EngineIDs: ids("P1"), Policy: &PolicySpec{Type: PolicyCacheAware}},
					Decode:  &GroupSpec{EngineIDs: ids("D1"), Policy: &PolicySpec{Type: PolicyPowerOfTwo}},
				}},
			},
			{ID: "plain", Groups: GroupsSpec{Plain: &GroupSpec{EngineIDs: ids("A1")}}},
		},
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(d *Document)
		want   []Problem
	}{
		{name: "valid", mutate: func(*Document) {}},
		{name: "zero document", mutate: func(d *Document) { *d = Document{} }},
		{name: "no workers list skips membership check", mutate: func(d *Document) {
			d.Engines = nil
			d.Buckets[0].Groups.PD.Prefill.EngineIDs = ids("anything")
		}},
		{name: "explicit empty worker_ids", mutate: func(d *Document) { d.Buckets[1].Groups.Plain.EngineIDs = ids() }},
		{name: "empty buckets list", mutate: func(d *Document) { d.Buckets = []BucketSpec{} }, want: []Problem{
			{"buckets", "empty list; omit the key for the default plain and pd buckets"},
		}},
		{name: "empty workers list", mutate: func(d *Document) { d.Engines = []EngineSpec{}; d.Buckets = nil }, want: []Problem{
			{"workers", "empty list; omit the key to check worker ids against the live registry instead"},
		}},
		{name: "bucket ids", mutate: func(d *Document) {
			d.Buckets[0].ID = ""
			d.Buckets[1].ID = "has space"
			d.Buckets = append(d.Buckets, d.Buckets[1].Clone(), d.Buckets[1].Clone(), d.Buckets[1].Clone())
			d.Buckets[2].ID = strings.Repeat("x", 129)
			d.Buckets[3].ID = "ok.id_-9"
			d.Buckets[4].ID = "ok.id_-9"
		}, want: []Problem{
			{"buckets[0].id", "required; give the bucket a unique id"},
			{"buckets[1].id", "must use only letters, digits, '.', '_' and '-'"},
			{"buckets[2].id", "must be at most 128 characters"},
			{"buckets[4].id", `duplicate bucket id "ok.id_-9" (also buckets[3]); bucket ids must be unique`},
		}},
		{name: "worker ids follow the bucket id rules", mutate: func(d *Document) {
			for _, id := range []string{"../../x", "a\nb", "has space", strings.Repeat("w", 129), "ok.id_-9"} {
				d.Engines = append(d.Engines, EngineSpec{ID: id, URL: "http://x", Models: []string{"other"}, Role: RolePlain})
			}
		}, want: []Problem{
			{"workers[3].id", "must use only letters, digits, '.', '_' and '-'"},
			{"workers[4].id", "must use only letters, digits, '.', '_' and '-'"},
			{"workers[5].id", "must use only letters, digits, '.', '_' and '-'"},
			{"workers[6].id", "must be at most 128 characters"},
		}},
		{name: "bucket models", mutate: func(d *Document) {
			d.Buckets[0].Models = []string{"m", "", "m"}
			d.Buckets[1].Models = []string{}
		}, want: []Problem{
			{"buckets[0].models[1]", "model id must not be empty"},
			{"buckets[0].models[2]", `duplicate model "m" (also at index 0); list it once`},
			{"buckets[1].models", "empty list; omit the key to serve every model"},
		}},
		{name: "limits", mutate: func(d *Document) {
			d.Buckets[0].Limits = Limits{Min: -1}
			d.Buckets[1].Limits = Limits{Min: 10, Max: ptr[int64](9)}
		}, want: []Problem{
			{"buckets[0].limits.min", "must be >= 0"},
			{"buckets[1].limits.max", "must be >= limits.min (10); omit it for no upper bound"},
		}},
		{name: "max context", mutate: func(d *Document) {
			d.Buckets[0].MaxContextTokens = ptr[int64](0)
			d.Buckets[1].Limits.Min = 100
			d.Buckets[1].MaxContextTokens = ptr[int64](99)
		}, want: []Problem{
			{"buckets[0].max_context_tokens", "must be >= 1; omit it for unbounded context"},
			{"buckets[1].max_context_tokens", "is below limits.min (100), so no request could ever fit; raise it or lower limits.min"},
		}},
		{name: "groups exactly one", mutate: func(d *Document) {
			d.Buckets[0].Groups.Plain = &GroupSpec{}
			d.Buckets[1].Groups = GroupsSpec{}
		}, want: []Problem{
			{"buckets[0].groups", "set exactly one of plain or pd, not both"},
			{"buckets[1].groups", "required; set exactly one of plain or pd"},
		}},
		{name: "pd needs both", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill = nil
			d.Buckets[0].Groups.PD.Decode = nil
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill", "required; a pd bucket needs both prefill and decode groups"},
			{"buckets[0].groups.pd.decode", "required; a pd bucket needs both prefill and decode groups"},
		}},
		{name: "worker ids in groups", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.EngineIDs = ids("P1", "", "P1", "D1", "nope")
			d.Buckets[1].Groups.Plain.EngineIDs = ids("P1")
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.worker_ids[1]", "worker id must not be empty"},
			{"buckets[0].groups.pd.prefill.worker_ids[2]", `duplicate worker id "P1" (also at index 0); list it once`},
			{"buckets[0].groups.pd.prefill.worker_ids[3]", `worker "D1" has role decode; a prefill group takes prefill engines`},
			{"buckets[0].groups.pd.prefill.worker_ids[4]", `worker "nope" is not listed in workers; add it there or remove it from this group`},
			{"buckets[1].groups.plain.worker_ids[0]", `worker "P1" has role prefill; a plain group takes plain engines`},
		}},
		{name: "workers", mutate: func(d *Document) {
			d.Buckets = nil
			d.Engines = []EngineSpec{
				{ID: "", URL: "", Role: ""},
				{ID: "x", URL: "10.0.0.1:3000", Models: []string{"m", "m", ""}, Role: "leader", BootstrapPort: 1},
				{ID: "x", URL: "ftp://h", Models: []string{"m"}, Role: RoleDecode, BootstrapPort: 9},
				{ID: "y", URL: "http://", Models: []string{"n"}, Role: RolePrefill, BootstrapPort: 70000, Labels: map[string]string{"": "v"}},
			}
		}, want: []Problem{
			{"workers[0].id", "required; give the worker a unique id"},
			{"workers[0].url", `required; set the engine's base URL such as "http://10.0.0.5:30000"`},
			{"workers[0].models", "required; list at least one model id the engine serves"},
			{"workers[0].role", "required; set plain, prefill or decode"},
			{"workers[1].url", `must be an absolute http or https URL such as "http://10.0.0.5:30000"`},
			{"workers[1].models[1]", `duplicate model "m" (also at index 0); list it once`},
			{"workers[1].models[2]", "model id must not be empty"},
			{"workers[1].role", `unknown role "leader"; set plain, prefill or decode`},
			{"workers[2].id", `duplicate worker id "x" (also workers[1]); worker ids must be unique`},
			{"workers[2].url", `must be an absolute http or https URL such as "http://10.0.0.5:30000"`},
			{"workers[2].bootstrap_port", "only valid for prefill workers (role is decode); remove it"},
			{"workers[3].url", `must be an absolute http or https URL such as "http://10.0.0.5:30000"`},
			{"workers[3].bootstrap_port", "must be a port number between 1 and 65535"},
			{`workers[3].labels[""]`, "label key must not be empty"},
		}},
		{name: "worker endpoints", mutate: func(d *Document) {
			d.Buckets = nil
			d.Engines = []EngineSpec{
				{ID: "a", URL: "http://a", Models: []string{"m"}, Role: RolePlain, KVEventsEndpoint: "bind:tcp://127.0.0.1:5600",
					KVReplayEndpoint: "tcp://a:5558", MetricsURL: "http://a:8000/metrics", DPSize: 4, LoRAAdapters: []string{"sql"}},
				{ID: "b", URL: "http://b", Models: []string{"m"}, Role: RolePlain, KVEventsEndpoint: "http://b:5557",
					KVReplayEndpoint: "tcp://b", MetricsURL: "b:8000", DPSize: -1, LoRAAdapters: []string{"m", "x", "x"}},
				{ID: "c", URL: "http://c", Models: []string{"m"}, Role: RolePlain, KVEventsEndpoint: "tcp://c:0", KVReplayEndpoint: "ipc:///tmp/r"},
			}
		}, want: []Problem{
			{"workers[1].kv_events_endpoint", `"http://b:5557": unsupported transport "http"; use tcp, ipc or inproc (or bind:tcp://host:port for an engine that connects to enginelink's -kv-bind)`},
			{"workers[1].kv_replay_endpoint", `"tcp://b": want tcp://host:port (host may be * for an engine that binds)`},
			{"workers[1].metrics_url", `must be an absolute http or https URL such as "http://10.0.0.5:30000/metrics"`},
			{"workers[1].dp_size", "must be between 0 and 1024"},
			{"workers[1].lora_adapters[2]", `duplicate LoRA adapter "x" (also at index 1); list it once`},
			{"workers[1].lora_adapters[0]", `"m" is also listed in models; list an adapter only under lora_adapters`},
			{"workers[2].kv_events_endpoint", `"tcp://c:0": port must be a number between 1 and 65535 (or bind:tcp://host:port for an engine that connects to enginelink's -kv-bind)`},
		}},
		{name: "model mixes plain and pd engines", mutate: func(d *Document) {
			d.Engines = append(d.Engines,
				EngineSpec{ID: "A2", URL: "http://a2", Models: []string{"m"}, Role: RolePlain},
				EngineSpec{ID: "A3", URL: "http://a3", Models: []string{"m"}, Role: RolePlain})
		}, want: []Problem{
			{"workers[3].role", `model "m" already has prefill/decode engines (workers[0]); a model's engines must be all plain or all prefill/decode`},
		}},
		{name: "policy type", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{}
			d.Buckets[0].Groups.PD.Decode.Policy = &PolicySpec{Type: "least_load"}
			d.Buckets[1].Groups.Plain.Policy = &PolicySpec{Type: "fused_score"}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.type", "required; use one of round_robin, random, power_of_two, load_based, cache_aware, session_aware, sticky, ttft_aware"},
			{"buckets[0].groups.pd.decode.policy.type", `unknown policy type "least_load"; use one of round_robin, random, power_of_two, load_based, cache_aware, session_aware, sticky, ttft_aware`},
			{"buckets[1].groups.plain.policy.type", `type "fused_score" removed; use cache_aware (prefix reuse) or power_of_two (load)`},
		}},
		{name: "dropped policy types", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Decode.Policy = &PolicySpec{Type: "legacy_host_affinity"}
			d.Buckets[1].Groups.Plain.Policy = &PolicySpec{Type: "score_policy"}
		}, want: []Problem{
			{"buckets[0].groups.pd.decode.policy.type", `type "legacy_host_affinity" removed; use session_aware or sticky`},
			{"buckets[1].groups.plain.policy.type", `type "score_policy" removed; use cache_aware (prefix reuse) or power_of_two (load)`},
		}},
		{name: "cache_aware on decode", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Decode.Policy = &PolicySpec{Type: PolicyCacheAware}
			d.DefaultPolicy = &StagePolicies{Decode: &PolicySpec{Type: PolicyCacheAware}, Plain: &PolicySpec{Type: PolicyCacheAware}}
			d.Models = map[string]ModelSpec{"m": {DefaultPolicy: &StagePolicies{Decode: &PolicySpec{Type: PolicyCacheAware}}}}
		}, want: []Problem{
			{"buckets[0].groups.pd.decode.policy.type", "cache_aware needs prefill work; use power_of_two or load_based for decode"},
			{"default_policy.decode.type", "cache_aware needs prefill work; use power_of_two or load_based for decode"},
			{`models["m"].default_policy.decode.type`, "cache_aware needs prefill work; use power_of_two or load_based for decode"},
		}},
		{name: "settings of another type", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{Type: PolicyCacheAware, Fallback: ptr("random"), IdleTimeout: &Duration{time.Second}}
			d.Buckets[0].Groups.PD.Decode.Policy = &PolicySpec{Type: PolicyPowerOfTwo, MinMatchTokens: ptr[int64](1), QueueLimit: ptr[int64](3), MissChoices: ptr[int64](2)}
			d.Buckets[1].Groups.Plain.Policy = &PolicySpec{Type: PolicySessionAware, PressureGuard: ptr(false), GuardAbsoluteTokens: ptr[int64](1),
				GuardAbsoluteMillis: ptr[int64](1), GuardFactor: ptr(2.0), Fallback: ptr("random")}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.idle_timeout", "only valid for types session_aware and sticky (type is cache_aware)"},
			{"buckets[0].groups.pd.prefill.policy.fallback", "only valid for type sticky (type is cache_aware)"},
			{"buckets[0].groups.pd.decode.policy.min_match_tokens", "only valid for type cache_aware (type is power_of_two)"},
			{"buckets[0].groups.pd.decode.policy.queue_limit", "only valid for type cache_aware (type is power_of_two)"},
			{"buckets[0].groups.pd.decode.policy.miss_choices", "only valid for type cache_aware (type is power_of_two)"},
			{"buckets[1].groups.plain.policy.pressure_guard", "pressure-guard tuning applies to cache_aware only (type is session_aware); remove it"},
			{"buckets[1].groups.plain.policy.guard_absolute_tokens", "pressure-guard tuning applies to cache_aware only (type is session_aware); remove it"},
			{"buckets[1].groups.plain.policy.guard_absolute_ms", "pressure-guard tuning applies to cache_aware only (type is session_aware); remove it"},
			{"buckets[1].groups.plain.policy.guard_factor", "pressure-guard tuning applies to cache_aware only (type is session_aware); remove it"},
			{"buckets[1].groups.plain.policy.fallback", "only valid for type sticky (type is session_aware)"},
		}},
		{name: "ttft_aware settings", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{Type: PolicyTTFTAware, DefaultPrefillTokensPerSec: ptr[int64](0),
				TypicalRequestTokens: ptr[int64](0), HotSpotMarginMillis: ptr[int64](-1), MissChoices: ptr[int64](2)}
			d.Buckets[0].Groups.PD.Decode.Policy = &PolicySpec{Type: PolicyTTFTAware}
			d.Buckets[1].Groups.Plain.Policy = &PolicySpec{Type: PolicyCacheAware, HotSpotMarginMillis: ptr[int64](10)}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.miss_choices", "only valid for type cache_aware (type is ttft_aware)"},
			{"buckets[0].groups.pd.prefill.policy.default_prefill_tokens_per_s", "must be >= 1"},
			{"buckets[0].groups.pd.prefill.policy.typical_request_tokens", "must be >= 1"},
			{"buckets[0].groups.pd.prefill.policy.hot_spot_margin_ms", "must be >= 0; 0 turns the hot-spot guard off"},
			{"buckets[0].groups.pd.decode.policy.type", "ttft_aware estimates prefill; use power_of_two or load_based for decode"},
			{"buckets[1].groups.plain.policy.hot_spot_margin_ms", "only valid for type ttft_aware (type is cache_aware)"},
		}},
		{name: "cache_aware ranges low", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{
				Type: PolicyCacheAware, MinMatchTokens: ptr[int64](-1), MinMatchRatio: ptr(0.0),
				CandidateMin: ptr[int64](0), CandidateRatio: ptr(-0.1), CandidateMax: ptr[int64](0),
				SwitchMarginTokens: ptr[int64](-1), GuardAbsoluteTokens: ptr[int64](0), GuardAbsoluteMillis: ptr[int64](0),
				GuardFactor: ptr(1.0), QueueLimit: ptr[int64](0), SaturationFloor: ptr[int64](0), MissChoices: ptr[int64](0),
			}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.min_match_tokens", "must be >= 0"},
			{"buckets[0].groups.pd.prefill.policy.min_match_ratio", "must be in (0, 1]; omit it to turn the ratio gate off"},
			{"buckets[0].groups.pd.prefill.policy.candidate_min", "must be >= 1"},
			{"buckets[0].groups.pd.prefill.policy.candidate_ratio", "must be in [0, 1]"},
			{"buckets[0].groups.pd.prefill.policy.candidate_max", "must be >= 1"},
			{"buckets[0].groups.pd.prefill.policy.switch_margin_tokens", "must be >= 0"},
			{"buckets[0].groups.pd.prefill.policy.guard_absolute_tokens", "must be >= 1"},
			{"buckets[0].groups.pd.prefill.policy.guard_absolute_ms", "must be >= 1; omit it to turn the queue-time threshold off"},
			{"buckets[0].groups.pd.prefill.policy.guard_factor", "must be > 1, such as 1.5"},
			{"buckets[0].groups.pd.prefill.policy.queue_limit", "must be >= 1; omit it to turn the soft queue gate off"},
			{"buckets[0].groups.pd.prefill.policy.saturation_floor", "must be >= 1"},
			{"buckets[0].groups.pd.prefill.policy.miss_choices", "must be >= 1"},
		}},
		{name: "cache_aware ranges high", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{
				Type: PolicyCacheAware, MinMatchRatio: ptr(1.5), CandidateRatio: ptr(1.01), CandidateMax: ptr[int64](7),
				QueueLimit: ptr[int64](4), SaturationFloor: ptr[int64](5),
			}
			d.Buckets[1].Groups.Plain.Policy = &PolicySpec{Type: PolicyCacheAware, CandidateMin: ptr[int64](10), CandidateMax: ptr[int64](9), SaturationFloor: ptr[int64](1)}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.min_match_ratio", "must be in (0, 1]; omit it to turn the ratio gate off"},
			{"buckets[0].groups.pd.prefill.policy.candidate_ratio", "must be in [0, 1]"},
			{"buckets[0].groups.pd.prefill.policy.candidate_max", "must be >= candidate_min (default 8); raise it or set a lower candidate_min"},
			{"buckets[0].groups.pd.prefill.policy.saturation_floor", "must be <= queue_limit (4); lower it or raise queue_limit"},
			{"buckets[1].groups.plain.policy.candidate_max", "must be >= candidate_min (10); raise it or lower candidate_min"},
			{"buckets[1].groups.plain.policy.saturation_floor", "requires queue_limit; set queue_limit >= saturation_floor or remove saturation_floor"},
		}},
		{name: "cache_aware valid edges", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{
				Type: PolicyCacheAware, MinMatchTokens: ptr[int64](0), MinMatchRatio: ptr(1.0), CandidateMin: ptr[int64](1),
				CandidateRatio: ptr(0.0), CandidateMax: ptr[int64](1), SwitchMarginTokens: ptr[int64](0), PressureGuard: ptr(true),
				GuardAbsoluteTokens: ptr[int64](1), GuardAbsoluteMillis: ptr[int64](1), GuardFactor: ptr(1.0001),
				QueueLimit: ptr[int64](3), SaturationFloor: ptr[int64](3), MissChoices: ptr[int64](1),
			}
		}},
		{name: "guard tuning with the guard off", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{Type: PolicyCacheAware, PressureGuard: ptr(false), GuardFactor: ptr(2.0)}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.guard_factor", "has no effect with pressure_guard: false; remove it or set pressure_guard: true"},
		}},
		{name: "session and sticky", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Prefill.Policy = &PolicySpec{Type: PolicySessionAware, IdleTimeout: &Duration{0}}
			d.Buckets[0].Groups.PD.Decode.Policy = &PolicySpec{Type: PolicySticky, IdleTimeout: &Duration{-time.Second}, Fallback: ptr("cache_aware")}
			d.Buckets[1].Groups.Plain.Policy = &PolicySpec{Type: PolicySticky, Fallback: ptr("legacy_host_affinity")}
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.policy.idle_timeout", `must be positive, such as "600s"`},
			{"buckets[0].groups.pd.decode.policy.idle_timeout", `must be positive, such as "600s"`},
			{"buckets[0].groups.pd.decode.policy.fallback", `unknown fallback "cache_aware"; use one of round_robin, random, power_of_two, load_based`},
			{"buckets[1].groups.plain.policy.fallback", `"legacy_host_affinity" removed; use session_aware or sticky`},
		}},
		{name: "admission caps", mutate: func(d *Document) {
			d.Buckets[0].Groups.PD.Decode.Policy.Admission = &AdmissionSpec{
				MaxRunningRequests: ptr[int64](0), MaxWaitingRequests: ptr[int64](-1), MaxKVTokens: ptr[int64](0),
				MaxPendingPrefillTokens: ptr[int64](0), MaxInflightRequests: ptr[int64](0),
			}
			d.Buckets[0].Groups.PD.Prefill.Policy.Admission = &AdmissionSpec{MaxRunningRequests: ptr[int64](1), MaxInflightRequests: ptr[int64](1)}
		}, want: []Problem{
			{"buckets[0].groups.pd.decode.policy.admission.max_running_requests", "must be >= 1; omit it to leave this metric unchecked"},
			{"buckets[0].groups.pd.decode.policy.admission.max_waiting_requests", "must be >= 1; omit it to leave this metric unchecked"},
			{"buckets[0].groups.pd.decode.policy.admission.max_kv_tokens", "must be >= 1; omit it to leave this metric unchecked"},
			{"buckets[0].groups.pd.decode.policy.admission.max_pending_prefill_tokens", "must be >= 1; omit it to leave this metric unchecked"},
			{"buckets[0].groups.pd.decode.policy.admission.max_inflight_requests", "must be >= 1; omit it to leave this metric unchecked"},
		}},
		{name: "models", mutate: func(d *Document) {
			d.Models = map[string]ModelSpec{
				"":             {},
				"org/model-b":  {DefaultPolicy: &StagePolicies{Prefill: &PolicySpec{Type: PolicySticky, MissChoices: ptr[int64](2)}}},
				"model-a":      {DefaultPolicy: &StagePolicies{Plain: &PolicySpec{Type: "nope"}}},
				"fine.model-c": {DefaultPolicy: &StagePolicies{}},
			}
		}, want: []Problem{
			{`models[""]`, "model id must not be empty; name the model these settings apply to"},
			{`models["model-a"].default_policy.plain.type`, `unknown policy type "nope"; use one of round_robin, random, power_of_two, load_based, cache_aware, session_aware, sticky, ttft_aware`},
			{`models["org/model-b"].default_policy.prefill.miss_choices`, "only valid for type cache_aware (type is sticky)"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := validDoc()
			tt.mutate(d)
			err := d.Validate()
			var got []Problem
			if err != nil {
				var verr *ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("Validate() = %T %v, want *ValidationError", err, err)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("errors.Is(err, ErrInvalid) = false")
				}
				got = verr.Problems
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	t.Parallel()
	var d *Document
	if err := d.Validate(); err != nil {
		t.Errorf("(*Document)(nil).Validate() = %v, want nil", err)
	}
}

func TestValidationErrorMessage(t *testing.T) {
	t.Parallel()
	err := &ValidationError{Problems: []Problem{{"a.b", "bad"}, {"", "whole document"}}}
	want := "invalid configuration (2 problems):\n  a.b: bad\n  whole document"
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	one := &ValidationError{Problems: []Problem{{"x", "y"}}}
	if got, want := one.Error(), "invalid configuration (1 problem):\n  x: y"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
