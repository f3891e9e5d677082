package deciderserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// TestBreakerOpensOnReportedFailures: callers report dispatch failures through Release; after
// the threshold the engine is no longer a candidate and explain says why.
func TestBreakerOpensOnReportedFailures(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()
	for range 5 { // default -breaker-failures
		resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "pd-chat", InputTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, &sluicev1.ReleaseRequest{LeaseId: resp.GetLeaseId(),
			Outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE, FailedEngineIds: []string{"d1"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "pd-chat", InputTokens: 10, Explain: true})
	if st := status.Convert(err); st.Code() != codes.Unavailable || reasonOf(st) != "NO_HEALTHY_ENGINES" {
		t.Fatalf("Decide after 5 failures = %v %s, want Unavailable NO_HEALTHY_ENGINES", st.Code(), reasonOf(st))
	}
	engines := listEngines(t, srv)
	if e := engines["d1"]; e.GetHealthy() || !strings.Contains(e.GetHealthReason(), "circuit breaker open") {
		t.Errorf("ListEngines d1 = healthy %v %q, want unhealthy with the breaker reason", e.GetHealthy(), e.GetHealthReason())
	}
	if !engines["p1"].GetHealthy() {
		t.Error("p1 was marked unhealthy although only d1 failed")
	}
}

func listEngines(t *testing.T, srv *Server) map[string]*sluicev1.Engine {
	t.Helper()
	conn := grpcConn(t, srv)
	resp, err := sluicev1.NewAdminServiceClient(conn).ListEngines(context.Background(), &sluicev1.ListEnginesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*sluicev1.Engine{}
	for _, e := range resp.GetEngines() {
		out[e.GetId()] = e
	}
	return out
}

// TestProbeRoutesAroundADeadEngine: an engine whose health endpoint fails stops being picked;
// when it recovers it is a candidate again.
func TestProbeRoutesAroundADeadEngine(t *testing.T) {
	var down atomic.Bool
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer eng.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer other.Close()
	path := filepath.Join(t.TempDir(), "cfg.yaml")
	doc := "workers:\n  - {id: flaky, url: \"" + eng.URL + "\", models: [m], role: plain}\n  - {id: steady, url: \"" + other.URL + "\", models: [m], role: plain}\n" +
		"default_policy:\n  plain: {type: round_robin}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", path
	cfg.Health.ProbeInterval, cfg.Health.ProbeFailures, cfg.Health.ProbeSuccesses = 20*time.Millisecond, 1, 1
	srv := runServer(t, cfg)
	c := grpcClient(t, srv)
	picks := func() map[string]int {
		got := map[string]int{}
		for range 6 {
			resp, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m", InputTokens: 1, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			got[resp.GetPick().GetPlain().GetEngineId()]++
		}
		return got
	}
	waitFor(t, func() bool { return picks()["flaky"] > 0 })
	down.Store(true)
	waitFor(t, func() bool { return picks()["flaky"] == 0 })
	down.Store(false)
	waitFor(t, func() bool { return picks()["flaky"] > 0 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReleaseAffectsOnlyTheLeasedEngines: an operator found that five Releases of a lease id
// that does not exist, naming a healthy engine as failed, opened its breaker. Release now only
// touches the engines of the lease it really releases, and only those the lease held.
func TestReleaseAffectsOnlyTheLeasedEngines(t *testing.T) {
	srv := startServer(t, "testdata/two-buckets.yaml")
	c := grpcClient(t, srv)
	ctx := context.Background()
	for i := range 10 { // twice the default -breaker-failures
		rel, err := c.Release(ctx, &sluicev1.ReleaseRequest{LeaseId: fmt.Sprintf("no-such-lease-%d", i),
			Outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE, FailedEngineIds: []string{"a1", "d1"}})
		if err != nil || rel.GetReleased() {
			t.Fatalf("Release(unknown lease) = %v, %v; want released=false", rel, err)
		}
	}
	for i := range 10 { // real leases on a1 (bucket short), naming a2, which they never held
		resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "chat", InputTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetPick().GetPlain().GetEngineId(); got != "a1" {
			t.Fatalf("Decide #%d picked %s, want a1", i, got)
		}
		if _, err := c.Release(ctx, &sluicev1.ReleaseRequest{LeaseId: resp.GetLeaseId(),
			Outcome: sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE, FailedEngineIds: []string{"a2", "ghost"}}); err != nil {
			t.Fatal(err)
		}
	}
	for id, e := range listEngines(t, srv) {
		if !e.GetHealthy() {
			t.Errorf("engine %s unhealthy (%q) after Releases that never named it with a lease it held", id, e.GetHealthReason())
		}
	}
	for _, id := range []string{"a1", "a2", "d1", "ghost"} {
		if st := srv.engineHealth.State(id); st.Breaker != "closed" {
			t.Errorf("breaker of %s = %s, want closed", id, st.Breaker)
		}
	}
}

// TestNewEngineNobodyListensOnGetsNoPicks: an engine registered through the admin API started
// healthy, so one at an address where nothing listens got picks until enough probes failed. It
// is unproven now until a probe passes; the engine proven at start keeps serving.
func TestNewEngineNobodyListensOnGetsNoPicks(t *testing.T) {
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer live.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	cfg := fileConfig(t)
	doc := "workers:\n  - {id: live, url: \"" + live.URL + "\", models: [m], role: plain}\ndefault_policy:\n  plain: {type: round_robin}\n"
	if err := os.WriteFile(cfg.ConfigPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Health.ProbeInterval = time.Hour // the probe before serving proves live; no other runs
	srv := startWith(t, cfg)
	body := `{"engine": {"id": "ghost", "url": "` + dead + `", "models": ["m"], "role": "ROLE_PLAIN"}}`
	if status, resp := restCall(t, srv, "POST", "/v1/admin/engines", adminToken, body); status != 200 {
		t.Fatalf("register ghost = %d %v", status, resp)
	}
	waitFor(t, func() bool { _, ok := srv.Registry().Snapshot().Get("ghost"); return ok })
	c := grpcClient(t, srv)
	for i := range 10 {
		resp, err := c.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m", InputTokens: 1, DryRun: true})
		if err != nil {
			t.Fatalf("Decide #%d: %v", i, err)
		}
		if got := resp.GetPick().GetPlain().GetEngineId(); got != "live" {
			t.Fatalf("Decide #%d picked %s, want live: ghost was never probed successfully", i, got)
		}
	}
	_, resp := restCall(t, srv, "GET", "/v1/admin/engines/ghost", viewerToken, "")
	e, _ := resp["engine"].(map[string]any)
	if reason, _ := e["healthReason"].(string); e["healthy"] != false || !strings.Contains(reason, "unproven") {
		t.Errorf("GET /v1/admin/engines/ghost = %v, want unhealthy and unproven", resp)
	}
}
