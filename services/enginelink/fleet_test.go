package enginelink_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/services/deciderserver"
)

// fleetConfig is a decider configuration whose engines declare enginelink endpoints.
func fleetConfig(engines ...string) string {
	ids := make([]string, len(engines))
	for i, w := range engines {
		ids[i] = strings.SplitN(strings.TrimPrefix(w, "{id: "), ",", 2)[0]
	}
	return fmt.Sprintf("workers:\n  - %s\nbuckets:\n  - id: all\n    groups:\n      plain:\n        worker_ids: [%s]\n        policy: {type: round_robin}\n",
		strings.Join(engines, "\n  - "), strings.Join(ids, ", "))
}

// TestFleetFollowsDeciderRegistry runs a real decider whose engines declare kv_events_endpoint,
// kv_replay_endpoint and metrics_url; the link follows its registry: KV events of e1, load of e2
// scraped at url + "/metrics", and it drops e2 when the configuration removes it.
func TestFleetFollowsDeciderRegistry(t *testing.T) {
	brokers := startBroker(t)
	eng := newFakeEngine(t, engineOpts{Replay: true})
	metrics := serveFixture(t, "vllm_old.metrics", nil)
	e1 := fmt.Sprintf("{id: e1, url: %q, models: [m1], role: plain, kv_events_endpoint: %q, kv_replay_endpoint: %q, metrics_url: %q}",
		"http://e1.test:8000", eng.pubEP, eng.ReplayEP(), metrics.URL+"/metrics")
	e2 := fmt.Sprintf("{id: e2, url: %q, models: [m2], role: plain, labels: {engine: sglang}}", metrics.URL)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(fleetConfig(e1, e2)), 0o600); err != nil {
		t.Fatal(err)
	}
	dcfg := deciderserver.DefaultConfig()
	dcfg.GRPCAddr, dcfg.HTTPAddr, dcfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", path
	dcfg.ConfigPoll = 20 * time.Millisecond
	dcfg.Health.ProbeInterval = 0
	dcfg.ViewerTokens = "viewer-secret"
	d := runDecider(t, dcfg)

	cfg := testConfig(brokers)
	cfg.FleetAdminURL = "http://" + d.HTTPAddr()
	cfg.AdminToken = "viewer-secret"
	cfg.FleetPoll = 20 * time.Millisecond
	kv, lc := consume(t, brokers, cfg.KVTopic), consume(t, brokers, cfg.LoadTopic)
	l := runLink(t, cfg)

	waitFor(t, "both engines followed", func() bool { return cmp.Equal(l.Engines(), []string{"e1", "e2"}) })
	warmUp(t, eng, kv, "e1")
	if got := kv.records("e1")[0].Headers["sluice-model"]; got != "m1" {
		t.Errorf("e1 model header = %q, want m1 (the worker's first model)", got)
	}
	waitFor(t, "load of both engines", func() bool {
		return len(loadReports(t, lc, "e1")) > 0 && len(loadReports(t, lc, "e2")) > 0
	})

	if err := os.WriteFile(path, []byte(fleetConfig(e1)), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "e2 dropped", func() bool { return cmp.Equal(l.Engines(), []string{"e1"}) })
	if got := metricValue(t, l.Registry(), "sluice_enginelink_fleet_polls_total", map[string]string{"result": "error"}); got != 0 {
		t.Errorf("failed fleet polls = %v, want 0", got)
	}
}

// TestFleetWithoutTokenIsCountedNotFatal: a registry read refused (no token) is counted and
// retried; the link keeps running and follows nothing.
func TestFleetWithoutTokenIsCountedNotFatal(t *testing.T) {
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, `{"code":16,"message":"needs a bearer token"}`, http.StatusUnauthorized)
			return
		}
		// grpc-gateway JSON with camelCase names, as the decider serves it.
		_, _ = w.Write([]byte(`{"engines":[{"id":"x1","url":"http://x1:8000","models":["m"],"kvEventsEndpoint":"","metricsUrl":"","dpSize":2,"unknownField":1}]}`))
	}))
	t.Cleanup(admin.Close)
	cfg := testConfig(startBroker(t))
	cfg.FleetAdminURL = admin.URL
	cfg.FleetPoll = 10 * time.Millisecond
	l := runLink(t, cfg)
	waitFor(t, "refused polls counted", func() bool {
		return metricValue(t, l.Registry(), "sluice_enginelink_fleet_polls_total", map[string]string{"result": "error"}) >= 2
	})
	if got := l.Engines(); len(got) != 0 {
		t.Errorf("engines = %v without a valid token, want none", got)
	}

	cfg.AdminToken = "t0k"
	l2 := runLink(t, cfg)
	waitFor(t, "x1 followed", func() bool { return cmp.Equal(l2.Engines(), []string{"x1"}) })
}

func runDecider(t *testing.T, cfg deciderserver.Config) *deciderserver.Server {
	t.Helper()
	srv, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := contextWithCancel()
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("decider Run: %v", err)
		}
	})
	waitFor(t, "decider listening", func() bool { return srv.HTTPAddr() != "" })
	return srv
}
