package peer

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
)

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	d := ms(5, 1, 4, 2, 3, 10, 9, 8, 7, 6)
	for q, want := range map[float64]int{0.5: 5, 0.9: 9, 0.99: 10, 0: 1, 1: 10} {
		if got := Quantile(d, q); got != time.Duration(want)*time.Millisecond {
			t.Errorf("Quantile(%v) = %v, want %dms", q, got, want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of nothing is not 0")
	}
}

func TestSummarize(t *testing.T) {
	r := Round{System: "s", Policy: "p", CPU: 30 * time.Millisecond, Results: []Result{
		{Sent: 0, TTFT: 10 * time.Millisecond, E2E: time.Second, PromptTokens: 100, CachedTokens: 50},
		{Sent: time.Second, TTFT: 20 * time.Millisecond, E2E: time.Second, PromptTokens: 300, CachedTokens: 50},
		{Sent: 500 * time.Millisecond, Err: errors.New("boom"), PromptTokens: 1000},
	}}
	s := Summarize(r)
	if s.Requests != 3 || s.Errors != 1 || s.FirstErr != "boom" {
		t.Errorf("counts %+v", s)
	}
	if s.HitRate != 0.25 {
		t.Errorf("hit rate %v, want 100/400 over the successful requests", s.HitRate)
	}
	if s.TTFT50 != 10*time.Millisecond || s.TTFT99 != 20*time.Millisecond {
		t.Errorf("TTFT p50 %v p99 %v", s.TTFT50, s.TTFT99)
	}
	if s.ReqPerSec != 1 { // 2 done between 0 and 2 s
		t.Errorf("req/s %v, want 1", s.ReqPerSec)
	}
	if s.CPUPerReq != 10 {
		t.Errorf("CPU %v ms/req, want 10", s.CPUPerReq)
	}
	if s.TTFTMean != 15*time.Millisecond || s.EngineTTFTMean != 0 {
		t.Errorf("TTFT mean %v engine mean %v, want 15ms over the successful requests and 0 without engine figures", s.TTFTMean, s.EngineTTFTMean)
	}
	r.EngineTTFT, r.EngineTTFTCount = 24*time.Millisecond, 2
	if s := Summarize(r); s.EngineTTFTMean != 12*time.Millisecond {
		t.Errorf("engine TTFT mean %v, want 12ms", s.EngineTTFTMean)
	}
}

func TestTableMediansOverRounds(t *testing.T) {
	round := func(sys string, cpu time.Duration) Round {
		r := Round{System: sys, Policy: "p", CPU: cpu, Results: []Result{{TTFT: 4 * time.Millisecond, E2E: time.Second, PromptTokens: 10, CachedTokens: 5}}}
		if sys == "a" { // engine means 1, 3, 5 ms
			r.EngineTTFT, r.EngineTTFTCount = 2*cpu-time.Millisecond, 1
		}
		return r
	}
	var b strings.Builder
	if err := Table(&b, []Round{round("a", 1*time.Millisecond), round("b", 0), round("a", 3*time.Millisecond), round("a", 2*time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	if !strings.HasPrefix(lines[2], "| a | p | 3 | 1 | 0 (0–0) | 50.0 (50.0–50.0) |") || !strings.HasSuffix(lines[2], "| 2.00 (1.00–3.00) | 4.0 (4.0–4.0) | 3.0 (1.0–5.0) | 1.0 (-1.0–3.0) |") {
		t.Errorf("row a: %s", lines[2])
	}
	if !strings.HasPrefix(lines[3], "| b | p | 1 | 1 | 0 | 50.0 |") || !strings.HasSuffix(lines[3], "| 4.0 | – | – |") {
		t.Errorf("row b (one round, no range, no engine figures): %s", lines[3])
	}
}

func TestPairedTable(t *testing.T) {
	// One round per call: TTFT ms of the one request, and cached of 100 prompt tokens.
	round := func(sys, pol string, ttft, cached int) Round {
		return Round{System: sys, Policy: pol, Results: []Result{{TTFT: time.Duration(ttft) * time.Millisecond, E2E: time.Second, PromptTokens: 100, CachedTokens: cached}}}
	}
	var rounds []Round
	// Three rounds; x's hits differ from the reference's by +1, −1 and +3 points, its TTFT is
	// 0.5, 0.8 and 0.6 of the reference's; y ran only once.
	for i, r := range [][3]int{{100, 8, 50}, {200, 9, 160}, {100, 7, 60}} {
		rounds = append(rounds, round("sglang-router", "cache_aware", r[0], r[1]), round("sluice", "x", r[2], r[1]+[]int{1, -1, 3}[i]))
		if i == 0 {
			rounds = append(rounds, round("sluice", "y", 10, 10))
		}
	}
	var b strings.Builder
	if err := PairedTable(&b, rounds, "sglang-router"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "against sglang-router cache_aware") {
		t.Fatalf("table (want the note, header, rule and x's row only: y has one round):\n%s", b.String())
	}
	// mean +1, sd 2, half-width t(2) × 2/√3 = 4.303 × 1.1547 = 4.97.
	if want := "| sluice | x | 3 | 0.60 (0.50–0.80) | 0.60 (0.50–0.80) | +1.00 ± 4.97 | +1.00 (-1.00 … +3.00) | 2 of 3 |"; lines[4] != want {
		t.Errorf("row x:\n got %s\nwant %s", lines[4], want)
	}
	b.Reset()
	if err := PairedTable(&b, rounds[:2], "sglang-router"); err != nil || b.Len() != 0 {
		t.Errorf("one round: wrote %q, %v; want nothing", b.String(), err)
	}
	if err := PairedTable(&b, rounds, "nobody"); err != nil || b.Len() != 0 {
		t.Errorf("no reference: wrote %q, %v; want nothing", b.String(), err)
	}
	if got := tQuantile975(31); math.Abs(got-2.040) > 0.005 {
		t.Errorf("tQuantile975(31) = %v, want 2.040", got)
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 150, stime 50, cutime 7, cstime 3.
	line := "4242 (sglang::r (x) y) S 17 4242 4242 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 9 0 12345 1000 100 18446744073709551615"
	st, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.cpu != 2100*time.Millisecond {
		t.Errorf("ppid %d cpu %v, want 17 and 2.1s", st.ppid, st.cpu)
	}
	if _, err := parseStat("4242 (x) S 1 2"); err == nil {
		t.Error("a short line parsed")
	}
}

func TestProcCPUOfThisProcess(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		// burn CPU so there is some to read
	}
	cpu, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu <= 0 {
		t.Errorf("CPU of a process that just spun 50ms: %v", cpu)
	}
	if none, err := ProcCPU(); err != nil || none != 0 {
		t.Errorf("CPU of no process: %v, %v", none, err)
	}
}

func TestIdealHitRate(t *testing.T) {
	reqs := []trace.Request{
		{InputTokens: 600, BlockIDs: []int64{1, 2}},  // nothing seen yet
		{InputTokens: 1024, BlockIDs: []int64{1, 3}}, // block 1: 512 tokens hit
		{InputTokens: 520, BlockIDs: []int64{1, 3}},  // 512 + 8 tokens hit
		{InputTokens: 100, BlockIDs: nil},            // Azure: no prefix data
	}
	want := float64(512+520) / float64(600+1024+520+100)
	if got := IdealHitRate(reqs); got != want {
		t.Errorf("IdealHitRate = %v, want %v", got, want)
	}
	if IdealHitRate(nil) != 0 {
		t.Error("IdealHitRate of nothing is not 0")
	}
}
