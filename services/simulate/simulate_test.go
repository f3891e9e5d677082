package simulate

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/state/config"
)

const realTrace = "../../testdata/traces/conversation_trace.jsonl"

var quiet = slog.New(slog.DiscardHandler)

// handConfig is a fleet whose numbers are easy to check: blocks of 512 tokens (one trace
// block), 5120 tokens/s of prefill (100 ms per block), 10 ms per output token.
func handConfig(engines int, policies string) Config {
	cfg := DefaultConfig()
	cfg.Trace = "synthetic.jsonl"
	cfg.Engines = engines
	cfg.BlockSize = 512
	cfg.CacheBlocks = 64
	cfg.PrefillTokensPerSec = 5120
	cfg.DecodeMsPerToken = 10
	cfg.Policies = policies
	cfg.KVLag = 0
	return cfg
}

// TestSyntheticHandChecked: one engine, three requests far apart. Request 0 (4 blocks) is cold:
// TTFT 400 ms. Request 1 shares its first 3 blocks and adds 1: TTFT 100 ms. Request 2 is request
// 0 again: all 4 blocks cached, so (in this model) nothing to prefill: TTFT 0.
// Hit rate = (0 + 3 + 4) / (4 + 4 + 4) = 7/12.
func TestSyntheticHandChecked(t *testing.T) {
	t.Parallel()
	reqs := []trace.Request{
		{Index: 0, Arrival: 0, InputTokens: 4 * 512, OutputTokens: 11, BlockIDs: []int64{1, 2, 3, 4}},
		{Index: 1, Arrival: 10 * time.Second, InputTokens: 4 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2, 3, 9}},
		{Index: 2, Arrival: 20 * time.Second, InputTokens: 4 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2, 3, 4}},
	}
	rep, err := Simulate(context.Background(), quiet, handConfig(1, "round_robin"), nil, reqs)
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Policies[0]
	if p.Served != 3 || p.BlockHitRate != round(7.0/12, 4) {
		t.Errorf("served %d, hit rate %v; want 3, %v", p.Served, p.BlockHitRate, round(7.0/12, 4))
	}
	// TTFTs 400, 100, 0 ms: p50 (2nd of 3) 100, p90 and p99 400.
	if p.TTFTMs != (Percentiles{P50: 100, P90: 400, P99: 400}) {
		t.Errorf("TTFT %+v, want p50 100, p90 400, p99 400", p.TTFTMs)
	}
	// e2e: 400 + 10×10 = 500, 100, 0 ms.
	if p.E2EMs != (Percentiles{P50: 100, P90: 500}) {
		t.Errorf("e2e %+v, want p50 100, p90 500", p.E2EMs)
	}
	if rep.Bounds.Infinite != 7.0/12 {
		t.Errorf("infinite bound %v, want 7/12", rep.Bounds.Infinite)
	}
}

// TestKVLagIsModelled: with a KV lag longer than the gap between two requests sharing
// a prefix, cache_aware cannot see the first request's blocks and the second lands by the miss
// fallback; with no lag it follows the blocks. Two engines; round_robin would alternate.
func TestKVLagIsModelled(t *testing.T) {
	t.Parallel()
	reqs := []trace.Request{
		{Index: 0, Arrival: 0, InputTokens: 4 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2, 3, 4}},
		{Index: 1, Arrival: 1 * time.Second, InputTokens: 4 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2, 3, 4}},
		{Index: 2, Arrival: 2 * time.Second, InputTokens: 4 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2, 3, 4}},
		{Index: 3, Arrival: 3 * time.Second, InputTokens: 4 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2, 3, 4}},
	}
	cfg := handConfig(2, "cache_aware")
	rep, err := Simulate(context.Background(), quiet, cfg, nil, reqs)
	if err != nil {
		t.Fatal(err)
	}
	// Request 0 is cold; 1–3 find all 4 blocks on the engine that holds them: 12/16.
	if got := rep.Policies[0].BlockHitRate; got != 0.75 {
		t.Errorf("hit rate with no KV lag = %v, want 0.75 (every repeat follows the blocks)", got)
	}
	if got := rep.Policies[0].MaxShare; got != 1 {
		t.Errorf("max share with no KV lag = %v, want 1", got)
	}
	cfg.KVLag = time.Hour
	rep, err = Simulate(context.Background(), quiet, cfg, nil, reqs)
	if err != nil {
		t.Fatal(err)
	}
	// The index never learns of the blocks: every pick is the miss fallback (power of two over
	// both engines, least in-flight / report), so the requests need not stay on one engine and
	// the hit rate can only be what chance gives; it is at most 0.75.
	if got := rep.Policies[0].BlockHitRate; got > 0.75 {
		t.Errorf("hit rate with a stale index = %v, want <= 0.75", got)
	}
}

// TestDeterministic: two runs give byte-identical JSON, for sluice's policies (the sampling ones
// draw from a source Config.Seed seeds through policy.Deps.IntN) and every peer baseline; another
// seed changes what random picks.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	reqs := syntheticTrace(400)
	policies := []string{"round_robin", "load_based", "random", "power_of_two", "cache_aware"}
	cfg := handConfig(4, strings.Join(policies, ",")+","+allPeers())
	cfg.BlockSize = 16
	cfg.CacheBlocks = 512
	cfg.DecodeMsPerToken = 20
	cfg.MaxRunning = 4
	var out [2][]byte
	for i := range out {
		rep, err := Simulate(context.Background(), quiet, cfg, nil, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Policies) != len(policies)+len(peerNames) {
			t.Fatalf("%d results, want %d", len(rep.Policies), len(policies)+len(peerNames))
		}
		if out[i], err = rep.JSON(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Errorf("two runs differ:\n%s\n---\n%s", out[0], out[1])
	}
	if !bytes.Contains(out[0], []byte(`"policy": "load_based"`)) {
		t.Errorf("report lacks load_based:\n%s", out[0])
	}
	cfg.Seed++
	rep, err := Simulate(context.Background(), quiet, cfg, nil, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if other, err := rep.JSON(); err != nil || bytes.Equal(other, out[0]) {
		t.Errorf("a different seed gave the same report (err %v)", err)
	}
}

// syntheticTrace is n requests, 5 per second, over 20 conversations: each turn extends its
// conversation's prefix by one block.
func syntheticTrace(n int) []trace.Request {
	var out []trace.Request
	turns := map[int][]int64{}
	for i := range n {
		conv := (i * 7) % 20
		ids := append(turns[conv], int64(1000*conv+len(turns[conv])+1))
		turns[conv] = ids
		out = append(out, trace.Request{Index: i, Arrival: time.Duration(i) * 200 * time.Millisecond,
			InputTokens: 512 * len(ids), OutputTokens: 20 + i%30, BlockIDs: append([]int64(nil), ids...)})
	}
	return out
}

// TestConfigFileAdmission: a configuration file with an admission cap is honoured (the real
// config parse and admission path): with max_inflight_requests 1 on one engine, requests that
// arrive while another runs are rejected.
func TestConfigFileAdmission(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	doc := "default_policy:\n  plain:\n    type: round_robin\n    admission: {max_inflight_requests: 1}\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	parsed, err := config.Parse([]byte(doc), config.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []trace.Request{
		{Index: 0, Arrival: 0, InputTokens: 512, OutputTokens: 100, BlockIDs: []int64{1}}, // runs ~1.1 s
		{Index: 1, Arrival: 500 * time.Millisecond, InputTokens: 512, OutputTokens: 1, BlockIDs: []int64{2}},
		{Index: 2, Arrival: 5 * time.Second, InputTokens: 512, OutputTokens: 1, BlockIDs: []int64{3}},
	}
	cfg := handConfig(1, "")
	cfg.ConfigPath = path
	rep, err := Simulate(context.Background(), quiet, cfg, parsed, reqs)
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Policies[0]
	if p.Policy != "config" || p.Served != 2 || p.Rejected["ADMISSION_REJECTED"] != 1 {
		t.Errorf("policy %q served %d rejected %v; want config, 2, 1 ADMISSION_REJECTED", p.Policy, p.Served, p.Rejected)
	}
}

// TestRealTraceWindow runs the subcommand's Run on two minutes of the conversation trace.
func TestRealTraceWindow(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(realTrace); err != nil {
		t.Fatalf("the repository's trace is missing (testdata/traces): %v", err)
	}
	cfg := DefaultConfig()
	cfg.Trace = realTrace
	cfg.Window = 2 * time.Minute
	cfg.Policies = "round_robin,cache_aware"
	cfg.Out = t.TempDir()
	var stdout bytes.Buffer
	if err := Run(context.Background(), quiet, cfg, &stdout); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(cfg.Out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| round_robin |", "| cache_aware |", "pooled LRU"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	for _, png := range []string{"hit_rate.png", "ttft_cdf.png"} {
		if st, err := os.Stat(filepath.Join(cfg.Out, png)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", png, err)
		}
	}
	js, err := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"block_hit_rate"`)) {
		t.Errorf("report.json lacks block_hit_rate:\n%s", js)
	}
}

// TestPredictionsMatchABurstOnAReportTick: -predictions writes each ttft_aware decision's
// predicted TTFT next to the simulated one. A burst of four cold requests arrives at a report
// tick (the report is captured at the burst's instant) on two engines, after one warm-up
// request that lets the decider measure the prefill rate: every prediction of the burst must be
// the engine's TTFT, so the burst's own earlier dispatches are counted as queue ahead.
func TestPredictionsMatchABurstOnAReportTick(t *testing.T) {
	t.Parallel()
	cfg := handConfig(2, "ttft_aware")
	cfg.Predictions = t.TempDir()
	reqs := []trace.Request{{Index: 0, Arrival: 0, InputTokens: 2 * 512, OutputTokens: 1, BlockIDs: []int64{1, 2}},
		{Index: 1, Arrival: 0, InputTokens: 2 * 512, OutputTokens: 1, BlockIDs: []int64{3, 4}}}
	for i := range 4 {
		reqs = append(reqs, trace.Request{Index: 2 + i, Arrival: 10 * time.Second, InputTokens: 4 * 512, OutputTokens: 1,
			BlockIDs: []int64{int64(100*i + 101), int64(100*i + 102), int64(100*i + 103), int64(100*i + 104)}})
	}
	if _, err := Simulate(context.Background(), quiet, cfg, nil, reqs); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(cfg.Predictions, "predictions-ttft_aware.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 1+len(reqs) {
		t.Fatalf("%d lines, want a header and %d rows:\n%s", len(lines), len(reqs), data)
	}
	head := strings.Split(lines[0], ",")
	col := func(row []string, name string) string {
		for i, h := range head {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %q in %v", name, head)
		return ""
	}
	var burstTTFTs []string
	for _, l := range lines[1+2:] {
		row := strings.Split(l, ",")
		est, actual := col(row, "est_ms"), col(row, "actual_ttft_ms")
		burstTTFTs = append(burstTTFTs, actual)
		if est != actual {
			t.Errorf("request %s: predicted %s ms, simulated %s ms (queue tokens %s, true %s, dispatches since %s)", col(row, "index"), est, actual,
				col(row, "queue_tokens"), col(row, "true_waiting_uncached"), col(row, "dispatches_since"))
		}
	}
	// 2048 cold tokens at 5120 tokens/s: 400 ms; the second on each engine waits for the first.
	if got := strings.Join(burstTTFTs, " "); got != "400.000 400.000 800.000 800.000" {
		t.Errorf("burst TTFTs %s; want 400, 400, 800, 800 ms", got)
	}
}
