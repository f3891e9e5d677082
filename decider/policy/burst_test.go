package policy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// burstRig drives bursts of picks against unchanged reports: each burst applies one report per
// engine, then places requests one after another, recording a dispatch (a lease, never
// released during the burst) for each pick before the next, as the decider does between two
// reports (~500 ms apart, a burst takes a few ms). Dispatch times come from a simulated clock
// that moves forward from the reports' capture, so every dispatch is "since the report".
type burstRig struct {
	t      testing.TB
	f      *fixture
	es     []*registry.Engine
	pol    Policy
	stage  registry.Role
	clock  time.Time
	leases []inflight.Lease
	// withTokens sends token ids, so cache_aware looks the prompt up (its holders come from
	// the fake prefix source).
	withTokens bool
}

// newBurstRig builds n engines of stage and the policy of type typ through New, with its
// random draws from a seeded source so a run is reproducible.
func newBurstRig(t testing.TB, typ string, stage registry.Role, n int, seed uint64) *burstRig {
	t.Helper()
	f := newFixture(t)
	r := &burstRig{t: t, f: f, stage: stage}
	f.now = func() time.Time { return r.clock }
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
	}
	r.es = f.engines(stage, ids...)
	deps := f.deps
	deps.Prefix = &fakePrefix{slots: f.slots} // no holders: every cache_aware pick is a miss
	pol, err := New(config.PolicySpec{Type: typ}, deps)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	switch p := pol.(type) {
	case *powerOfTwo:
		p.intN = rng.IntN
	case *cacheAware:
		p.intN = rng.IntN
	}
	r.pol = pol
	return r
}

// burst applies reports (one per engine, in engine order), places size requests of input
// tokens, releases their leases, and returns the picks per engine.
func (r *burstRig) burst(reports []loadtable.Report, size int, input int64) []int {
	r.t.Helper()
	// Reports are captured now (they must be fresh), or just after the previous burst's last
	// dispatch if the simulated clock ran ahead.
	r.clock = later(r.clock.Add(time.Microsecond), time.Now())
	for i, w := range r.es {
		rep := reports[i]
		rep.CapturedAt = r.clock
		r.f.report(w.ID, rep)
	}
	snap := r.f.load.Snapshot()
	for _, w := range r.es {
		if _, ok := snap.View(w.Slot); !ok {
			r.t.Fatalf("report of %s is not fresh", w.ID)
		}
	}
	counts := make([]int, len(r.es))
	for range size {
		r.clock = r.clock.Add(time.Nanosecond)
		req := Request{Model: "m", Stage: r.stage, InputTokens: input}
		if r.withTokens {
			req.TokenIDs = tokens(int(input))
		}
		pk, err := r.pol.Pick(context.Background(), r.es, req)
		if err != nil {
			r.t.Fatal(err)
		}
		l, err := r.f.inf.Acquire(pk.Engine.Slot)
		if err != nil {
			r.t.Fatal(err)
		}
		r.leases = append(r.leases, l)
		for i, w := range r.es {
			if w == pk.Engine {
				counts[i]++
			}
		}
	}
	for _, l := range r.leases {
		r.f.inf.Release(l.ID)
	}
	r.leases = r.leases[:0]
	return counts
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func maxCount(counts []int) int {
	m := 0
	for _, c := range counts {
		m = max(m, c)
	}
	return m
}

// reportsWith returns n copies of base with one engine (the first) changed by edit.
func reportsWith(n int, base func() loadtable.Report, edit func(*loadtable.Report)) []loadtable.Report {
	out := make([]loadtable.Report, n)
	for i := range out {
		out[i] = base()
	}
	if edit != nil {
		edit(&out[0])
	}
	return out
}

func decodeLoad(waiting, running int64) loadtable.Report {
	return loadtable.Report{Running: running, Waiting: waiting, KVUsedTokens: 1000, KVCapacityTokens: 100_000,
		Native: &loadtable.Native{MaxRunningRequests: 64}}
}

// TestBurstSpreadsOnStaleReports: a burst decided on unchanged reports spreads across engines
// for every policy that compares reported load, because each comparison adds the dispatches
// since the report. Before that, an engine whose report was marginally lower (one request, a
// hundred tokens) won every comparison it was sampled into, about half of each burst on four
// engines; an exact tie already fell to in-flight, which is covered too.
func TestBurstSpreadsOnStaleReports(t *testing.T) {
	t.Parallel()
	const engines, picks, slack = 4, 40, 3
	prefill := func() loadtable.Report { return nativeLoad(100, 0, 4) }
	tests := []struct {
		name    string
		typ     string
		stage   registry.Role
		reports []loadtable.Report
	}{
		{"power_of_two prefill, equal reports", config.PolicyPowerOfTwo, registry.RolePrefill,
			reportsWith(engines, prefill, nil)},
		{"power_of_two prefill, one engine 100 uncached tokens lower", config.PolicyPowerOfTwo, registry.RolePrefill,
			reportsWith(engines, prefill, func(r *loadtable.Report) { r.Native.WaitingUncachedTokens = 0 })},
		{"power_of_two plain, one engine one running request lower", config.PolicyPowerOfTwo, registry.RolePlain,
			reportsWith(engines, prefill, func(r *loadtable.Report) { r.Running = 3 })},
		{"power_of_two decode, one engine one running request lower", config.PolicyPowerOfTwo, registry.RoleDecode,
			reportsWith(engines, func() loadtable.Report { return decodeLoad(0, 8) }, func(r *loadtable.Report) { r.Running = 7 })},
		{"power_of_two decode, one engine one waiting request lower", config.PolicyPowerOfTwo, registry.RoleDecode,
			reportsWith(engines, func() loadtable.Report { return decodeLoad(2, 64) }, func(r *loadtable.Report) { r.Waiting = 1 })},
		{"cache_aware miss, equal reports", config.PolicyCacheAware, registry.RolePrefill,
			reportsWith(engines, prefill, nil)},
		{"cache_aware miss, one engine 100 uncached tokens lower", config.PolicyCacheAware, registry.RolePrefill,
			reportsWith(engines, prefill, func(r *loadtable.Report) { r.Native.WaitingUncachedTokens = 0 })},
		{"cache_aware miss, one engine one waiting request lower", config.PolicyCacheAware, registry.RolePlain,
			reportsWith(engines, func() loadtable.Report { return nativeLoad(3000, 3, 64) }, func(r *loadtable.Report) { r.Waiting = 2 })},
		{"load_based, one engine one running request lower", config.PolicyLoadBased, registry.RolePrefill,
			reportsWith(engines, prefill, func(r *loadtable.Report) { r.Running = 3 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(10) {
				rig := newBurstRig(t, tt.typ, tt.stage, engines, seed)
				counts := rig.burst(tt.reports, picks, 1000)
				if m := maxCount(counts); m > picks/engines+slack {
					t.Fatalf("seed %d: picks per engine %v: busiest took %d of %d, want at most %d", seed, counts, m, picks, picks/engines+slack)
				}
			}
		})
	}
}

// TestCacheAwareHolderBurstSpreads: holders with equal matches are ranked by pressure; a burst
// of the same prompt must alternate between them instead of staying on the one whose report
// was marginally lower, and the pressure guard must see the burst's tokens on the deeper
// holder.
func TestCacheAwareHolderBurstSpreads(t *testing.T) {
	t.Parallel()
	const input = 8000
	t.Run("equal holders alternate", func(t *testing.T) {
		t.Parallel()
		rig := newBurstRig(t, config.PolicyCacheAware, registry.RolePrefill, 3, 1)
		rig.pol.(*cacheAware).source = &fakePrefix{slots: rig.f.slots, matched: map[string]int64{"e0": 6144, "e1": 6144}}
		rig.withTokens = true
		reports := []loadtable.Report{nativeLoad(0, 0, 4), nativeLoad(100, 0, 4), nativeLoad(0, 0, 0)}
		counts := rig.burst(reports, 20, input)
		if counts[0] > 11 || counts[1] > 11 || counts[2] != 0 {
			t.Errorf("picks per engine %v, want the two holders to share 20 about evenly and the cold engine none", counts)
		}
	})
	t.Run("guard switches once the burst outweighs the margin", func(t *testing.T) {
		t.Parallel()
		// e0 matches 500 tokens more (inside the 1024 margin); each dispatch there adds 1856
		// uncached tokens, so after 5 the guard (≥ 8192 tokens and 1.5×) moves picks to e1.
		rig := newBurstRig(t, config.PolicyCacheAware, registry.RolePrefill, 2, 1)
		rig.pol.(*cacheAware).source = &fakePrefix{slots: rig.f.slots, matched: map[string]int64{"e0": 6144, "e1": 5644}}
		rig.withTokens = true
		counts := rig.burst([]loadtable.Report{nativeLoad(0, 0, 4), nativeLoad(0, 0, 4)}, 20, input)
		if counts[1] == 0 || counts[0] > 15 {
			t.Errorf("picks per engine %v, want the guard to move part of the burst to e1", counts)
		}
	})
}

// TestBurstSpreadFigures prints the busiest engine's share of each burst over many simulated
// bursts (the BENCHMARKS.md "Burst spread on stale reports" figures). It is deterministic: the
// reports, the policies' draws and the clock are seeded or simulated. Run with
//
//	go test -count=1 -run TestBurstSpreadFigures -v ./decider/policy/
func TestBurstSpreadFigures(t *testing.T) {
	const engines, bursts, size, input = 4, 500, 16, 1000
	scenarios := []struct {
		name    string
		stage   registry.Role
		reports func(rng *rand.Rand) []loadtable.Report
	}{
		{"equal reports", registry.RolePrefill, func(*rand.Rand) []loadtable.Report {
			return reportsWith(engines, func() loadtable.Report { return nativeLoad(2000, 2, 8) }, nil)
		}},
		{"one engine 1 waiting request lower", registry.RolePrefill, func(*rand.Rand) []loadtable.Report {
			return reportsWith(engines, func() loadtable.Report { return nativeLoad(2000, 2, 8) },
				func(r *loadtable.Report) { r.Waiting, r.Native.WaitingUncachedTokens = 1, 1000 })
		}},
		{"varied reports", registry.RolePrefill, func(rng *rand.Rand) []loadtable.Report {
			out := make([]loadtable.Report, engines)
			for i := range out {
				w := rng.Int64N(3)
				out[i] = nativeLoad(w*(500+rng.Int64N(1500)), w, 4+rng.Int64N(8))
			}
			return out
		}},
		{"decode, varied reports", registry.RoleDecode, func(rng *rand.Rand) []loadtable.Report {
			out := make([]loadtable.Report, engines)
			for i := range out {
				out[i] = decodeLoad(0, 20+rng.Int64N(8))
			}
			return out
		}},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d engines, %d bursts of %d picks on unchanged reports; busiest engine's share of a burst (mean / worst):\n", engines, bursts, size)
	fmt.Fprintf(&b, "%-36s %-14s %-14s %-14s\n", "scenario", config.PolicyPowerOfTwo, "cache_aware", config.PolicyLoadBased)
	for _, sc := range scenarios {
		fmt.Fprintf(&b, "%-36s", sc.name)
		for _, typ := range []string{config.PolicyPowerOfTwo, config.PolicyCacheAware, config.PolicyLoadBased} {
			if typ == config.PolicyCacheAware && sc.stage == registry.RoleDecode {
				fmt.Fprintf(&b, " %-14s", "n/a")
				continue
			}
			rig := newBurstRig(t, typ, sc.stage, engines, 7)
			rng := rand.New(rand.NewPCG(42, 0))
			var sum float64
			worst := 0
			for range bursts {
				m := maxCount(rig.burst(sc.reports(rng), size, input))
				sum += float64(m) / size
				worst = max(worst, m)
			}
			fmt.Fprintf(&b, " %-14s", fmt.Sprintf("%.3f / %.3f", sum/bursts, float64(worst)/size))
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
}

// TestWithDispatches pins where pressure.set puts dispatches since a report.
func TestWithDispatches(t *testing.T) {
	t.Parallel()
	native := func(waiting, running, maxRunning, uncached int64) loadtable.View {
		return loadtable.View{Waiting: waiting, Running: running, Native: true, MaxRunningRequests: maxRunning,
			WaitingUncachedTokens: uncached, KVUsedTokens: 100, KVCapacityTokens: 1000}
	}
	withRate := native(0, 0, 8, 2000)
	withRate.PrefillRate, withRate.QueueTime, withRate.HasQueueTime = 1000, 2*time.Second, true
	tests := []struct {
		name    string
		v       loadtable.View
		d, toks int64
		want    pressure
	}{
		{"no dispatches: the report as is", native(1, 2, 8, 300), 0, 500,
			pressure{waiting: 1, running: 2, waitingUncached: 300, kvUsed: 100, kvCapacity: 1000}},
		{"empty queue, free slots: dispatches run", native(0, 2, 8, 0), 3, 500,
			pressure{waiting: 0, running: 5, waitingUncached: 1500, kvUsed: 1600, kvCapacity: 1000}},
		{"empty queue, slots run out: the rest queue", native(0, 6, 8, 0), 3, 500,
			pressure{waiting: 1, running: 8, waitingUncached: 1500, kvUsed: 1600, kvCapacity: 1000}},
		{"a queue: dispatches queue", native(2, 1, 8, 0), 3, 500,
			pressure{waiting: 5, running: 1, waitingUncached: 1500, kvUsed: 1600, kvCapacity: 1000}},
		{"queue time follows the tokens at the reported rate", withRate, 2, 1000,
			pressure{running: 2, waitingUncached: 4000, kvUsed: 2100, kvCapacity: 1000, queueTime: 4 * time.Second, hasQueueTime: true}},
		{"basic view: requests queue, tokens unknown", loadtable.View{Waiting: 0, Running: 3, KVUsedTokens: 5, KVCapacityTokens: 10}, 2, 500,
			pressure{waiting: 2, running: 3, kvUsed: 5, kvCapacity: 10}},
		{"tokens saturate", native(0, 0, 8, 0), 4096, math.MaxInt64 / 2,
			pressure{running: 8, waiting: 4088, waitingUncached: math.MaxInt64, kvUsed: math.MaxInt64, kvCapacity: 1000}},
	}
	for _, tt := range tests {
		var got pressure
		if got.set(&tt.v, tt.d, tt.toks); got != tt.want {
			t.Errorf("%s: set = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestCacheAwareQueueGateCountsDispatches: the soft queue gate counts the dispatches since the
// report as waiting, so a burst stops piling onto a holder once it would be queued past the
// limit, and the explain output shows them.
func TestCacheAwareQueueGateCountsDispatches(t *testing.T) {
	t.Parallel()
	rig := newBurstRig(t, config.PolicyCacheAware, registry.RolePrefill, 3, 1)
	ca := rig.pol.(*cacheAware)
	ca.s.QueueLimit = 3
	ca.source = &fakePrefix{slots: rig.f.slots, matched: map[string]int64{"e0": 6144}}
	rig.withTokens = true
	// Every engine reports one waiting request, so each dispatch joins the queue: e0 reads 2
	// after one dispatch, 3 (gated) after two.
	load := func() loadtable.Report { return nativeLoad(500, 1, 4) }
	counts := rig.burst([]loadtable.Report{load(), load(), load()}, 6, 8000)
	if counts[0] != 2 {
		t.Errorf("picks per engine %v, want the holder e0 to take 2 before the gate closes", counts)
	}

	rig.burst([]loadtable.Report{load(), load(), load()}, 0, 8000)
	rig.clock = rig.clock.Add(time.Nanosecond)
	if _, err := rig.f.inf.Acquire(rig.es[0].Slot); err != nil {
		t.Fatal(err)
	}
	tr := &Trace{}
	if _, err := ca.Pick(context.Background(), rig.es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: 8000, TokenIDs: tokens(8000), Trace: tr}); err != nil {
		t.Fatal(err)
	}
	for _, c := range tr.Candidates {
		if c.EngineID == "e0" && c.DispatchesSinceReport != 1 {
			t.Errorf("trace of e0: DispatchesSinceReport = %d, want 1", c.DispatchesSinceReport)
		}
	}
}

// TestReleasedDispatchesDoNotCount: a dispatch released since the report has finished on the
// engine, so it does not add to the engine's load: a report delayed (a slow broker) must not
// charge an engine for requests it already served. e1 reports less than e0 and took five
// requests since its report, all released: it still wins.
func TestReleasedDispatchesDoNotCount(t *testing.T) {
	t.Parallel()
	r := newBurstRig(t, config.PolicyPowerOfTwo, registry.RoleDecode, 2, 1)
	r.clock = time.Now()
	for i, w := range r.es {
		rep := decodeLoad(int64(1-i), 64) // batch full: a dispatch since would queue
		rep.CapturedAt = r.clock
		r.f.report(w.ID, rep)
	}
	for range 5 {
		r.clock = r.clock.Add(time.Nanosecond)
		l, err := r.f.inf.Acquire(r.es[1].Slot)
		if err != nil {
			t.Fatal(err)
		}
		r.f.inf.Release(l.ID)
	}
	r.clock = r.clock.Add(time.Nanosecond)
	pk, err := r.pol.Pick(context.Background(), r.es, Request{Model: "m", Stage: registry.RoleDecode, InputTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.f.load.Snapshot().View(r.es[1].Slot); !ok || v.Waiting != 0 {
		t.Fatalf("e1's report is not in force (fresh %v, %+v)", ok, v)
	}
	if pk.Engine != r.es[1] {
		t.Errorf("picked %s, want e1 (it reports less; its 5 dispatches since were released)", pk.Engine.ID)
	}
}

// TestDispatchesAtTheReportInstantCount: a request dispatched at the very clock reading a report
// was captured at is not in that report, so every comparison of reported load counts it (a
// burst decided at one reading of a virtual or coarse clock, right on a report tick, otherwise
// sees every engine as idle as its report).
func TestDispatchesAtTheReportInstantCount(t *testing.T) {
	t.Parallel()
	r := newBurstRig(t, config.PolicyPowerOfTwo, registry.RoleDecode, 2, 1)
	r.clock = time.Now()
	for i, w := range r.es {
		rep := decodeLoad(int64(i), 64) // batch full: e0 reports 0 waiting, e1 1
		rep.CapturedAt = r.clock
		r.f.report(w.ID, rep)
	}
	for range 2 { // at the capture instant, still in flight
		if _, err := r.f.inf.Acquire(r.es[0].Slot); err != nil {
			t.Fatal(err)
		}
	}
	pk, err := r.pol.Pick(context.Background(), r.es, Request{Model: "m", Stage: registry.RoleDecode, InputTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if pk.Engine != r.es[1] {
		t.Errorf("picked %s, want e1 (e0 reports 0 waiting but 2 were dispatched to it at the report's instant)", pk.Engine.ID)
	}
}
