package enginelink

import (
	"errors"
	"os"
	"path/filepath"
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
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
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
	f, err := os.Open("testdata/no_load.metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := parseMetrics(f); !errors.Is(err, errNoLoadMetrics) {
		t.Errorf("parseMetrics(no_load) error = %v, want errNoLoadMetrics", err)
	}
}

func TestParseSGLangLoads(t *testing.T) {
	f, err := os.Open("testdata/sglang_loads.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
