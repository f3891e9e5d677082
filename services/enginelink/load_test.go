package enginelink_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/enginelink"
)

// serveFixture serves testdata/name; status can be switched to simulate a failing engine.
func serveFixture(t *testing.T, name string, status *atomic.Int32) *httptest.Server {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if status != nil && status.Load() != 0 {
			w.WriteHeader(int(status.Load()))
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func loadReports(t *testing.T, c *consumer, key string) []*sluicev1.LoadReport {
	t.Helper()
	var out []*sluicev1.LoadReport
	for _, r := range c.records(key) {
		var lr sluicev1.LoadReport
		if err := proto.Unmarshal(r.Value, &lr); err != nil {
			t.Fatalf("load record: %v", err)
		}
		out = append(out, &lr)
	}
	return out
}

// TestLoadReportsPerRank: /metrics (vLLM, SGLang) and SGLang's /v1/loads become one LoadReport per
// DP rank per scrape, in the engine's KV epoch, seq from 1 per rank.
func TestLoadReportsPerRank(t *testing.T) {
	for _, tc := range []struct {
		name, fixture string
		loads         bool
		want          []*sluicev1.LoadReport // first report of each rank; epoch, seq and time ignored
	}{
		{"vllm dp2", "vllm_dp2.metrics", false, []*sluicev1.LoadReport{
			{EngineId: "e1", DpRank: 0, DpSize: 2, RunningRequests: 3, WaitingRequests: 1, KvUsedTokens: 53740, KvCapacityTokens: 131072},
			{EngineId: "e1", DpRank: 1, DpSize: 2, RunningRequests: 5, KvUsedTokens: 32000, KvCapacityTokens: 128000},
		}},
		{"sglang metrics", "sglang_single.metrics", false, []*sluicev1.LoadReport{
			{EngineId: "e1", DpRank: 0, DpSize: 2, RunningRequests: 162, WaitingRequests: 2826, KvUsedTokens: 123859, KvCapacityTokens: 442000},
		}},
		{"sglang loads", "sglang_loads.json", true, []*sluicev1.LoadReport{
			{EngineId: "e1", DpRank: 0, DpSize: 2, RunningRequests: 12, WaitingRequests: 3, KvUsedTokens: 50000, KvCapacityTokens: 442000,
				Native: &sluicev1.NativeLoad{WaitingUncachedTokens: 4096, TotalTokens: 61000, MaxRunningRequests: 256,
					PrefillUncachedTokensTotal: 9876543, PrefillBusyMicrosTotal: 123456789}},
			{EngineId: "e1", DpRank: 1, DpSize: 2, RunningRequests: 7, KvUsedTokens: 20000, KvCapacityTokens: 442000,
				Native: &sluicev1.NativeLoad{TotalTokens: 21000, MaxRunningRequests: 256, PrefillUncachedTokensTotal: 1000, PrefillBusyMicrosTotal: 2000}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokers := startBroker(t)
			srv := serveFixture(t, tc.fixture, nil)
			eng := newFakeEngine(t, engineOpts{Replay: true})
			spec := enginelink.EngineSpec{ID: "e1", Model: "m", DPSize: 2, KVEventsEndpoint: eng.pubEP, KVReplayEndpoint: eng.ReplayEP()}
			if tc.loads {
				spec.LoadsURL = srv.URL + "/v1/loads"
			} else {
				spec.MetricsURL = srv.URL + "/metrics"
			}
			cfg := testConfig(brokers)
			cfg.Engines = []enginelink.EngineSpec{spec}
			kv, lc := consume(t, brokers, cfg.KVTopic), consume(t, brokers, cfg.LoadTopic)
			runLink(t, cfg)
			warmUp(t, eng, kv, "e1")
			waitFor(t, "three scrapes of every rank", func() bool { return len(loadReports(t, lc, "e1")) >= 3*len(tc.want) })

			epoch := kv.records("e1")[0].epoch()
			seq := map[int32]uint64{}
			var first []*sluicev1.LoadReport
			for _, r := range loadReports(t, lc, "e1") {
				if r.GetEpoch() != epoch {
					t.Errorf("rank %d seq %d: epoch %d, want the KV stream's %d", r.GetDpRank(), r.GetSeq(), r.GetEpoch(), epoch)
				}
				seq[r.GetDpRank()]++
				if r.GetSeq() != seq[r.GetDpRank()] {
					t.Errorf("rank %d: seq %d, want %d", r.GetDpRank(), r.GetSeq(), seq[r.GetDpRank()])
				}
				if r.GetCapturedAt() == nil {
					t.Errorf("rank %d seq %d: no captured_at", r.GetDpRank(), r.GetSeq())
				}
				if r.GetSeq() == 1 {
					first = append(first, r)
				}
			}
			if diff := cmp.Diff(tc.want, first, protocmp.Transform(),
				protocmp.IgnoreFields(&sluicev1.LoadReport{}, "epoch", "seq", "captured_at"),
				protocmp.SortRepeated(func(a, b *sluicev1.LoadReport) bool { return a.GetDpRank() < b.GetDpRank() })); diff != "" {
				t.Errorf("first reports mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailedScrapePublishesNothing: an engine answering 500 gets no load report; the failure
// is counted, and reports resume when it recovers.
func TestFailedScrapePublishesNothing(t *testing.T) {
	brokers := startBroker(t)
	var status atomic.Int32
	status.Store(http.StatusInternalServerError)
	srv := serveFixture(t, "vllm_old.metrics", &status)
	cfg := testConfig(brokers)
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", MetricsURL: srv.URL + "/metrics"}}
	lc := consume(t, brokers, cfg.LoadTopic)
	l := runLink(t, cfg)
	waitFor(t, "failed scrapes counted", func() bool {
		return metricValue(t, l.Registry(), "sluice_enginelink_scrapes_total", map[string]string{"engine": "e1", "result": "error"}) >= 3
	})
	if got := metricValue(t, l.Registry(), "sluice_enginelink_load_reports_total", nil); got != 0 {
		t.Fatalf("load reports = %v while every scrape failed, want 0", got)
	}
	status.Store(0)
	waitFor(t, "a load report after recovery", func() bool { return len(loadReports(t, lc, "e1")) > 0 })
	if got := loadReports(t, lc, "e1")[0]; got.GetSeq() != 1 || got.GetRunningRequests() != 7 {
		t.Errorf("first report = %v, want seq 1 with 7 running", got)
	}
}
