package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recorder is a Sink that keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) sink(evs []Event) {
	r.mu.Lock()
	r.evs = append(r.evs, evs...)
	r.mu.Unlock()
}

func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.evs
	r.evs = nil
	return out
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func newStepEngine(t *testing.T, cfg Config) (*Engine, *recorder, *StepClock) {
	t.Helper()
	rec := &recorder{}
	clk := NewStepClock(time.Unix(1000, 0))
	cfg.Clock, cfg.Sink = clk, rec.sink
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, rec, clk
}

func mustRun(t *testing.T, e *Engine, req Request) Result {
	t.Helper()
	r, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestLoRAAndSaltNamespaceBlocks(t *testing.T) {
	t.Parallel()
	e, rec, _ := newStepEngine(t, Config{BlockSize: 4, CacheBlocks: 100})
	prompt := seq(1, 8)
	mustRun(t, e, Request{TokenIDs: prompt, MaxTokens: 1})
	rec.take()
	res := mustRun(t, e, Request{TokenIDs: prompt, MaxTokens: 1, CacheSalt: "tenant-a"})
	if res.CachedTokens != 0 {
		t.Errorf("salted run cached %d tokens of an unsalted prompt, want 0", res.CachedTokens)
	}
	hashes := e.cache.chain(prompt, "", "tenant-a")
	want := []Event{{Kind: BlockStored, BlockHashes: hashes, TokenIDs: prompt, BlockSize: 4, CacheSalt: "tenant-a"}}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("salted run events mismatch (-want +got):\n%s", diff)
	}
	if got := e.CachedPrefixIn(prompt, "", "tenant-a"); got != 8 {
		t.Errorf("CachedPrefixIn(salt) = %d, want 8", got)
	}
	if got := e.CachedPrefixIn(prompt, "", "tenant-b"); got != 0 {
		t.Errorf("CachedPrefixIn(other salt) = %d, want 0", got)
	}
	res = mustRun(t, e, Request{TokenIDs: prompt, MaxTokens: 1, LoRAName: "adapter-a"})
	if res.CachedTokens != 0 {
		t.Errorf("adapter run cached %d tokens of base-model blocks, want 0", res.CachedTokens)
	}
	want = []Event{{Kind: BlockStored, BlockHashes: e.cache.chain(prompt, "adapter-a", ""), TokenIDs: prompt, BlockSize: 4, LoRAName: "adapter-a"}}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("adapter run events mismatch (-want +got):\n%s", diff)
	}
}

func TestCacheHitsAndStoredEvents(t *testing.T) {
	t.Parallel()
	e, rec, _ := newStepEngine(t, Config{BlockSize: 4, CacheBlocks: 100})
	prompt := seq(1, 10) // two full blocks and a partial one
	res := mustRun(t, e, Request{TokenIDs: prompt, MaxTokens: 3})
	if res.CachedTokens != 0 || res.PromptTokens != 10 || res.CompletionTokens != 3 || len(res.OutputIDs) != 3 {
		t.Errorf("first run: %+v", res)
	}
	evs := rec.take()
	hashes := e.cache.chain(prompt, "", "")
	want := []Event{{Kind: BlockStored, BlockHashes: hashes, TokenIDs: prompt[:8], BlockSize: 4}}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("events after first run mismatch (-want +got):\n%s", diff)
	}

	// Shares the first block, then diverges: one hit block, one new block whose parent is the first.
	second := append(seq(1, 4), seq(50, 8)...)
	res = mustRun(t, e, Request{TokenIDs: second, MaxTokens: 1})
	if res.CachedTokens != 4 {
		t.Errorf("second run cached %d tokens, want 4", res.CachedTokens)
	}
	h2 := e.cache.chain(second, "", "")
	want = []Event{{Kind: BlockStored, BlockHashes: h2[1:], ParentHash: h2[0], HasParent: true, TokenIDs: second[4:], BlockSize: 4}}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("events after second run mismatch (-want +got):\n%s", diff)
	}
	if got := e.CachedPrefix(prompt); got != 8 {
		t.Errorf("CachedPrefix = %d, want 8", got)
	}
	if res2 := mustRun(t, e, Request{TokenIDs: prompt, MaxTokens: 1}); res2.CachedTokens != 8 {
		t.Errorf("repeat run cached %d, want 8", res2.CachedTokens)
	}
	if len(rec.take()) != 0 {
		t.Error("a full cache hit emitted events")
	}
}

func TestEvictionEmitsBlockRemoved(t *testing.T) {
	t.Parallel()
	e, rec, _ := newStepEngine(t, Config{BlockSize: 2, CacheBlocks: 3})
	a := seq(1, 4)   // 2 blocks
	b := seq(100, 4) // 2 blocks
	mustRun(t, e, Request{TokenIDs: a, MaxTokens: 1})
	rec.take()
	ha, hb := e.cache.chain(a, "", ""), e.cache.chain(b, "", "")
	mustRun(t, e, Request{TokenIDs: b, MaxTokens: 1})
	// The cache holds 3 blocks: a's leaf goes first (chains are touched deepest first).
	want := []Event{
		{Kind: BlockRemoved, BlockHashes: []uint64{ha[1]}},
		{Kind: BlockStored, BlockHashes: hb, TokenIDs: b, BlockSize: 2},
	}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("eviction events mismatch (-want +got):\n%s", diff)
	}
	if got := e.CachedPrefix(a); got != 2 {
		t.Errorf("a's cached prefix after eviction = %d, want 2 (root kept)", got)
	}
	if l := e.Load(); l.CachedBlocks != 3 {
		t.Errorf("cached blocks = %d, want 3", l.CachedBlocks)
	}
	e.Reset()
	if diff := cmp.Diff([]Event{{Kind: AllBlocksCleared}}, rec.take()); diff != "" {
		t.Errorf("reset events mismatch (-want +got):\n%s", diff)
	}
	if got := e.CachedPrefix(b); got != 0 {
		t.Errorf("cached prefix after reset = %d", got)
	}
}

func TestChainLongerThanCache(t *testing.T) {
	t.Parallel()
	e, rec, _ := newStepEngine(t, Config{BlockSize: 1, CacheBlocks: 2})
	mustRun(t, e, Request{TokenIDs: seq(1, 5), MaxTokens: 1})
	evs := rec.take()
	if len(evs) != 1 || len(evs[0].BlockHashes) != 2 {
		t.Fatalf("events = %+v, want one BlockStored of 2 blocks", evs)
	}
}

func TestLatencyProportionalToUncachedTokens(t *testing.T) {
	t.Parallel()
	e, _, _ := newStepEngine(t, Config{BlockSize: 16, PrefillTokensPerSec: 1000, DecodeMsPerToken: 10, Speed: 2})
	cold := mustRun(t, e, Request{TokenIDs: seq(0, 320), MaxTokens: 5})
	// 320 uncached tokens at 1000/s, twice as fast: 160 ms; 4 decode steps of 5 ms.
	if cold.PrefillTime != 160*time.Millisecond {
		t.Errorf("cold prefill = %v, want 160ms", cold.PrefillTime)
	}
	if cold.Duration != 180*time.Millisecond {
		t.Errorf("cold duration = %v, want 180ms", cold.Duration)
	}
	warm := mustRun(t, e, Request{TokenIDs: append(seq(0, 320), seq(5000, 80)...), MaxTokens: 1})
	if warm.CachedTokens != 320 || warm.PrefillTime != 40*time.Millisecond {
		t.Errorf("warm: cached %d prefill %v, want 320 and 40ms", warm.CachedTokens, warm.PrefillTime)
	}
	l := e.Load()
	if l.PrefillUncachedTokensTotal != 400 || l.PrefillBusyMicrosTotal != 200_000 {
		t.Errorf("prefill counters = %d tokens, %d µs; want 400, 200000", l.PrefillUncachedTokensTotal, l.PrefillBusyMicrosTotal)
	}
}

// TestWallClockLatency checks that the wall clock really waits: prefill time is proportional to
// the uncached tokens (exactly, in the result) and the first token never comes before it. Only
// lower bounds are asserted on wall time, which a loaded machine cannot break.
func TestWallClockLatency(t *testing.T) {
	t.Parallel()
	e, err := New(Config{PrefillTokensPerSec: 1000, DecodeMsPerToken: 1, Speed: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tokens  int
		prefill time.Duration
	}{{100, 10 * time.Millisecond}, {1000, 100 * time.Millisecond}} {
		start := time.Now()
		r, err := e.Submit(context.Background(), Request{TokenIDs: seq(tc.tokens*1000, tc.tokens), MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		first := <-r.Tokens()
		res, err := r.Result()
		if err != nil {
			t.Fatal(err)
		}
		if res.PrefillTime != tc.prefill {
			t.Errorf("%d tokens: prefill time %v, want %v", tc.tokens, res.PrefillTime, tc.prefill)
		}
		if got := first.Time.Sub(start); got < tc.prefill {
			t.Errorf("%d tokens: first token after %v, before the %v prefill", tc.tokens, got, tc.prefill)
		}
	}
}

func TestQueueFIFOAndCancellation(t *testing.T) {
	t.Parallel()
	e, err := New(Config{MaxRunning: 1, PrefillTokensPerSec: 1e9, DecodeMsPerToken: 1000, Speed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	first, err := e.Submit(ctx1, Request{TokenIDs: seq(0, 32), MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	<-first.Tokens() // running
	ctx2, cancel2 := context.WithCancel(context.Background())
	second, _ := e.Submit(ctx2, Request{TokenIDs: seq(100, 40), MaxTokens: 1})
	third, _ := e.Submit(context.Background(), Request{TokenIDs: seq(200, 8), MaxTokens: 1})
	waitFor(t, func() bool { return e.Load().Waiting == 2 })
	l := e.Load()
	if l.Running != 1 || l.WaitingUncachedTokens != 48 || l.KVUsedTokens != 33 || l.TotalTokens != 81 {
		t.Errorf("load with a queue: %+v", l)
	}
	cancel2() // leaves the queue
	if _, err := second.Result(); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled queued run: err %v", err)
	}
	if l := e.Load(); l.Waiting != 1 || l.WaitingUncachedTokens != 8 {
		t.Errorf("after cancelling a queued run: %+v", l)
	}
	cancel1() // frees the slot for the third
	if _, err := first.Result(); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled running run: err %v", err)
	}
	res, err := third.Result()
	if err != nil || res.CompletionTokens != 1 {
		t.Errorf("third: %+v, %v", res, err)
	}
	e.Wait()
	if l := e.Load(); l.Running != 0 || l.Waiting != 0 || l.KVUsedTokens != 0 || l.WaitingUncachedTokens != 0 {
		t.Errorf("idle load: %+v", l)
	}
}

// TestPrefillServerQueuesAndCancellation checks the live engine's single prefill server: a
// request waits behind another's prefill although a slot is free, and cancelling the prefill
// hands the server on.
func TestPrefillServerQueuesAndCancellation(t *testing.T) {
	t.Parallel()
	e, err := New(Config{MaxRunning: 4, PrefillTokensPerSec: 1, DecodeMsPerToken: 1, Speed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first, err := e.Submit(ctx1, Request{TokenIDs: seq(0, 64), MaxTokens: 1}) // 64 s of prefill
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.Load().Running == 1 })
	second, err := e.Submit(context.Background(), Request{TokenIDs: seq(1000, 1), MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.Load().Waiting == 1 })
	if l := e.Load(); l.Running != 1 || l.WaitingUncachedTokens < 1 || l.WaitingUncachedTokens > 65 {
		t.Errorf("load behind a prefill: %+v; want running 1 and 1..65 pending tokens", l)
	}
	cancel1()
	if _, err := first.Result(); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled prefill: err %v", err)
	}
	if res, err := second.Result(); err != nil || res.CompletionTokens != 1 {
		t.Errorf("second after the cancelled prefill: %+v, %v", res, err)
	}
	e.Wait()
	if l := e.Load(); l.Running != 0 || l.Waiting != 0 || l.WaitingUncachedTokens != 0 {
		t.Errorf("idle load: %+v", l)
	}
}

func TestPrefillAndDecodeRoles(t *testing.T) {
	t.Parallel()
	p, rec, _ := newStepEngine(t, Config{Role: RolePrefill, BlockSize: 4})
	res := mustRun(t, p, Request{TokenIDs: seq(0, 8), MaxTokens: 50})
	if res.CompletionTokens != 1 || len(rec.take()) != 1 {
		t.Errorf("prefill: %+v", res)
	}
	d, drec, _ := newStepEngine(t, Config{Role: RoleDecode, BlockSize: 4})
	res = mustRun(t, d, Request{TokenIDs: seq(0, 8), MaxTokens: 5})
	if res.CompletionTokens != 5 || res.PrefillTime != 0 || len(drec.take()) != 0 {
		t.Errorf("decode: %+v", res)
	}
}

func TestDeterministicOutput(t *testing.T) {
	t.Parallel()
	a, _, _ := newStepEngine(t, Config{})
	b, _, _ := newStepEngine(t, Config{})
	ra := mustRun(t, a, Request{TokenIDs: seq(7, 30), MaxTokens: 8})
	rb := mustRun(t, b, Request{TokenIDs: seq(7, 30), MaxTokens: 8})
	if diff := cmp.Diff(ra, rb); diff != "" {
		t.Errorf("two engines disagree (-a +b):\n%s", diff)
	}
}

func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	e, _, _ := newStepEngine(t, Config{})
	if _, err := e.Submit(context.Background(), Request{}); !errors.Is(err, ErrEmptyPrompt) {
		t.Errorf("empty prompt: %v", err)
	}
	if _, err := e.Submit(context.Background(), Request{TokenIDs: []uint32{1}, MaxTokens: -1}); err == nil {
		t.Error("negative max tokens accepted")
	}
	if _, err := New(Config{Speed: -1, BlockSize: -2}); err == nil {
		t.Error("invalid config accepted")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// gateClock is a virtual clock whose sleepers block until the test wakes them, at whatever
// virtual time it sets: it plays a machine that wakes goroutines late.
type gateClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps chan gateSleep
}

type gateSleep struct {
	d    time.Duration
	wake chan struct{}
}

func (c *gateClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *gateClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	s := gateSleep{d: d, wake: make(chan struct{})}
	select {
	case c.sleeps <- s:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the next sleeper.
func (c *gateClock) next(t *testing.T) gateSleep {
	t.Helper()
	select {
	case s := <-c.sleeps:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no run went to sleep")
		return gateSleep{}
	}
}

// TestLateWakeupsKeepTheModelSchedule wakes every sleeping run 30 ms late. The runs still keep
// the model's times: the request queued behind a prefill starts when that prefill ended in the
// model, not when its goroutine woke, and a decode's tokens are due at the first token + i ×
// the time per token, so one late wake-up never adds to the next (Sim's schedule, which
// sluice simulate reports).
func TestLateWakeupsKeepTheModelSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clk := &gateClock{now: t0, sleeps: make(chan gateSleep)}
	e, err := New(Config{Clock: clk, BlockSize: 4, PrefillTokensPerSec: 1000, DecodeMsPerToken: 20})
	if err != nil {
		t.Fatal(err)
	}
	const late = 30 * time.Millisecond
	ctx := context.Background()
	a, err := e.Submit(ctx, Request{TokenIDs: seq(1, 100), MaxTokens: 1}) // 100 ms of prefill
	if err != nil {
		t.Fatal(err)
	}
	sa := clk.next(t)
	if sa.d != 100*time.Millisecond {
		t.Fatalf("a's prefill sleep %v, want 100ms", sa.d)
	}
	b, err := e.Submit(ctx, Request{TokenIDs: seq(1000, 100), MaxTokens: 4}) // queues behind a's prefill
	if err != nil {
		t.Fatal(err)
	}
	for e.Load().Waiting != 1 {
		time.Sleep(time.Millisecond) // b's goroutine reaches the queue
	}
	clk.set(t0.Add(100*time.Millisecond + late))
	close(sa.wake)
	// b started at 100 ms in the model: its prefill ends at 200 ms, 70 ms after now.
	sb := clk.next(t)
	if want := 100*time.Millisecond - late; sb.d != want {
		t.Errorf("b's prefill sleep %v, want %v (the model's end, 200 ms, less the 30 ms a woke late)", sb.d, want)
	}
	now := t0.Add(200*time.Millisecond + late)
	clk.set(now)
	close(sb.wake)
	// Three more tokens, due at 220, 240, 260 ms, with every wake-up 30 ms late: a token whose
	// time has passed goes out at once, and a sleep lasts until the next token's time.
	dues := []time.Duration{220 * time.Millisecond, 240 * time.Millisecond, 260 * time.Millisecond}
	for _, due := range dues {
		d := t0.Add(due).Sub(now)
		if d <= 0 {
			continue // no sleep for it
		}
		s := clk.next(t)
		if s.d != d {
			t.Errorf("sleep %v for the token due at %v, want %v (now %v)", s.d, due, d, now.Sub(t0))
		}
		now = now.Add(s.d + late)
		clk.set(now)
		close(s.wake)
	}
	// Sleeps the model does not have (a sleep per step) are woken as late, so the runs end.
	go func() {
		for {
			select {
			case s := <-clk.sleeps:
				now = now.Add(s.d + late)
				clk.set(now)
				close(s.wake)
			case <-b.Done():
				return
			}
		}
	}()
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("b did not end")
	}
	ra, err := a.Result()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Result()
	if err != nil {
		t.Fatal(err)
	}
	if ra.QueueTime != 0 || rb.QueueTime != 100*time.Millisecond || rb.PrefillTime != 100*time.Millisecond {
		t.Errorf("a queued %v; b queued %v and prefilled %v: want 0, 100ms, 100ms (the model's)", ra.QueueTime, rb.QueueTime, rb.PrefillTime)
	}
	// Late wake-ups do not add up: b ends at 270 ms (its last sleep, until 240 ms, woke 30 ms
	// late and the token due at 260 ms was then past), where a sleep per step would have
	// ended it at 200 + 30 + 3 × (20 + 30) = 380 ms.
	if want := 270 * time.Millisecond; rb.Duration != want {
		t.Errorf("b's duration %v, want %v", rb.Duration, want)
	}
}
