package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// promptOf is an n-token prompt of its own for each seed (tokens(n) is one prompt for all).
func promptOf(seed uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = seed*1_000_003 + uint32(i)
	}
	return out
}

// TestTTFTAwareCountsPromptsItSent: a prompt ttft_aware sent an engine counts as held there for
// the next request sharing it, before the KV index shows any of it, in whole 64-token chunks,
// in its own namespace only, until twice its predicted first token (+ grace) has passed; a
// dry run is not remembered.
func TestTTFTAwareCountsPromptsItSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().Add(-time.Minute)
	clk := &testClock{now}
	withClock(t, f, clk)
	es := f.engines(registry.RolePlain, "a", "b")
	for _, id := range []string{"a", "b"} {
		f.reportRate(id, nativeLoad(0, 0, 0), now.Add(-time.Second), 10000)
	}
	p := newTTFT(t, f, config.PolicySpec{}, &fakePrefix{slots: f.slots}) // the index holds nothing
	first := promptOf(1, 4000)
	tr := &Trace{}
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, InputTokens: 4000, TokenIDs: first, Trace: tr})
	holder, other := pk.Engine.ID, "a"
	if holder == "a" {
		other = "b"
	}
	est := candidate(t, tr, holder).TTFT.Estimate // 400 ms: the whole prompt at 10,000 tokens/s

	// The next turn: the first prompt, then 2,000 tokens more.
	next := append(append([]uint32(nil), first...), promptOf(2, 2000)...)
	pick := func(req Request) *Trace {
		t.Helper()
		tr := &Trace{}
		req.Model, req.Stage, req.InputTokens, req.Trace, req.DryRun = "m", registry.RolePlain, int64(len(req.TokenIDs)), tr, true
		mustPick(t, p, es, req)
		return tr
	}
	tr = pick(Request{TokenIDs: next})
	if c := candidate(t, tr, holder); c.MatchedTokens != 3968 || !strings.Contains(c.Note, "3968 of the matched tokens were sent here by this router") {
		t.Errorf("holder %s: matched %d, note %q; want 3968 (62 whole chunks of 64) sent by this router", holder, c.MatchedTokens, c.Note)
	}
	if c := candidate(t, tr, other); c.MatchedTokens != 0 || strings.Contains(c.Note, "sent here") {
		t.Errorf("other %s: matched %d, note %q; want nothing", other, c.MatchedTokens, c.Note)
	}
	// Another namespace (a cache salt) shares nothing.
	tr = pick(Request{TokenIDs: next, CacheSalt: "tenant-b"})
	if c := candidate(t, tr, holder); c.MatchedTokens != 0 {
		t.Errorf("salted request: holder matched %d, want 0", c.MatchedTokens)
	}
	// A shorter prompt than one chunk, or one differing in its first chunk, matches nothing.
	diff := append([]uint32(nil), next...)
	diff[10]++
	if c := candidate(t, pick(Request{TokenIDs: diff}), holder); c.MatchedTokens != 0 {
		t.Errorf("prompt differing in token 10: matched %d, want 0", c.MatchedTokens)
	}
	// The dry runs above left nothing behind: a dry run of a third prompt, then its next turn.
	third := promptOf(3, 1000)
	pick(Request{TokenIDs: third})
	for _, id := range []string{"a", "b"} {
		if c := candidate(t, pick(Request{TokenIDs: third}), id); c.MatchedTokens != 0 {
			t.Errorf("after a dry run, %s matched %d, want 0", id, c.MatchedTokens)
		}
	}
	// Still counted just before 2 × the estimate + grace, gone after.
	clk.now = now.Add(2*est + dispatchedGrace - time.Millisecond)
	if c := candidate(t, pick(Request{TokenIDs: next}), holder); c.MatchedTokens != 3968 {
		t.Errorf("just before expiry: matched %d, want 3968", c.MatchedTokens)
	}
	clk.now = now.Add(2*est + dispatchedGrace)
	if c := candidate(t, pick(Request{TokenIDs: next}), holder); c.MatchedTokens != 0 {
		t.Errorf("at expiry: matched %d, want 0", c.MatchedTokens)
	}
}

// TestDispatchedDeepestDepth checks the binary search against a linear scan over prompts
// sharing prefixes of every length with several dispatches to one engine.
func TestDispatchedDeepestDepth(t *testing.T) {
	t.Parallel()
	d := newDispatchedPrefixes()
	ns := Namespace{Model: "m"}
	now := time.Unix(1000, 0)
	base := promptOf(7, 64*40)
	for _, chunks := range []int{3, 17, 40, 9} {
		d.record(d.chain(ns, base[:64*chunks], nil), 1, now, now.Add(time.Second))
	}
	for cut := 0; cut <= 40; cut++ {
		q := append([]uint32(nil), base...)
		if cut < 40 {
			q[64*cut+5]++ // differs inside chunk cut
		}
		out := make([]int64, 2)
		d.matched(d.chain(ns, q, nil), []*registry.Engine{{Slot: 1}, {Slot: 2}}, now, out)
		if want := int64(64 * cut); out[0] != want || out[1] != 0 {
			t.Errorf("differs in chunk %d: matched %v, want [%d 0]", cut, out, want)
		}
	}
}

// TestTTFTAwareIdenticalBurstSpreads: a burst of one prompt, cold in the index, on idle engines
// with equal reports and 8 batch slots each. An engine sent the prompt holds it for the next
// copy, which waits there for the first copy's prefill: as long as that costs no more than
// prefilling it elsewhere, the copy stays (fewer uncached tokens break the tie, and the fleet
// prefills the prompt once). The memory of what was sent must not pile the burst past an
// engine's batch slots, though, nor, for a prompt whose copies still prefill a part of their
// own (not a whole number of chunks), past an even share.
func TestTTFTAwareIdenticalBurstSpreads(t *testing.T) {
	t.Parallel()
	const engines, picks, slots = 4, 40, 8
	for _, tc := range []struct {
		input   int64
		busiest int
	}{{1000, picks/engines + 3}, {4000, picks/engines + 3}, {16000, slots + 2}} {
		rig := newBurstRig(t, config.PolicyTTFTAware, registry.RolePlain, engines, 1)
		rig.withTokens = true
		reports := reportsWith(engines, func() loadtable.Report {
			r := nativeLoad(0, 0, 0)
			r.Native.MaxRunningRequests = slots
			return r
		}, nil)
		counts := rig.burst(reports, picks, tc.input)
		if m := maxCount(counts); m > tc.busiest {
			t.Errorf("%d-token prompt: picks per engine %v: busiest took %d of %d, want at most %d", tc.input, counts, m, picks, tc.busiest)
		}
	}
}

// TestDispatchedSweepsExpired: entries past their expiry are dropped by later records, a few
// times what each record adds, so the map stays near the live entries' size.
func TestDispatchedSweepsExpired(t *testing.T) {
	t.Parallel()
	d := newDispatchedPrefixes()
	ns := Namespace{Model: "m"}
	now := time.Unix(1000, 0)
	for i := range 2000 { // 2,000 prompts of 16 chunks, each alive for 10 ms, 1 ms apart
		at := now.Add(time.Duration(i) * time.Millisecond)
		d.record(d.chain(ns, promptOf(uint32(i), 64*16), nil), 1, at, at.Add(10*time.Millisecond))
	}
	// About 10 prompts (160 entries) are alive at the end; allow a few sweeps' worth of slack.
	if n := len(d.m); n > 500 {
		t.Errorf("%d entries left of 32,000 recorded, most of them long expired", n)
	}
}
