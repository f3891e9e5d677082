package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// TestTTFTAwareCountsDispatchesInTransit: a was picked twice (4,000 uncached tokens each) half a
// second before its report was captured, and those two requests had not reached it then: the
// report shows a idle while their two leases are alive. They are in neither the report nor the
// dispatches since it (one of 1,000 tokens), so without them a looks 8,000 tokens lighter than
// it is: a's estimate is (1,000 + 8,000) / 10,000 + 0.2 s = 1.1 s against b's 3,000 reported
// tokens, 0.5 s. When the report counts them (running 2), nothing is in transit and a wins
// with 0.3 s.
func TestTTFTAwareCountsDispatchesInTransit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		aRunning       int64
		want           string
		wantTransit    int64
		wantQueue      int64
		wantEstimateMS int64
		wantNote       string
	}{
		{name: "report without them: in transit, b wins", want: "b", wantTransit: 2, wantQueue: 9000, wantEstimateMS: 1100,
			wantNote: "estimated; ttft 1.1s = queue 900ms (9000 tokens ahead: reported pending prefill) + slot wait 0s + own prefill 200ms " +
				"(2000 uncached, 0 matched) at 10000 tokens/s (reported); " +
				"ahead = 0 reported − 0 prefilled since + 1000 dispatched since + 8000 in transit at the report (2 dispatches before it the engine did not count)"},
		{name: "report counts them: none in transit, a wins", aRunning: 2, want: "a", wantQueue: 1000, wantEstimateMS: 300,
			wantNote: "selected; ttft 300ms = queue 100ms (1000 tokens ahead: reported pending prefill) + slot wait 0s + own prefill 200ms " +
				"(2000 uncached, 0 matched) at 10000 tokens/s (reported); ahead = 0 reported − 0 prefilled since + 1000 dispatched since"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			base := time.Now().Add(-10 * time.Minute)
			captured := base.Add(time.Second) // reportRate's second report
			clk := &testClock{captured.Add(-500 * time.Millisecond)}
			withClock(t, f, clk)
			es := f.engines(registry.RolePlain, "a", "b")
			p := newTTFT(t, f, config.PolicySpec{}, nil)
			for range 2 { // picked and leased before the capture
				mustPick(t, p, es[:1], Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000})
				f.inflight(es[0], 1)
			}
			clk.now = captured
			f.reportRate("a", nativeLoad(0, 0, tt.aRunning), base, 10000)
			f.reportRate("b", nativeLoad(3000, 1, 0), base, 10000)
			mustPick(t, p, es[:1], Request{Model: "m", Stage: registry.RolePlain, InputTokens: 1000}) // since the report
			f.inflight(es[0], 1)

			tr := &Trace{}
			pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 2000, Trace: tr})
			if pk.Engine.ID != tt.want {
				t.Errorf("Pick() = %s, want %s; %s", pk.Engine.ID, tt.want, tr.Detail)
			}
			a := candidate(t, tr, "a")
			if a.InFlight != 3 || a.DispatchesSinceReport != 1 || a.InTransitAtReport != tt.wantTransit {
				t.Errorf("a: in flight %d, since %d, in transit %d; want 3, 1, %d", a.InFlight, a.DispatchesSinceReport, a.InTransitAtReport, tt.wantTransit)
			}
			if a.TTFT.QueueTokens != tt.wantQueue || a.TTFT.Estimate != time.Duration(tt.wantEstimateMS)*time.Millisecond {
				t.Errorf("a: %d tokens ahead, estimate %v; want %d, %d ms", a.TTFT.QueueTokens, a.TTFT.Estimate, tt.wantQueue, tt.wantEstimateMS)
			}
			if a.Note != tt.wantNote {
				t.Errorf("a's note\n%q\nwant\n%q", a.Note, tt.wantNote)
			}
			if b := candidate(t, tr, "b"); b.InTransitAtReport != 0 || strings.Contains(b.Note, "in transit") {
				t.Errorf("b, no lease: in transit %d, note %q", b.InTransitAtReport, b.Note)
			}
		})
	}
}

// TestRecentPicksSplitAtTheCapture: the picks at or after a report's capture are the dispatches
// since it, the latest picks before it the ones in transit; picks the ring does not hold cost
// the fallback.
func TestRecentPicksSplitAtTheCapture(t *testing.T) {
	t.Parallel()
	var r recentPicks
	t0 := time.Unix(1000, 0)
	for i, tok := range []int64{100, 200, 300, 400, 500} { // at t0 .. t0+4s
		r.record(0, t0.Add(time.Duration(i)*time.Second), tok)
	}
	capture := t0.Add(3 * time.Second) // 400 and 500 since (400 at the capture instant)
	tests := []struct {
		d, transit, after, before int64
	}{
		{0, 0, 0, 0},
		{2, 0, 900, 0},
		{1, 0, 500, 0},         // the latest since
		{2, 2, 900, 500},       // 300, 200 in transit
		{0, 3, 0, 600},         // 300, 200, 100
		{2, 5, 900, 600 + 2*7}, // two more than the ring holds before the capture: 7 each
		{4, 1, 900 + 2*7, 300},
	}
	for _, tt := range tests {
		after, before := r.tokensSince(0, capture, tt.d, tt.transit, 7)
		if after != tt.after || before != tt.before {
			t.Errorf("tokensSince(d %d, transit %d) = %d, %d; want %d, %d", tt.d, tt.transit, after, before, tt.after, tt.before)
		}
	}
}

// TestLoadComparisonsCountDispatchesInTransit: every comparison of reported load sees the
// dispatches in transit at the report. a holds three leases taken before its report, which
// shows it idle; b reports two waiting (200 tokens) and holds none. load_based scores a 3 (0 + 3
// in transit) against b's 2; power_of_two's pressure comparison adds a's three at the request's
// 100 tokens each, 300 pending against b's 200. When a's report
// counts the three (running 3), nothing is in transit and the scores are as reported: a's 3
// beats b's 4.
func TestLoadComparisonsCountDispatchesInTransit(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{config.PolicyLoadBased, config.PolicyPowerOfTwo} {
		for _, reported := range []bool{false, true} {
			name, want, bWaiting := policy+"/report without them", "b", int64(2)
			if reported { // b reports 4: a's 3 would lose to it if they counted twice
				name, want, bWaiting = policy+"/report counts them", "a", 4
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				es := f.engines(registry.RolePlain, "a", "b")
				dispatched := time.Now().Add(-time.Second)
				f.now = func() time.Time { return dispatched }
				f.inflight(es[0], 3)
				captured := dispatched.Add(100 * time.Millisecond)
				var aRunning int64
				if reported {
					aRunning = 3
				}
				ra, rb := nativeLoad(0, 0, aRunning), nativeLoad(bWaiting*100, bWaiting, 0) // 100 tokens per request
				ra.CapturedAt, rb.CapturedAt = captured, captured
				f.report("a", ra)
				f.report("b", rb)
				deps := f.deps
				deps.IntN = seq(0, 0) // power_of_two samples a, then b
				var p Policy
				if policy == config.PolicyLoadBased {
					p = newLeastLoad(deps, admission.Limits{})
				} else {
					var err error
					if p, err = New(config.PolicySpec{Type: policy}, deps); err != nil {
						t.Fatal(err)
					}
				}
				tr := &Trace{}
				pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 100, Trace: tr})
				if pk.Engine.ID != want {
					t.Errorf("Pick() = %s, want %s", pk.Engine.ID, want)
				}
				wantTransit := int64(3)
				if reported {
					wantTransit = 0
				}
				if a := candidate(t, tr, "a"); a.InTransitAtReport != wantTransit || a.DispatchesSinceReport != 0 {
					t.Errorf("a: in transit %d, since %d; want %d, 0", a.InTransitAtReport, a.DispatchesSinceReport, wantTransit)
				}
				if policy == config.PolicyLoadBased && tr.Detail != "scored waiting + running + dispatches since report (and in transit at it)" {
					t.Errorf("detail %q", tr.Detail)
				}
			})
		}
	}
}
