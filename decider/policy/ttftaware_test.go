package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// reportRate applies r twice, captured at base and base + 1 s, with prefill counters that grow
// by rate tokens in one busy second, so the engine's view carries PrefillRate = rate.
func (f *fixture) reportRate(id string, r loadtable.Report, base time.Time, rate int64) {
	f.t.Helper()
	n := *r.Native
	r.Native = &n
	r.CapturedAt = base
	n.PrefillUncachedTokensTotal, n.PrefillBusyMicrosTotal = 1_000_000, 10_000_000
	f.report(id, r)
	n2 := n
	n2.PrefillUncachedTokensTotal, n2.PrefillBusyMicrosTotal = 1_000_000+rate, 11_000_000
	r.Native, r.CapturedAt = &n2, base.Add(time.Second)
	f.report(id, r)
}

// testClock is a settable clock for the load table and the in-flight tracker, so that a
// report's age at the pick (which the estimate drains the report's pending prefill by) is
// exact.
type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time { return c.now }

// withClock gives f a fresh load table and in-flight clock reading c (call before any report).
func withClock(t *testing.T, f *fixture, c *testClock) {
	t.Helper()
	load, err := loadtable.New(f.slots, loadtable.Config{Freshness: 5 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	f.load, f.deps.Load, f.now = load, load, c.Now
}

// newTTFT builds ttft_aware through New with the prefix source src (nil: no KV index).
func newTTFT(t *testing.T, f *fixture, spec config.PolicySpec, src PrefixSource) Policy {
	t.Helper()
	spec.Type = config.PolicyTTFTAware
	deps := f.deps
	deps.Prefix = src
	p, err := New(spec, deps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ptrTo[T any](v T) *T { return &v }

func candidate(t *testing.T, tr *Trace, id string) CandidateNote {
	t.Helper()
	for _, c := range tr.Candidates {
		if c.EngineID == id {
			return c
		}
	}
	t.Fatalf("trace has no candidate %s: %+v", id, tr.Candidates)
	return CandidateNote{}
}

func TestTTFTAwareHolderVersusColdEngine(t *testing.T) {
	t.Parallel()
	// Every engine prefills 10,000 tokens/s. The request has 8,000 input tokens; a holds 6,000
	// of them (2,000 uncached), b is cold and idle: b's estimate is 0 + 8000/10000 = 800 ms.
	// a's is queue/10000 + 200 ms: it loses when its queue costs more than the 600 ms the cache
	// saves (queue > 6,000 tokens) and wins otherwise.
	const input = 8000
	tests := []struct {
		name            string
		queue, waiting  int64
		margin          *int64
		want, reason    string
		wantA, wantB    time.Duration
		wantFullHolder  bool
		wantDetailMatch string
	}{
		{name: "long queue: cold idle engine wins", queue: 10000, want: "b", reason: ReasonLeastTTFT,
			wantA: 1200 * time.Millisecond, wantB: 800 * time.Millisecond},
		{name: "short queue: holder wins", queue: 4000, want: "a", reason: ReasonLeastTTFT,
			wantA: 600 * time.Millisecond, wantB: 800 * time.Millisecond},
		{name: "holder with a full batch, far ahead: still wins", queue: 2000, waiting: 1, want: "a", reason: ReasonLeastTTFT,
			wantA: 400 * time.Millisecond, wantB: 800 * time.Millisecond, wantFullHolder: true},
		{name: "holder with a full batch within the margin: guard picks the idle engine", queue: 4000, waiting: 1,
			want: "b", reason: ReasonHotSpotGuard, wantA: 600 * time.Millisecond, wantB: 800 * time.Millisecond,
			wantFullHolder: true, wantDetailMatch: "hot-spot guard: a had the least estimate"},
		{name: "guard off", queue: 4000, waiting: 1, margin: ptrTo[int64](0), want: "a", reason: ReasonLeastTTFT,
			wantA: 600 * time.Millisecond, wantB: 800 * time.Millisecond, wantFullHolder: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			base := time.Now().Add(-2 * time.Second)
			withClock(t, f, &testClock{base.Add(time.Second)}) // the pick reads the reports as captured
			es := f.engines(registry.RolePlain, "a", "b")
			running := int64(1)
			if tt.waiting > 0 {
				running = 64 // every slot taken: the waiting request and this one wait for slots
			}
			f.reportRate("a", nativeLoad(tt.queue, tt.waiting, running), base, 10000)
			f.reportRate("b", nativeLoad(0, 0, 0), base, 10000)
			p := newTTFT(t, f, config.PolicySpec{HotSpotMarginMillis: tt.margin}, &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 6000}})
			tr := &Trace{}
			pk, err := p.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: input, TokenIDs: tokens(input), Trace: tr})
			if err != nil {
				t.Fatal(err)
			}
			if pk.Engine.ID != tt.want || pk.Reason != tt.reason {
				t.Errorf("Pick() = %s (%s), want %s (%s); %s", pk.Engine.ID, pk.Reason, tt.want, tt.reason, tr.Detail)
			}
			a, b := candidate(t, tr, "a"), candidate(t, tr, "b")
			if a.TTFT.Estimate != tt.wantA || b.TTFT.Estimate != tt.wantB {
				t.Errorf("estimates a=%v b=%v, want %v %v", a.TTFT.Estimate, b.TTFT.Estimate, tt.wantA, tt.wantB)
			}
			if a.TTFT.Queue != time.Duration(tt.queue)*time.Second/10000 || a.TTFT.OwnPrefill != 200*time.Millisecond ||
				a.MatchedTokens != 6000 || a.UncachedTokens != 2000 || a.TTFT.Rate != 10000 || a.TTFT.RateDefault ||
				a.TTFT.QueueFrom != QueueFromReport || a.TTFT.BatchFull != tt.wantFullHolder {
				t.Errorf("a's parts = %+v matched %d uncached %d", a.TTFT, a.MatchedTokens, a.UncachedTokens)
			}
			if b.MatchedTokens != 0 || b.UncachedTokens != input || b.TTFT.Queue != 0 {
				t.Errorf("b's parts = %+v matched %d", b.TTFT, b.MatchedTokens)
			}
			if tt.wantDetailMatch != "" && !strings.Contains(tr.Detail, tt.wantDetailMatch) {
				t.Errorf("detail %q, want it to contain %q", tr.Detail, tt.wantDetailMatch)
			}
		})
	}
}

func TestTTFTAwareCountsDispatchesSinceReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Now().Add(-3 * time.Second) // reports captured at base+1s, dispatches 1 µs later
	withClock(t, f, &testClock{base.Add(time.Second + time.Microsecond)})
	es := f.engines(registry.RolePlain, "a", "b")
	f.reportRate("a", nativeLoad(0, 0, 0), base, 10000)
	f.reportRate("b", nativeLoad(3000, 0, 0), base, 10000)
	p := newTTFT(t, f, config.PolicySpec{}, nil)
	req := Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000}
	// a: 0 + 400 ms, b: 300 + 400 ms -> a.
	if pk := mustPick(t, p, es, req); pk.Engine.ID != "a" {
		t.Fatalf("first pick = %s, want a", pk.Engine.ID)
	}
	f.inflight(es[0], 1)
	// The report still shows a idle; with the dispatch a has 4,000 tokens ahead: 800 ms > 700 ms.
	tr := &Trace{}
	req.Trace = tr
	if pk := mustPick(t, p, es, req); pk.Engine.ID != "b" {
		t.Fatalf("second pick = %s, want b (a's dispatch since the report counted); %+v", pk.Engine.ID, tr.Candidates)
	}
	a := candidate(t, tr, "a")
	if a.DispatchesSinceReport != 1 || a.TTFT.QueueTokens != 4000 || a.TTFT.Estimate != 800*time.Millisecond || a.Load.WaitingUncachedTokens != 0 {
		t.Errorf("a = %+v, want 1 dispatch since, 4000 tokens ahead, 800 ms, report unchanged", a)
	}
}

func TestTTFTAwareSlotWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b")
	f.inflight(es[0], 4) // dispatched before the reports: 4 in flight, none since the report
	time.Sleep(time.Millisecond)
	base := time.Now().Add(-time.Second) // the second report is captured after the dispatches
	// a: every slot taken and 1 waiting, so the request waits for 2 slots; 4 dispatches in the
	// last 64 s and 4 in flight:
	// W = 4 × 64 s / 4 = 64 s on the engine, slots free every 64 s / 64 = 1 s, and the request
	// needs 2 of them: slot wait 2 s. Holding 9,000 of 10,000 tokens it saves 450 ms of prefill
	// over b (cold, idle) but loses: 0.5 + 2 + 0.05 s against 0.5 s.
	f.reportRate("a", nativeLoad(0, 1, 64), base, 20000)
	f.reportRate("b", nativeLoad(0, 0, 0), base, 20000)
	p := newTTFT(t, f, config.PolicySpec{HotSpotMarginMillis: ptrTo[int64](0)}, &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 9000}})
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 10000, TokenIDs: tokens(10000), Trace: tr})
	a := candidate(t, tr, "a")
	if pk.Engine.ID != "b" || (a.TTFT.SlotWait-2*time.Second).Abs() > time.Millisecond || a.TTFT.OwnPrefill != 50*time.Millisecond ||
		!strings.Contains(a.Note, "Little's law") {
		t.Errorf("Pick() = %s; a = %+v %s", pk.Engine.ID, a.TTFT, a.Note)
	}
}

func TestTTFTAwareStaleLoadFallsBackToInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b")
	stale := nativeLoad(0, 0, 0)
	stale.CapturedAt = time.Now().Add(-time.Minute)
	f.report("a", stale) // stale; b never reported
	f.inflight(es[0], 2)
	p := newTTFT(t, f, config.PolicySpec{TypicalRequestTokens: ptrTo[int64](1000), DefaultPrefillTokensPerSec: ptrTo[int64](5000)}, nil)
	tr := &Trace{}
	// a: 2 in flight × 1000 / 5000 = 400 ms + 1000/5000 = 200 ms; b: 0 + 200 ms.
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 1000, Trace: tr})
	if pk.Engine.ID != "b" {
		t.Fatalf("Pick() = %s, want b", pk.Engine.ID)
	}
	a := candidate(t, tr, "a")
	if a.LoadKnown || a.TTFT.QueueFrom != QueueFromInFlight || !a.TTFT.RateDefault || a.TTFT.Rate != 5000 ||
		a.TTFT.Estimate != 600*time.Millisecond || !strings.Contains(a.Note, "load unknown") {
		t.Errorf("a = %+v", a)
	}
	if !strings.Contains(tr.Detail, "no KV index") {
		t.Errorf("detail %q does not say the engines were treated as cold", tr.Detail)
	}
	f.inflight(es[1], 3) // b: 3 × 200 + 200 = 800 ms > a's 600 ms
	if pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 1000}); pk.Engine.ID != "a" {
		t.Errorf("Pick() = %s, want a once b has more in flight", pk.Engine.ID)
	}
}

func TestTTFTAwareAdmission(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Now().Add(-2 * time.Second)
	withClock(t, f, &testClock{base.Add(time.Second)})
	es := f.engines(registry.RolePlain, "a", "b", "c")
	f.reportRate("a", nativeLoad(0, 0, 5), base, 10000) // holder, running at the cap
	f.reportRate("b", nativeLoad(0, 0, 1), base, 10000)
	f.reportRate("c", nativeLoad(500, 0, 7), base, 10000)
	src := &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 3000}}
	p := newTTFT(t, f, config.PolicySpec{Admission: &config.AdmissionSpec{MaxRunningRequests: ptrTo[int64](5)}}, src)
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, TokenIDs: tokens(4000), Trace: tr})
	if pk.Engine.ID != "b" || pk.Reason != ReasonLeastTTFT {
		t.Errorf("Pick() = %s (%s), want b: a refused, c is refused too", pk.Engine.ID, pk.Reason)
	}
	if a := candidate(t, tr, "a"); a.Rejection != "max_running_requests" {
		t.Errorf("a's rejection = %q", a.Rejection)
	}
	_, err := p.Pick(context.Background(), []*registry.Engine{es[0], es[2]}, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, TokenIDs: tokens(4000)})
	var rj *RejectedError
	if !errors.As(err, &rj) || len(rj.Rejections) != 2 || !rj.Exhausted || rj.Rejections[0].EngineID != "a" {
		t.Errorf("Pick(a, c) error = %v, want both refused, a first", err)
	}
}

func TestTTFTAwareTieBreak(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b", "c")
	base := time.Now().Add(-2 * time.Second)
	// a: 2000 uncached at 20,000 tokens/s, b: 1000 at 10,000 -> both 100 ms; b has fewer
	// uncached tokens. c: cold, 3000 at 30,000 -> 100 ms as well.
	f.reportRate("a", nativeLoad(0, 0, 0), base, 20000)
	f.reportRate("b", nativeLoad(0, 0, 0), base, 10000)
	f.reportRate("c", nativeLoad(0, 0, 0), base, 30000)
	src := &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 1000, "b": 2000}}
	p := newTTFT(t, f, config.PolicySpec{}, src)
	for range 20 {
		if pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 3000, TokenIDs: tokens(3000)}); pk.Engine.ID != "b" {
			t.Fatalf("Pick() = %s, want b (equal estimates, fewest uncached)", pk.Engine.ID)
		}
	}
	// Equal estimates and uncached tokens: engine id.
	f2 := newFixture(t)
	es2 := f2.engines(registry.RolePlain, "z", "y", "x")
	p2 := newTTFT(t, f2, config.PolicySpec{}, nil)
	for range 20 {
		if pk := mustPick(t, p2, es2, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 100}); pk.Engine.ID != "x" {
			t.Fatalf("Pick() = %s, want x (lowest id)", pk.Engine.ID)
		}
	}
}

func TestTTFTAwareExplainAndErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b")
	f.report("a", loadtable.Report{Running: 2, Waiting: 3, KVCapacityTokens: 100}) // basic: no pending tokens, no rate
	p := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots, err: errPrefixUnavailable})
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 1000, TokenIDs: tokens(1000), Trace: tr})
	if pk.Engine.ID != "b" {
		t.Errorf("Pick() = %s, want b", pk.Engine.ID)
	}
	a := candidate(t, tr, "a")
	// 3 waiting × 2048 / 10,000 = 614.4 ms + 100 ms.
	if a.TTFT.QueueFrom != QueueFromWaiting || a.TTFT.QueueTokens != 6144 || (a.TTFT.Estimate-714400*time.Microsecond).Abs() > time.Microsecond || !a.TTFT.BatchFull {
		t.Errorf("a = %+v", a.TTFT)
	}
	for _, want := range []string{"ttft 714.4ms", "queue 614.4ms", "6144 tokens ahead", "own prefill 100ms", "1000 uncached, 0 matched",
		"10000 tokens/s (default_prefill_tokens_per_s)", "would queue"} {
		if !strings.Contains(a.Note, want) {
			t.Errorf("note %q lacks %q", a.Note, want)
		}
	}
	if tr.Prefix != prefixUnavailable || !strings.Contains(tr.Detail, "prefix index unavailable") {
		t.Errorf("prefix %v, detail %q", tr.Prefix, tr.Detail)
	}
	if _, err := p.Pick(context.Background(), es, Request{Stage: registry.RoleDecode}); !errors.Is(err, ErrInvalidConfiguration) {
		t.Errorf("Pick(decode) = %v, want ErrInvalidConfiguration", err)
	}
	if _, err := p.Pick(context.Background(), nil, Request{Stage: registry.RolePlain}); !errors.Is(err, ErrNoCandidates) {
		t.Errorf("Pick(empty) = %v, want ErrNoCandidates", err)
	}
	bad := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots, err: errors.New("bad namespace")})
	if _, err := bad.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 3, TokenIDs: tokens(3)}); err == nil {
		t.Error("Pick() swallowed a rejected prefix query")
	}
}

func TestTTFTAwareDataParallelRanks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Now().Add(-2 * time.Second)
	withClock(t, f, &testClock{base.Add(time.Second)})
	es := f.engines(registry.RolePlain, "dp")
	// Two ranks at 10,000 tokens/s each, 1,000 pending tokens each: the engine drains 2,000
	// tokens at 20,000 tokens/s (100 ms), and the request prefills on one rank (4,000 tokens,
	// 400 ms).
	for rank := range int32(2) {
		r := nativeLoad(1000, 0, 0)
		r.Rank, r.Ranks = rank, 2
		f.reportRate("dp", r, base, 10000)
	}
	p := newTTFT(t, f, config.PolicySpec{}, nil)
	tr := &Trace{}
	mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, Trace: tr})
	c := candidate(t, tr, "dp")
	if c.TTFT.Rate != 20000 || c.TTFT.Queue != 100*time.Millisecond || c.TTFT.OwnPrefill != 400*time.Millisecond {
		t.Errorf("parts = %+v, want rate 20000, queue 100 ms, own prefill 400 ms", c.TTFT)
	}
}

// TestTTFTAwareDrainsAgedReport checks that a report's pending prefill counts as drained at the
// engine's rate for the report's age, and that the dispatches since the report cost their own
// uncached tokens.
func TestTTFTAwareDrainsAgedReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Now().Add(-time.Minute)
	clk := &testClock{base.Add(time.Second)}
	withClock(t, f, clk)
	es := f.engines(registry.RolePlain, "a", "b")
	f.reportRate("a", nativeLoad(15000, 0, 1), base, 10000) // 1.5 s of pending prefill
	f.reportRate("b", nativeLoad(9000, 0, 1), base, 10000)  // 0.9 s
	clk.now = clk.now.Add(time.Second)                      // both reports 1 s old: a has 5,000 left, b none
	p := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots, matched: map[string]int64{"b": 3000}})
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, TokenIDs: tokens(4000), Trace: tr})
	a, b := candidate(t, tr, "a"), candidate(t, tr, "b")
	if pk.Engine.ID != "b" || a.TTFT.QueueTokens != 5000 || b.TTFT.QueueTokens != 0 || b.TTFT.Estimate != 100*time.Millisecond {
		t.Fatalf("Pick() = %s; a %+v, b %+v; want b, 5000 and 0 tokens ahead, b 100 ms", pk.Engine.ID, a.TTFT, b.TTFT)
	}
	if !strings.Contains(a.Note, "15000 reported − 10000 prefilled since + 0 dispatched since") {
		t.Errorf("a's note %q does not show the drain", a.Note)
	}
	// The pick is dispatched: b's next estimate counts the 1,000 uncached tokens it had there, not
	// the next request's 4,000 (it is cold for the new prompt: matched 0 now).
	f.inflight(es[1], 1)
	p2src := p
	tr = &Trace{}
	mustPick(t, p2src, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, Trace: tr})
	if b := candidate(t, tr, "b"); b.DispatchesSinceReport != 1 || b.TTFT.QueueTokens != 1000 {
		t.Errorf("b after its dispatch: %d since, %d tokens ahead; want 1, 1000 (the pick's own uncached tokens)", b.DispatchesSinceReport, b.TTFT.QueueTokens)
	}
}

// TestTTFTAwareWaitingWithFreeSlotsIsPrefillQueue checks that requests waiting on an engine
// with free batch slots count as prefill queue only (no slot wait, no guard), and that the
// slot wait and the queue overlap on an engine without a free slot (the longer counts).
func TestTTFTAwareWaitingWithFreeSlotsIsPrefillQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Now().Add(-2 * time.Second)
	withClock(t, f, &testClock{base.Add(time.Second)})
	es := f.engines(registry.RolePlain, "a", "b")
	f.reportRate("a", nativeLoad(2000, 3, 10), base, 10000) // 3 waiting for prefill, 54 slots free
	f.reportRate("b", nativeLoad(0, 0, 0), base, 10000)
	p := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 4000}})
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 5000, TokenIDs: tokens(5000), Trace: tr})
	a := candidate(t, tr, "a")
	// a: 200 ms queue + 100 ms own against b's 500 ms.
	if pk.Engine.ID != "a" || pk.Reason != ReasonLeastTTFT || a.TTFT.BatchFull || a.TTFT.SlotWait != 0 || a.TTFT.Estimate != 300*time.Millisecond {
		t.Errorf("Pick() = %s (%s); a %+v; want a by least_ttft, no slot wait, 300 ms", pk.Engine.ID, pk.Reason, a.TTFT)
	}
}

// A burst decided at the very instant a report was captured (one clock reading: a virtual
// clock, or a coarse one) must see its own earlier dispatches: the report cannot hold them.
// Counting only dispatches strictly after the capture left every engine as idle as its report
// for the whole burst, and the estimates under-counted the queue ahead (sluice simulate,
// Mooncake conversation trace, whose arrivals fall on report ticks: TTFT p90 above round robin).
func TestTTFTAwareCountsDispatchesAtTheReportInstant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().Add(-time.Minute)
	clk := &testClock{now}
	withClock(t, f, clk)
	es := f.engines(registry.RolePlain, "a", "b", "c")
	for _, id := range []string{"a", "b", "c"} {
		f.reportRate(id, nativeLoad(0, 0, 0), now.Add(-time.Second), 10000) // latest captured at now
	}
	p := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots})
	byID := map[string]*registry.Engine{}
	for _, e := range es {
		byID[e.ID] = e
	}
	// Four different 4,000-token cold requests at now: each engine gets one, then the fourth sees 4,000
	// tokens (0.4 s) ahead everywhere.
	var got []string
	for i := range 4 {
		tr := &Trace{}
		pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, TokenIDs: promptOf(uint32(i), 4000), Trace: tr})
		got = append(got, pk.Engine.ID)
		if i == 3 {
			for _, id := range []string{"a", "b", "c"} {
				c := candidate(t, tr, id)
				if c.DispatchesSinceReport != 1 || c.TTFT.QueueTokens != 4000 || c.TTFT.Estimate != 800*time.Millisecond {
					t.Errorf("4th pick, %s: %d dispatches since, %d tokens ahead, estimate %v; want 1, 4000, 800ms (note %q)",
						id, c.DispatchesSinceReport, c.TTFT.QueueTokens, c.TTFT.Estimate, c.Note)
				}
				if !strings.Contains(c.Note, "0 reported − 0 prefilled since + 4000 dispatched since") {
					t.Errorf("4th pick, %s: note %q does not show the dispatch since the report", id, c.Note)
				}
			}
		}
		f.inflight(byID[pk.Engine.ID], 1)
	}
	if strings.Join(got[:3], ",") != "a,b,c" {
		t.Errorf("picks %v; want a, b, c first (one each), then the tie-break", got)
	}
}

// TestTTFTAwareUnmeasuredEngineRunsAtPeersRate: an engine that has not prefilled since it
// started has no measured rate. Assumed to run at default_prefill_tokens_per_s (10,000/s),
// while its peers measured 1,000,000/s, it was never chosen, so it never measured one: it
// starved for as long as the others kept up. It is assumed as fast as its peers (the median
// per rank); with no peer measured either, the default applies.
func TestTTFTAwareUnmeasuredEngineRunsAtPeersRate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b", "c", "new")
	c := &testClock{now: time.Now()}
	withClock(t, f, c)
	base := c.now.Add(-time.Second) // the second report of each is captured now: nothing drained
	// a, b and c measured 1M tokens/s and each has 50,000 tokens waiting (50 ms); new is idle
	// and has reported no prefill work.
	for _, id := range []string{"a", "b", "c"} {
		f.reportRate(id, nativeLoad(50000, 1, 0), base, 1_000_000)
	}
	idle := nativeLoad(0, 0, 0)
	idle.CapturedAt = c.now
	f.report("new", idle)
	p := newTTFT(t, f, config.PolicySpec{}, nil)
	tr := &Trace{}
	// 10,000 uncached tokens: 60 ms on a, b or c; 10 ms on new at its peers' rate (1 s at the
	// default).
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 10000, Trace: tr})
	if pk.Engine.ID != "new" {
		t.Fatalf("Pick() = %s, want new (idle, at its peers' measured rate); candidates %+v", pk.Engine.ID, tr.Candidates)
	}
	n := candidate(t, tr, "new")
	if n.TTFT.Rate != 1_000_000 || n.TTFT.RateDefault || !strings.Contains(n.Note, "median per rank of the engines that measured one") {
		t.Errorf("new's note %q, parts %+v; want the peers' 1,000,000 tokens/s, said so", n.Note, n.TTFT)
	}

	// Nobody measured: the default for everyone, and the tie goes by id.
	f2 := newFixture(t)
	es2 := f2.engines(registry.RolePlain, "x", "y")
	f2.report("x", nativeLoad(0, 0, 0))
	f2.report("y", nativeLoad(0, 0, 0))
	tr2 := &Trace{}
	if pk := mustPick(t, newTTFT(t, f2, config.PolicySpec{}, nil), es2, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 10000, Trace: tr2}); pk.Engine.ID != "x" {
		t.Fatalf("Pick() = %s, want x", pk.Engine.ID)
	}
	if n := candidate(t, tr2, "y"); !n.TTFT.RateDefault || n.TTFT.Rate != float64(config.DefaultPrefillTokensPerSec) {
		t.Errorf("y's parts %+v; want default_prefill_tokens_per_s", n.TTFT)
	}
}
