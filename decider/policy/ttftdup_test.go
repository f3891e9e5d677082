package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// TestTTFTAwareDuplicatePrefillCost: a holds 6,000 of the request's 8,000 tokens behind a
// 10,000-token queue (estimate 1.2 s); b is cold and idle (estimate 0.8 s). Going to b makes
// the fleet prefill a's 6,000 tokens again (0.6 s of work at 10,000 tokens/s), which costs the
// requests queued behind it on b workPrice(b's load) s per second of work. b's load is what this
// policy's earlier picks offered it: the tokens of the picks after the oldest it remembers, over
// the time from the oldest to now, ÷ b's rate. n picks of 8,000 tokens spread over span seconds
// offer (n − 1) × 8000 / span / 10000.
func TestTTFTAwareDuplicatePrefillCost(t *testing.T) {
	t.Parallel()
	const input = 8000
	type prime struct {
		n           int
		every, span time.Duration // picks every every, the oldest span before the pick
	}
	tests := []struct {
		name           string
		primeA, primeB prime
		queueA         int64
		want           string
		wantNoteMatch  string // in b's note
	}{
		{name: "b never picked: no price, b wins on its estimate", want: "b",
			wantNoteMatch: "+ duplicate prefill 0s (6000 tokens another candidate holds, prefilled again here: 600ms × 0.00 s of waiting per second of work at prefill load 0.00) = cost 800ms"},
		{name: "b half loaded: 0.6 s of work × 3 = 1.8 s, a wins", primeB: prime{41, 1600 * time.Millisecond, 64 * time.Second}, want: "a",
			wantNoteMatch: "+ duplicate prefill 1.8s (6000 tokens another candidate holds, prefilled again here: 600ms × 3.00 s of waiting per second of work at prefill load 0.50) = cost 2.6s"},
		// The same picks measured over three times the span: load 1/6, price 0.44, 0.26 s.
		{name: "the same picks long ago: lighter load, b wins", primeB: prime{41, 1600 * time.Millisecond, 192 * time.Second}, want: "b",
			wantNoteMatch: "600ms × 0.44 s of waiting per second of work at prefill load 0.17) = cost 1.064"},
		{name: "b offered more than it prefills: duplicating there is never chosen", primeB: prime{64, 400 * time.Millisecond, 25600 * time.Millisecond},
			queueA: 100000, want: "a",
			wantNoteMatch: "+ duplicate prefill unbounded (6000 tokens another candidate holds, prefilled again here at prefill load 1.97: offered more than it prefills)"},
		{name: "a loaded, b idle: the price is the destination's, so b relieves the holder", primeA: prime{64, 400 * time.Millisecond, 25600 * time.Millisecond},
			want: "b", wantNoteMatch: "at prefill load 0.00) = cost 800ms"},
		{name: "picks all at one instant cannot be measured: no price", primeB: prime{41, 0, 0}, want: "b",
			wantNoteMatch: "at prefill load 0.00) = cost 800ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			base := time.Now().Add(-10 * time.Minute)
			pickAt := base.Add(time.Second)
			clk := &testClock{pickAt}
			withClock(t, f, clk)
			es := f.engines(registry.RolePlain, "a", "b")
			p := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 6000}})
			primePicks := func(w *registry.Engine, pr prime) {
				for k := range pr.n {
					clk.now = pickAt.Add(-pr.span + time.Duration(k)*pr.every)
					// Only one candidate, no report yet: it is picked at the default rate.
					mustPick(t, p, []*registry.Engine{w}, Request{Model: "m", Stage: registry.RolePlain, InputTokens: input})
				}
			}
			primePicks(es[1], tt.primeB)
			primePicks(es[0], tt.primeA)
			clk.now = pickAt
			queueA := tt.queueA
			if queueA == 0 {
				queueA = 10000
			}
			f.reportRate("a", nativeLoad(queueA, 0, 1), base, 10000)
			f.reportRate("b", nativeLoad(0, 0, 0), base, 10000)
			tr := &Trace{}
			pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: input, TokenIDs: tokens(input), Trace: tr})
			if pk.Engine.ID != tt.want || pk.Reason != ReasonLeastTTFT {
				t.Errorf("Pick() = %s (%s), want %s; %s", pk.Engine.ID, pk.Reason, tt.want, tr.Detail)
			}
			a, b := candidate(t, tr, "a"), candidate(t, tr, "b")
			// The estimate stays the predicted time to first token; the cost only orders.
			if wantA := time.Duration(queueA)*time.Second/10000 + 200*time.Millisecond; a.TTFT.Estimate != wantA || b.TTFT.Estimate != 800*time.Millisecond {
				t.Errorf("estimates a=%v b=%v, want %v 800ms", a.TTFT.Estimate, b.TTFT.Estimate, wantA)
			}
			if strings.Contains(a.Note, "duplicate prefill") {
				t.Errorf("a, the deepest holder, was charged: %q", a.Note)
			}
			if !strings.Contains(b.Note, tt.wantNoteMatch) {
				t.Errorf("b's note %q\nwant it to contain %q", b.Note, tt.wantNoteMatch)
			}
			if !strings.Contains(tr.Detail, "duplicate-prefill cost") {
				t.Errorf("detail %q does not name the duplicate-prefill cost", tr.Detail)
			}
		})
	}
}

// TestTTFTAwareDuplicateCostSkipsRefusedHolder: a holder that admission refuses cannot be
// reached, so its prefix is not one the fleet could reuse: the others are not charged for it.
func TestTTFTAwareDuplicateCostSkipsRefusedHolder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Now().Add(-10 * time.Minute)
	pickAt := base.Add(time.Second)
	clk := &testClock{pickAt}
	withClock(t, f, clk)
	es := f.engines(registry.RolePlain, "a", "b", "c")
	p := newTTFT(t, f, config.PolicySpec{Admission: &config.AdmissionSpec{MaxRunningRequests: ptrTo[int64](5)}},
		&fakePrefix{slots: f.slots, matched: map[string]int64{"a": 6000}})
	for k := range 41 { // b half loaded, as in TestTTFTAwareDuplicatePrefillCost
		clk.now = pickAt.Add(-64*time.Second + time.Duration(k)*1600*time.Millisecond)
		mustPick(t, p, es[1:2], Request{Model: "m", Stage: registry.RolePlain, InputTokens: 8000})
	}
	clk.now = pickAt
	f.reportRate("a", nativeLoad(0, 0, 5), base, 10000) // the holder, at the running cap
	f.reportRate("b", nativeLoad(0, 0, 0), base, 10000)
	f.reportRate("c", nativeLoad(1000, 0, 0), base, 10000)
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 8000, TokenIDs: tokens(8000), Trace: tr})
	if pk.Engine.ID != "b" {
		t.Errorf("Pick() = %s, want b (a refused; b's 800 ms beat c's 900 ms, with no charge for a's prefix)", pk.Engine.ID)
	}
	if a := candidate(t, tr, "a"); a.Rejection != "max_running_requests" {
		t.Errorf("a's rejection = %q, want max_running_requests", a.Rejection)
	}
	for _, id := range []string{"b", "c"} {
		if c := candidate(t, tr, id); strings.Contains(c.Note, "duplicate prefill") {
			t.Errorf("%s charged for the refused holder's prefix: %q", id, c.Note)
		}
	}
}
