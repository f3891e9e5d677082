package simengine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// busyEngine starts a sim with one request running (its first token out) and returns it with
// its base URL: running 1, waiting 0, the prompt looked up once and not cached.
func busyEngine(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	cfg.CacheBlocks = 256
	cfg.DecodeMsPerToken = 1000
	s, base := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	run, err := s.Engine().Submit(ctx, engineRequest(Tokenize("some prompt words"), 10))
	if err != nil {
		t.Fatal(err)
	}
	<-run.Tokens()
	return s, base
}

// series is one sample of a scraped family: its type, labels and value.
type series struct {
	Type   string
	Labels map[string]string
	Value  float64
}

func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

func onlySeries(t *testing.T, fams map[string]*dto.MetricFamily, name string) series {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("/metrics lacks %s", name)
	}
	if len(f.Metric) != 1 {
		t.Fatalf("%s has %d series, want 1", name, len(f.Metric))
	}
	m := f.Metric[0]
	out := series{Type: strings.ToLower(f.GetType().String()), Labels: map[string]string{}}
	for _, l := range m.Label {
		out.Labels[l.GetName()] = l.GetValue()
	}
	switch {
	case m.Gauge != nil:
		out.Value = m.Gauge.GetValue()
	case m.Counter != nil:
		out.Value = m.Counter.GetValue()
	}
	return out
}

// TestMetricsNamesAndLabels parses /metrics as Prometheus would and checks the engines' own
// names, types, label sets and values; -1 marks a value that is only checked to be positive.
func TestMetricsNamesAndLabels(t *testing.T) {
	sg := map[string]string{"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
	vl := map[string]string{"engine": "0", "model_name": "m"}
	for _, tc := range []struct {
		naming string
		want   map[string]series
		other  string
	}{
		{NamingSGLang, map[string]series{
			"sglang:num_running_reqs":     {"gauge", sg, 1},
			"sglang:num_queue_reqs":       {"gauge", sg, 0},
			"sglang:max_total_num_tokens": {"gauge", sg, 4096},
			"sglang:num_used_tokens":      {"gauge", sg, 4},
			"sglang:token_usage":          {"gauge", sg, 4.0 / 4096},
			"sglang:cache_hit_rate":       {"gauge", sg, 0},
			"sglang:gen_throughput":       {"gauge", sg, 1},
		}, "vllm:"},
		{NamingVLLM, map[string]series{
			"vllm:num_requests_running":       {"gauge", vl, 1},
			"vllm:num_requests_waiting":       {"gauge", vl, 0},
			"vllm:kv_cache_usage_perc":        {"gauge", vl, 4.0 / 4096},
			"vllm:prefix_cache_queries_total": {"counter", vl, 3},
			"vllm:prefix_cache_hits_total":    {"counter", vl, 0},
			"vllm:cache_config_info": {"gauge", map[string]string{"block_size": "16", "num_gpu_blocks": "256",
				"enable_prefix_caching": "True", "engine": "0"}, 1},
		}, "sglang:"},
	} {
		t.Run(tc.naming, func(t *testing.T) {
			cfg := testConfig()
			cfg.MetricsNaming = tc.naming
			_, base := busyEngine(t, cfg)
			fams := scrape(t, base)
			for name, want := range tc.want {
				if diff := cmp.Diff(want, onlySeries(t, fams, name)); diff != "" {
					t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
				}
			}
			for name := range fams {
				if strings.HasPrefix(name, tc.other) {
					t.Errorf("/metrics mixes namings: has %s", name)
				}
			}
			if h := onlySeries(t, fams, "sluice_simengine_healthy"); h.Value != 1 {
				t.Errorf("sluice_simengine_healthy = %v, want 1", h.Value)
			}
		})
	}
}

// TestTTFTHistogram sends one non-streamed and one streamed request over HTTP to an engine
// whose prefill of a 400-token prompt takes 40 ms, and checks that the imitated engine's
// time_to_first_token_seconds histogram counted both with at least that time each, under each
// naming, with the gauges' labels.
func TestTTFTHistogram(t *testing.T) {
	for _, tc := range []struct {
		naming, name string
		labels       map[string]string
	}{
		{NamingSGLang, "sglang:time_to_first_token_seconds", map[string]string{"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}},
		{NamingVLLM, "vllm:time_to_first_token_seconds", map[string]string{"engine": "0", "model_name": "m"}},
	} {
		t.Run(tc.naming, func(t *testing.T) {
			cfg := testConfig()
			cfg.MetricsNaming = tc.naming
			cfg.PrefillTokensPerSec = 10_000
			_, base := start(t, cfg)
			for _, stream := range []bool{false, true} {
				prompt := strings.Repeat(fmt.Sprintf("word%v ", stream), 400) // not cached by the other
				resp, body := post(t, base+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 2, "stream": stream})
				if resp.StatusCode != 200 {
					t.Fatalf("stream=%v: status %d: %s", stream, resp.StatusCode, body)
				}
			}
			f, ok := scrape(t, base)[tc.name]
			if !ok || len(f.Metric) != 1 || f.Metric[0].Histogram == nil {
				t.Fatalf("/metrics lacks one %s histogram: %v", tc.name, f)
			}
			m := f.Metric[0]
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			if diff := cmp.Diff(tc.labels, got); diff != "" {
				t.Errorf("labels mismatch (-want +got):\n%s", diff)
			}
			h := m.Histogram
			if h.GetSampleCount() != 2 {
				t.Errorf("count = %d, want 2", h.GetSampleCount())
			}
			if min := 2 * 0.040; h.GetSampleSum() < min || h.GetSampleSum() > 10 {
				t.Errorf("sum = %v s, want at least %v (two 40 ms prefills) and not absurd", h.GetSampleSum(), min)
			}
		})
	}
}
