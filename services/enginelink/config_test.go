package enginelink_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/services/enginelink"
)

func TestConfigValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*enginelink.Config)
		want   string
	}{
		{"no brokers", func(c *enginelink.Config) { c.KafkaBrokers = " , " }, "-kafka-brokers"},
		{"no engines", func(c *enginelink.Config) { c.Engines = nil }, "-fleet-admin-url"},
		{"bad bind", func(c *enginelink.Config) { c.KVBind = "tcp://nohost" }, "-kv-bind"},
		{"bad fleet url", func(c *enginelink.Config) { c.FleetAdminURL = "decider:7080" }, "-fleet-admin-url"},
		{"zero scrape interval", func(c *enginelink.Config) { c.ScrapeInterval = 0 }, "-scrape-interval"},
		{"zero buffer", func(c *enginelink.Config) { c.MaxBufferedRecords = 0 }, "-max-buffered-records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := enginelink.DefaultConfig()
			cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m"}}
			tc.change(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
			}
			if _, nerr := enginelink.New(slog.New(slog.DiscardHandler), cfg); nerr == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
	cfg := enginelink.DefaultConfig()
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m"}}
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults with one engine: %v", err)
	}
}

func TestEngineSpecsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec enginelink.EngineSpec
		want string
	}{
		{"no id", enginelink.EngineSpec{Model: "m"}, "id is empty"},
		{"at in id", enginelink.EngineSpec{ID: "a@b", Model: "m"}, "'@'"},
		{"no model", enginelink.EngineSpec{ID: "e"}, "model is empty"},
		{"bad kind", enginelink.EngineSpec{ID: "e", Model: "m", Engine: "tgi"}, "use vllm or sglang"},
		{"bad endpoint", enginelink.EngineSpec{ID: "e", Model: "m", KVEventsEndpoint: "tcp://h"}, "kv_events_endpoint"},
		{"port overflow", enginelink.EngineSpec{ID: "e", Model: "m", KVEventsEndpoint: "tcp://h:65535", DPSize: 2}, "kv_events_endpoint"},
		{"bad metrics", enginelink.EngineSpec{ID: "e", Model: "m", MetricsURL: "localhost:8000"}, "metrics_url"},
		{"bind without -kv-bind", enginelink.EngineSpec{ID: "e", Model: "m", KVEventsEndpoint: "bind:tcp://link:5600"}, "-kv-bind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := enginelink.DefaultConfig()
			cfg.Engines = []enginelink.EngineSpec{tc.spec}
			_, err := enginelink.New(slog.New(slog.DiscardHandler), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestEngineFlagAndFile(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg := enginelink.DefaultConfig()
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{
		"-engine", "id=e1,model=m,engine=vllm,kv=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,metrics=http://127.0.0.1:8000/metrics,dp=2",
		"-engine", "id=e2,model=m2,engine=sglang,loads=http://h:30000/v1/loads,lora=a,salt=s;id=e3,model=m3",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []enginelink.EngineSpec{
		{ID: "e1", Model: "m", Engine: "vllm", KVEventsEndpoint: "tcp://127.0.0.1:5557", KVReplayEndpoint: "tcp://127.0.0.1:5558",
			MetricsURL: "http://127.0.0.1:8000/metrics", DPSize: 2},
		{ID: "e2", Model: "m2", Engine: "sglang", LoadsURL: "http://h:30000/v1/loads", LoRAName: "a", CacheSalt: "s"},
		{ID: "e3", Model: "m3"},
	}
	if diff := cmp.Diff(want, cfg.Engines); diff != "" {
		t.Errorf("-engine mismatch (-want +got):\n%s", diff)
	}
	if err := fs.Parse([]string{"-engine", "id=e1,port=1"}); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Errorf("unknown key: %v", err)
	}

	dir := t.TempDir()
	yamlPath := filepath.Join(dir, "engines.yaml")
	writeFile(t, yamlPath, []byte(`
- id: e1
  model: Qwen/Qwen3-8B
  kv_events_endpoint: tcp://10.0.0.5:5557
  kv_replay_endpoint: tcp://10.0.0.5:5558
  metrics_url: http://10.0.0.5:8000/metrics
  dp_size: 2
- {id: e2, model: m, engine: sglang, loads_url: "http://10.0.0.6:30000/v1/loads", cache_salt: t1}
`))
	jsonPath := filepath.Join(dir, "engines.json")
	writeFile(t, jsonPath, []byte(`[{"id":"e1","model":"Qwen/Qwen3-8B","kv_events_endpoint":"tcp://10.0.0.5:5557","kv_replay_endpoint":"tcp://10.0.0.5:5558","metrics_url":"http://10.0.0.5:8000/metrics","dp_size":2},
{"id":"e2","model":"m","engine":"sglang","loads_url":"http://10.0.0.6:30000/v1/loads","cache_salt":"t1"}]`))
	wantFile := []enginelink.EngineSpec{
		{ID: "e1", Model: "Qwen/Qwen3-8B", KVEventsEndpoint: "tcp://10.0.0.5:5557", KVReplayEndpoint: "tcp://10.0.0.5:5558",
			MetricsURL: "http://10.0.0.5:8000/metrics", DPSize: 2},
		{ID: "e2", Model: "m", Engine: "sglang", LoadsURL: "http://10.0.0.6:30000/v1/loads", CacheSalt: "t1"},
	}
	for _, p := range []string{yamlPath, jsonPath} {
		got, err := enginelink.LoadEngineFile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if diff := cmp.Diff(wantFile, got); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", filepath.Base(p), diff)
		}
	}
	typo := filepath.Join(dir, "typo.yaml")
	writeFile(t, typo, []byte("- {id: e1, model: m, metrics: http://x/metrics}\n"))
	if _, err := enginelink.LoadEngineFile(typo); err == nil {
		t.Error("a misspelt key was accepted")
	}
}

// TestBrokerDownIsBoundedAndCounted: with no reachable broker, records wait in a bounded buffer,
// then are dropped and counted; the link neither blocks the ZMQ reader nor fails, and stops
// within its shutdown timeout.
func TestBrokerDownIsBoundedAndCounted(t *testing.T) {
	cfg := testConfig([]string{"127.0.0.1:" + itoa(freePort(t))})
	cfg.MaxBufferedRecords = 8
	cfg.ShutdownTimeout = 500 * time.Millisecond
	eng := newFakeEngine(t, engineOpts{})
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP}}
	l, err := enginelink.New(testLogger(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	dropped := func() float64 {
		return metricValue(t, l.Registry(), "sluice_enginelink_kafka_records_dropped_total", map[string]string{"topic": cfg.KVTopic})
	}
	received := func() float64 {
		return metricValue(t, l.Registry(), "sluice_enginelink_kv_batches_received_total", nil)
	}
	waitFor(t, "four buffers' worth received", func() bool {
		eng.publish(1)
		return received() >= float64(4*cfg.MaxBufferedRecords)
	})
	// Whatever is not buffered any more was dropped and counted: at most MaxBufferedRecords wait.
	waitFor(t, "drops counted", func() bool { return dropped() >= received()-float64(cfg.MaxBufferedRecords) })
	if got := metricValue(t, l.Registry(), "sluice_enginelink_kafka_records_acked_total", nil); got != 0 {
		t.Errorf("acked = %v with no broker", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil (a broker outage is not fatal)", err)
	}
}

// TestHTTPEndpoints: /healthz, /readyz and /metrics with the link's series.
func TestHTTPEndpoints(t *testing.T) {
	cfg := testConfig(startBroker(t))
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m"}}
	l := runLink(t, cfg)
	waitFor(t, "listening", func() bool { return l.HTTPAddr() != "" })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + l.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	waitFor(t, "ready", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if _, body := get("/metrics"); !strings.Contains(body, "sluice_enginelink_engines{source=\"static\"} 1") {
		t.Errorf("/metrics lacks sluice_enginelink_engines{source=\"static\"} 1:\n%.2000s", body)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
