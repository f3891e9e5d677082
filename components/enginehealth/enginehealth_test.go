package enginehealth

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

func setup(t *testing.T, cfg Config, urls map[string]string) (*Tracker, *registry.Registry, *time.Time) {
	t.Helper()
	reg := registry.New(slots.NewTable())
	var ws []registry.Engine
	for id, u := range urls {
		ws = append(ws, registry.Engine{ID: id, URL: u, Models: []string{"m"}, Role: registry.RolePlain})
	}
	if err := reg.Replace(ws); err != nil {
		t.Fatal(err)
	}
	tr, err := New(slog.New(slog.DiscardHandler), reg, cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tr.now = func() time.Time { return now }
	return tr, reg, &now
}

func candidates(reg *registry.Registry) int {
	return len(reg.Snapshot().Candidates("m", registry.RolePlain))
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.BreakerFailures, cfg.BreakerCoolDown = 3, 10*time.Second
	tr, reg, now := setup(t, cfg, map[string]string{"a": "http://a.test"})
	tr.ReportFailure("a")
	tr.ReportFailure("a")
	tr.ReportSuccess("a") // resets the streak
	tr.ReportFailure("a")
	tr.ReportFailure("a")
	if candidates(reg) != 1 {
		t.Fatal("breaker opened before the threshold")
	}
	tr.ReportFailure("a")
	if st := tr.State("a"); st.Breaker != BreakerOpen || candidates(reg) != 0 {
		t.Fatalf("after 3 failures: %+v, candidates %d; want open and excluded", st, candidates(reg))
	}
	if h, _ := reg.Snapshot().Health("a"); h.Healthy || h.Reason == "" {
		t.Errorf("registry health = %+v, want unhealthy with a reason", h)
	}
	*now = now.Add(9 * time.Second)
	tr.tick()
	if candidates(reg) != 0 {
		t.Fatal("breaker closed before the cool-down")
	}
	*now = now.Add(2 * time.Second)
	tr.tick()
	if st := tr.State("a"); st.Breaker != BreakerHalfOpen || candidates(reg) != 1 {
		t.Fatalf("after cool-down: %+v; want half-open and a candidate", st)
	}
	tr.ReportFailure("a") // failed trial: open again at once
	if st := tr.State("a"); st.Breaker != BreakerOpen {
		t.Fatalf("failed trial left breaker %s", st.Breaker)
	}
	*now = now.Add(11 * time.Second)
	tr.tick()
	tr.ReportSuccess("a")
	if st := tr.State("a"); st.Breaker != BreakerClosed || candidates(reg) != 1 {
		t.Errorf("successful trial: %+v; want closed", st)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.ProbeFailures, cfg.ProbeSuccesses = 2, 2
	tr, reg, _ := setup(t, cfg, map[string]string{"a": srv.URL, "dead": "http://127.0.0.1:1"})
	ctx := context.Background()
	tr.ProbeAll(ctx)
	if candidates(reg) != 2 {
		t.Fatal("one failed probe already excluded an engine")
	}
	tr.ProbeAll(ctx)
	if got := candidates(reg); got != 1 || !tr.State("a").Healthy || tr.State("dead").Healthy {
		t.Fatalf("after two probes: %d candidates, a=%+v dead=%+v", got, tr.State("a"), tr.State("dead"))
	}
	failing.Store(true)
	tr.ProbeAll(ctx)
	tr.ProbeAll(ctx)
	if candidates(reg) != 0 {
		t.Fatal("failing engine still a candidate")
	}
	failing.Store(false)
	tr.ProbeAll(ctx)
	if candidates(reg) != 0 {
		t.Fatal("recovered after one good probe; want two")
	}
	tr.ProbeAll(ctx)
	if candidates(reg) != 1 || !tr.State("a").Healthy {
		t.Errorf("a did not recover after two good probes: %+v", tr.State("a"))
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.ProbePath = "health"
	cfg.BreakerCoolDown = 0
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted a relative probe path and zero cool-down")
	}
}

// TestUnknownEnginesHoldNoState: reports naming ids the registry does not hold (a caller can
// send any string) are ignored, so a million fake ids leave the tracker's memory unchanged.
func TestUnknownEnginesHoldNoState(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.BreakerFailures = 1
	tr, reg, _ := setup(t, cfg, map[string]string{"a": "http://a.test"})
	for i := range 1_000_000 {
		id := "fake-" + strconv.Itoa(i)
		if i%2 == 0 {
			tr.ReportFailure(id)
		} else {
			tr.ReportSuccess(id)
		}
	}
	tr.mu.Lock()
	n := len(tr.engines)
	tr.mu.Unlock()
	if n != 0 {
		t.Errorf("tracker holds state for %d engines after reports about unknown ids, want 0", n)
	}
	if candidates(reg) != 1 {
		t.Error("reports about unknown ids changed the registered engine")
	}
	tr.ReportFailure("a")
	if st := tr.State("a"); st.Breaker != BreakerOpen {
		t.Errorf("registered engine a after one failure (threshold 1): breaker %s, want open", st.Breaker)
	}
}

// TestNewEnginesAreUnproven: an engine registered after the tracker started is no candidate
// until a probe passes (one registered where nothing listens never gets picks); a new url
// starts unproven again; TrustNewEngines opts out.
func TestNewEnginesAreUnproven(t *testing.T) {
	t.Parallel()
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer live.Close()
	cfg := DefaultConfig()
	cfg.ProbeFailures = 3
	tr, reg, _ := setup(t, cfg, nil)
	engines := []registry.Engine{
		{ID: "live", URL: live.URL, Models: []string{"m"}, Role: registry.RolePlain},
		{ID: "dead", URL: "http://127.0.0.1:1", Models: []string{"m"}, Role: registry.RolePlain},
	}
	if err := reg.Replace(engines); err != nil {
		t.Fatal(err)
	}
	if n := candidates(reg); n != 0 {
		t.Fatalf("%d candidates before any probe, want 0 (both unproven)", n)
	}
	if h, _ := reg.Snapshot().Health("dead"); h.Healthy || !strings.Contains(h.Reason, "unproven") {
		t.Errorf("dead engine health = %+v, want unhealthy and unproven", h)
	}
	tr.ProbeAll(context.Background())
	if got := reg.Snapshot().Candidates("m", registry.RolePlain); len(got) != 1 || got[0].ID != "live" {
		t.Fatalf("candidates after one probe = %v, want only live (dead stays unproven although -probe-failures is 3)", got)
	}
	if h, _ := reg.Snapshot().Health("dead"); h.Healthy || !strings.Contains(h.Reason, "unproven") || !strings.Contains(h.Reason, "probe failing") {
		t.Errorf("dead engine health after a failed probe = %+v, want unproven with the probe error", h)
	}
	engines[0].URL = live.URL + "/" // moved: proven again only by a probe of the new url
	if err := reg.Replace(engines); err != nil {
		t.Fatal(err)
	}
	if n := candidates(reg); n != 0 {
		t.Errorf("%d candidates after live moved to a new url, want 0 until it is probed", n)
	}
	tr.ProbeAll(context.Background())
	if n := candidates(reg); n != 1 {
		t.Errorf("%d candidates after probing the new url, want 1", n)
	}

	cfg.TrustNewEngines = true
	_, trusting, _ := setup(t, cfg, nil)
	if err := trusting.Replace(engines); err != nil {
		t.Fatal(err)
	}
	if n := candidates(trusting); n != 2 {
		t.Errorf("TrustNewEngines: %d candidates before any probe, want 2", n)
	}
}
