package simengine

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func getObject(t *testing.T, url string) map[string]any {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("GET %s = %d: %s", url, code, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
	return m
}

// TestLoadsSchema checks GET /v1/loads field for field against SGLang 0.5.23
// (docs/wire-formats.md, "Load scrapes").
func TestLoadsSchema(t *testing.T) {
	cfg := testConfig()
	_, base := busyEngine(t, cfg)
	m := getObject(t, base+"/v1/loads")
	if diff := cmp.Diff([]string{"accelerator", "loads", "num_accelerators", "timestamp", "version"}, keys(m)); diff != "" {
		t.Errorf("/v1/loads keys mismatch (-want +got):\n%s", diff)
	}
	ts, _ := m["timestamp"].(string)
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("timestamp %q: want an ISO 8601 string: %v", ts, err)
	}
	if m["version"] != SGLangVersion || m["num_accelerators"] != 1.0 {
		t.Errorf("version %v, num_accelerators %v", m["version"], m["num_accelerators"])
	}
	loads, _ := m["loads"].([]any)
	if len(loads) != 1 {
		t.Fatalf("loads %v: want one rank", m["loads"])
	}
	rank := loads[0].(map[string]any)
	wantKeys := []string{"cache_hit_rate", "decode_moments", "dp_rank", "gen_throughput", "max_running_requests",
		"max_total_num_tokens", "num_active_tokens", "num_prealloc_ready_tokens", "num_running_reqs", "num_total_tokens",
		"num_used_tokens", "num_waiting_reqs", "num_waiting_uncached_tokens", "timestamp", "token_usage",
		"total_prefill_busy_us", "total_prefill_uncached_tokens", "utilization"}
	if diff := cmp.Diff(wantKeys, keys(rank)); diff != "" {
		t.Errorf("/v1/loads rank keys mismatch (-want +got):\n%s", diff)
	}
	want := map[string]any{"dp_rank": 0.0, "num_running_reqs": 1.0, "num_waiting_reqs": 0.0, "num_used_tokens": 4.0,
		"num_total_tokens": 4.0, "num_active_tokens": 4.0, "num_prealloc_ready_tokens": 0.0, "max_total_num_tokens": 4096.0,
		"max_running_requests": float64(cfg.MaxRunning), "token_usage": 4.0 / 4096, "gen_throughput": 1.0,
		"cache_hit_rate": 0.0, "utilization": 1.0 / float64(cfg.MaxRunning), "total_prefill_uncached_tokens": 3.0,
		"decode_moments": nil, "num_waiting_uncached_tokens": 0.0}
	for k, v := range want {
		if diff := cmp.Diff(v, rank[k]); diff != "" {
			t.Errorf("/v1/loads %s mismatch (-want +got):\n%s", k, diff)
		}
	}
	if f, ok := rank["timestamp"].(float64); !ok || f < 1e9 {
		t.Errorf("rank timestamp %v: want Unix seconds", rank["timestamp"])
	}
}

// TestSGLangInfoRoutes checks the routes SGLang routers call when an engine registers.
func TestSGLangInfoRoutes(t *testing.T) {
	cfg := testConfig()
	cfg.Role = "prefill"
	cfg.KVEventsEndpoint, cfg.KVEventsTopic = "tcp://*:0", "kv@sim-test@m"
	s, base := start(t, cfg)
	for _, path := range []string{"/model_info", "/get_model_info"} {
		m := getObject(t, base+path)
		want := map[string]any{"model_path": "m", "tokenizer_path": "m", "is_generation": true, "preferred_sampling_params": nil,
			"weight_version": "default", "has_image_understanding": false, "has_audio_understanding": false,
			"model_type": "simengine", "architectures": []any{"SimEngineForCausalLM"}}
		if diff := cmp.Diff(want, m); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
		}
	}
	for _, path := range []string{"/server_info", "/get_server_info"} {
		m := getObject(t, base+path)
		want := map[string]any{"model_path": "m", "served_model_name": "m", "tp_size": 1.0, "dp_size": 1.0, "page_size": 16.0,
			"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": float64(s.BootstrapPort()),
			"max_total_num_tokens": 16.0 * 8192, "max_running_requests": float64(cfg.MaxRunning), "version": SGLangVersion,
			"kv_events_config": `{"buffer_steps":10000,"endpoint":"tcp://*:0","publisher":"zmq","topic":"kv@sim-test@m"}`}
		for k, v := range want {
			if diff := cmp.Diff(v, m[k]); diff != "" {
				t.Errorf("%s %s mismatch (-want +got):\n%s", path, k, diff)
			}
		}
		if st, _ := m["internal_states"].([]any); len(st) != 1 {
			t.Errorf("%s internal_states %v: want one per DP rank", path, m["internal_states"])
		}
	}
	if code, _ := get(t, base+"/health_generate"); code != 200 {
		t.Errorf("/health_generate = %d, want 200", code)
	}
	s.SetFailed(true)
	if code, _ := get(t, base+"/health_generate"); code != 503 {
		t.Errorf("/health_generate while failed = %d, want 503", code)
	}
	if code, _ := get(t, base+"/version"); code != 404 {
		t.Errorf("/version on an SGLang sim = %d, want 404", code)
	}
}

// TestVLLMRoutes checks that a vLLM sim serves vLLM's routes and none of SGLang's own.
func TestVLLMRoutes(t *testing.T) {
	cfg := testConfig()
	cfg.MetricsNaming = NamingVLLM
	_, base := start(t, cfg)
	if m := getObject(t, base+"/version"); m["version"] != VLLMVersion {
		t.Errorf("/version = %v, want %s", m, VLLMVersion)
	}
	for _, path := range []string{"/v1/loads", "/server_info", "/model_info", "/health_generate", "/get_load"} {
		if code, _ := get(t, base+path); code != 404 {
			t.Errorf("GET %s on a vLLM sim = %d, want 404", path, code)
		}
	}
	if code, _ := get(t, base+"/health"); code != 200 {
		t.Errorf("/health = %d, want 200", code)
	}
}
