package enginelink

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseMetrics(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[int]*rankLoad
	}{
		{"vllm_dp2.metrics", map[int]*rankLoad{
			0: {Running: 3, Waiting: 1, KVCapacity: 8192 * 16, KVUsed: 53740}, // 0.41 × 131072 = 53739.52
			1: {Running: 5, Waiting: 0, KVCapacity: 8000 * 16, KVUsed: 32000},
		}},
		{"vllm_old.metrics", map[int]*rankLoad{ // gpu_cache_usage_perc, block size 32
			0: {Running: 7, Waiting: 2, KVCapacity: 32000, KVUsed: 28800},
		}},
		{"sglang_dp2.metrics", map[int]*rankLoad{ // rank 1: the lowest tp rank's series
			0: {Running: 162, Waiting: 2826, KVUsed: 123859, KVCapacity: 442000},
			1: {Running: 80, Waiting: 12, KVUsed: 5000, KVCapacity: 442000},
		}},
		{"sglang_single.metrics", map[int]*rankLoad{
			0: {Running: 162, Waiting: 2826, KVUsed: 123859, KVCapacity: 442000},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseMetrics(f)
			if err != nil {
				t.Fatalf("parseMetrics: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreUnexported(rankLoad{})); diff != "" {
				t.Errorf("parseMetrics(%s) mismatch (-want +got):\n%s", tc.file, diff)
			}
		})
	}
}

func TestParseMetricsWithoutLoad(t *testing.T) {
	f, err := os.ReadFile("testdata/no_load.metrics")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseMetrics(f); !errors.Is(err, errNoLoadMetrics) {
		t.Errorf("parseMetrics(no_load) error = %v, want errNoLoadMetrics", err)
	}
}

func TestParseSGLangLoads(t *testing.T) {
	f, err := os.ReadFile("testdata/sglang_loads.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseSGLangLoads(f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]*rankLoad{
		0: {Running: 12, Waiting: 3, KVUsed: 50000, KVCapacity: 442000,
			CapturedAt: time.Date(2026, 12, 1, 9, 30, 0, 120000000, time.UTC),
			Native: &nativeLoad{WaitingUncachedTokens: 4096, TotalTokens: 61000, MaxRunningRequests: 256,
				PrefillUncachedTokensTotal: 9876543, PrefillBusyMicrosTotal: 123456789}},
		1: {Running: 7, KVUsed: 20000, KVCapacity: 442000,
			CapturedAt: time.Date(2026, 12, 1, 9, 30, 0, 121000000, time.UTC),
			Native:     &nativeLoad{TotalTokens: 21000, MaxRunningRequests: 256, PrefillUncachedTokensTotal: 1000, PrefillBusyMicrosTotal: 2000}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(rankLoad{}), cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("parseSGLangLoads mismatch (-want +got):\n%s", diff)
	}
}

func TestRankEndpoint(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://10.0.0.1:5557", 0, "tcp://10.0.0.1:5557"},
		{"tcp://10.0.0.1:5557", 3, "tcp://10.0.0.1:5560"},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
		{"ipc:///tmp/kv", 0, "ipc:///tmp/kv"},
		{"ipc:///tmp/kv", 2, "ipc:///tmp/kv_dp2"},
		{"inproc://kv", 1, "inproc://kv_dp1"},
	} {
		got, err := rankEndpoint(tc.ep, tc.rank)
		if err != nil || got != tc.want {
			t.Errorf("rankEndpoint(%q, %d) = %q, %v; want %q", tc.ep, tc.rank, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "tcp://host", "udp://h:1", "tcp://h:65535"} {
		if _, err := rankEndpoint(bad, 1); err == nil {
			t.Errorf("rankEndpoint(%q, 1) accepted", bad)
		}
	}
}

func TestBatchRank(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		rank    int
		ok      bool
	}{
		{"array with rank", mustMsgpack(t, []any{1.5, []any{[]any{"AllBlocksCleared"}}, 3}), 3, true},
		{"array rank nil", mustMsgpack(t, []any{1.5, []any{}, nil}), 0, false},
		{"array without rank", mustMsgpack(t, []any{1.5, []any{}}), 0, false},
		{"map with rank", mustMsgpack(t, map[string]any{"ts": 1.5, "events": []any{map[string]any{"type": "AllBlocksCleared"}}, "data_parallel_rank": 2}), 2, true},
		{"map without rank", mustMsgpack(t, map[string]any{"ts": 1.5, "events": []any{}}), 0, false},
		{"garbage", []byte{0xc1, 0x00}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rank, ok := batchRank(tc.payload)
			if rank != tc.rank || ok != tc.ok {
				t.Errorf("batchRank = %d, %v; want %d, %v", rank, ok, tc.rank, tc.ok)
			}
		})
	}
}

func FuzzBatchRank(f *testing.F) {
	f.Add(mustMsgpack(f, []any{1.5, []any{}, 1}))
	f.Add(mustMsgpack(f, map[string]any{"data_parallel_rank": 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, ok := batchRank(b); ok && (r < 0 || r > 1<<16) {
			t.Fatalf("rank %d out of range", r)
		}
	})
}

// FuzzParseMetrics: reading only the load families' lines (loadLines) gives what a parse of the
// whole page gives, whenever the whole page parses.
func FuzzParseMetrics(f *testing.F) {
	for _, name := range []string{"vllm_dp2.metrics", "vllm_old.metrics", "sglang_dp2.metrics", "sglang_single.metrics", "no_load.metrics"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n" +
		"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 4\n" +
		"{\"vllm:num_requests_running\",engine=\"0\"} 2\n  sglang:num_queue_reqs 7"))
	f.Fuzz(func(t *testing.T, page []byte) {
		got, gotErr := parseMetrics(page)
		fams, err := parseFamilies(page)
		if err != nil {
			return // the whole page is malformed: the load families alone may still parse
		}
		want, wantErr := loadsOf(fams)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("filtered parse error %v, whole-page parse error %v", gotErr, wantErr)
		}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(rankLoad{})); diff != "" {
			t.Fatalf("filtered parse differs from the whole page's (-whole +filtered):\n%s", diff)
		}
	})
}

// TestScrapeReusesConnection: an answer is read to its end, past the JSON document's last
// brace (here 64 KB of trailing whitespace in chunks, more than the client has buffered when
// the document ends), so every scrape goes over the one keep-alive connection: a body closed
// early costs the connection and the next scrape dials a new one.
func TestScrapeReusesConnection(t *testing.T) {
	doc, err := os.ReadFile("testdata/sglang_loads.json")
	if err != nil {
		t.Fatal(err)
	}
	tail := bytes.Repeat([]byte(" "), 64<<10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
		w.(http.Flusher).Flush() // chunked
		_, _ = w.Write(tail)
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	spec := EngineSpec{ID: "e1", Model: "m", LoadsURL: srv.URL + "/v1/loads"}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Engines = "", []EngineSpec{spec}
	l, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := newScraper(spec)
	for range 5 {
		loads, err := l.scrape(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		if len(loads) != 2 {
			t.Fatalf("%d ranks, want 2", len(loads))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 scrapes opened %d connections, want 1", n)
	}
}
