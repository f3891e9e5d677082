package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSimMatchesEngineSequential runs the same requests one after another through the live
// engine on a StepClock and through Sim, and checks they agree on every result, on the load
// after each request and on the KV events.
func TestSimMatchesEngineSequential(t *testing.T) {
	t.Parallel()
	cfg := Config{BlockSize: 4, CacheBlocks: 6, PrefillTokensPerSec: 1000, DecodeMsPerToken: 5, MaxRunning: 2}
	live, liveEvs, clk := newStepEngine(t, cfg)
	simEvs := &recorder{}
	simCfg := cfg
	simCfg.Sink = simEvs.sink
	sim, err := NewSim(simCfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []Request{
		{TokenIDs: seq(1, 10), MaxTokens: 3},
		{TokenIDs: seq(1, 13), MaxTokens: 1},                // 2 blocks cached
		{TokenIDs: seq(100, 9), MaxTokens: 4},               // cold; evicts
		{TokenIDs: seq(1, 8), MaxTokens: 2},                 // partly evicted prefix
		{TokenIDs: seq(1, 8), MaxTokens: 2, CacheSalt: "x"}, // own namespace
		{TokenIDs: seq(100, 12), MaxTokens: 5},
	}
	now := clk.Now()
	for i, req := range reqs {
		want := mustRun(t, live, req)
		want.OutputIDs = nil
		r, err := sim.Submit(now, req)
		if err != nil {
			t.Fatal(err)
		}
		for {
			at, ok := sim.Next()
			if !ok {
				break
			}
			sim.Step(at)
			now = at
		}
		if !r.Done() {
			t.Fatalf("request %d: sim run not done", i)
		}
		if diff := cmp.Diff(want, r.Result()); diff != "" {
			t.Errorf("request %d: result (-live +sim):\n%s", i, diff)
		}
		if !now.Equal(clk.Now()) {
			t.Errorf("request %d: sim time %v, live %v", i, now, clk.Now())
		}
		if diff := cmp.Diff(live.Load(), sim.Load(now)); diff != "" {
			t.Errorf("request %d: load (-live +sim):\n%s", i, diff)
		}
		if diff := cmp.Diff(liveEvs.take(), simEvs.take()); diff != "" {
			t.Errorf("request %d: events (-live +sim):\n%s", i, diff)
		}
	}
}

// TestSimQueueing checks queueing, prefill and decode times by hand: one slot, 1000 tokens/s,
// 10 ms per token.
func TestSimQueueing(t *testing.T) {
	t.Parallel()
	sim, err := NewSim(Config{BlockSize: 4, CacheBlocks: 100, PrefillTokensPerSec: 1000, DecodeMsPerToken: 10, MaxRunning: 1})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	a, _ := sim.Submit(t0, Request{TokenIDs: seq(1, 100), MaxTokens: 11}) // prefill 100 ms, decode 100 ms
	b, _ := sim.Submit(t0.Add(50*time.Millisecond), Request{TokenIDs: seq(1, 102), MaxTokens: 1})
	// Pending prefill: b's 102 (a's blocks not stored yet) and the 50 a has left.
	if l := sim.Load(t0.Add(50 * time.Millisecond)); l.Waiting != 1 || l.WaitingUncachedTokens != 152 {
		t.Errorf("load with b queued: waiting %d, uncached %d; want 1, 152", l.Waiting, l.WaitingUncachedTokens)
	}
	done := sim.Step(t0.Add(150 * time.Millisecond))
	if l := sim.Load(t0.Add(150 * time.Millisecond)); l.KVUsedTokens != 100+6 || l.Decoding != 1 {
		t.Errorf("KV used at 150 ms: %d, decoding %d; want 106 (prompt + 6 tokens), 1", l.KVUsedTokens, l.Decoding)
	}
	for {
		at, ok := sim.Next()
		if !ok {
			break
		}
		done = append(done, sim.Step(at)...)
	}
	if len(done) != 2 || done[0] != a || done[1] != b {
		t.Fatalf("finished %v, want a then b", done)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if got := ms(a.FirstToken.Sub(a.Arrival)); got != 100 {
		t.Errorf("a TTFT %v ms, want 100", got)
	}
	if got := ms(a.Finished.Sub(a.Arrival)); got != 200 {
		t.Errorf("a end to end %v ms, want 200", got)
	}
	// b waits from 50 to 200 ms, finds 100 tokens (25 blocks) cached, prefills 2 tokens (2 ms).
	if b.CachedTokens != 100 || ms(b.Admitted.Sub(b.Arrival)) != 150 || ms(b.FirstToken.Sub(b.Admitted)) != 2 {
		t.Errorf("b cached %d, queue %v ms, prefill %v ms; want 100, 150, 2", b.CachedTokens, ms(b.Admitted.Sub(b.Arrival)), ms(b.FirstToken.Sub(b.Admitted)))
	}
	if l := sim.Load(b.Finished); l.Running != 0 || l.KVUsedTokens != 0 || l.PrefillUncachedTokensTotal != 102 {
		t.Errorf("final load %+v", l)
	}
}

// TestSimPrefillIsFCFS checks that prefill is one server per engine: with free slots, requests
// arriving together prefill one after another at the engine's rate, decode overlaps, and the
// load report counts the queued and the remaining prefill work.
func TestSimPrefillIsFCFS(t *testing.T) {
	t.Parallel()
	sim, err := NewSim(Config{BlockSize: 4, CacheBlocks: 100, PrefillTokensPerSec: 1000, DecodeMsPerToken: 10, MaxRunning: 4})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	var runs []*SimRun
	for i := range 3 {
		r, err := sim.Submit(t0, Request{TokenIDs: seq(1000*(i+1), 100), MaxTokens: 21}) // 100 ms prefill, 200 ms decode
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	sim.Step(t0.Add(150 * time.Millisecond))
	// a decodes, b has 50 tokens left, c (100 tokens) waits for the server though slots are free.
	if l := sim.Load(t0.Add(150 * time.Millisecond)); l.Running != 2 || l.Waiting != 1 || l.Decoding != 1 || l.WaitingUncachedTokens != 150 {
		t.Errorf("load at 150 ms: running %d waiting %d decoding %d pending %d; want 2, 1, 1, 150", l.Running, l.Waiting, l.Decoding, l.WaitingUncachedTokens)
	}
	for {
		at, ok := sim.Next()
		if !ok {
			break
		}
		sim.Step(at)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for i, r := range runs {
		wantTTFT, wantE2E := float64(100*(i+1)), float64(100*(i+1)+200)
		if got, e2e := ms(r.FirstToken.Sub(r.Arrival)), ms(r.Finished.Sub(r.Arrival)); got != wantTTFT || e2e != wantE2E {
			t.Errorf("run %d: TTFT %v ms, end to end %v ms; want %v, %v", i, got, e2e, wantTTFT, wantE2E)
		}
		if got := ms(r.Result().QueueTime); got != float64(100*i) {
			t.Errorf("run %d: queue %v ms, want %v", i, got, 100*i)
		}
	}
	// The measured rate (tokens over busy time) is the engine's rate, not a multiple of it.
	if l := sim.Load(runs[2].Finished); l.PrefillUncachedTokensTotal != 300 || l.PrefillBusyMicrosTotal != 300_000 {
		t.Errorf("prefill counters %d tokens, %d µs; want 300, 300000", l.PrefillUncachedTokensTotal, l.PrefillBusyMicrosTotal)
	}
}

// TestSimDecodeRoleHasNoPrefillServer checks that a decode engine starts requests on free slots
// alone.
func TestSimDecodeRoleHasNoPrefillServer(t *testing.T) {
	t.Parallel()
	sim, err := NewSim(Config{Role: RoleDecode, PrefillTokensPerSec: 1, DecodeMsPerToken: 10, MaxRunning: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	for i := range 3 {
		if _, err := sim.Submit(t0, Request{TokenIDs: seq(100*i, 64), MaxTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	sim.Step(t0)
	if l := sim.Load(t0); l.Running != 2 || l.Waiting != 1 || l.WaitingUncachedTokens != 0 {
		t.Errorf("decode engine load: running %d waiting %d pending %d; want 2, 1, 0", l.Running, l.Waiting, l.WaitingUncachedTokens)
	}
}
