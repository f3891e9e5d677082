package policy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

func pickIDs(t *testing.T, p Policy, engines []*registry.Engine, req Request, n int) []string {
	t.Helper()
	var got []string
	for range n {
		pk, err := p.Pick(context.Background(), engines, req)
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		got = append(got, pk.Engine.ID)
	}
	return got
}

func TestEmptyCandidates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, p := range []Policy{newRoundRobin(f.deps, admission.Limits{}), newRandom(f.deps, admission.Limits{}),
		newPowerOfTwo(f.deps, admission.Limits{}), newLeastLoad(f.deps, admission.Limits{})} {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			if _, err := p.Pick(context.Background(), nil, Request{Stage: registry.RolePlain}); !errors.Is(err, ErrNoCandidates) {
				t.Errorf("Pick(empty) error = %v, want ErrNoCandidates", err)
			}
		})
	}
}

func TestRoundRobinCursorPerInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b", "c")
	p1, p2 := newRoundRobin(f.deps, admission.Limits{}), newRoundRobin(f.deps, admission.Limits{})
	req := Request{Stage: registry.RolePlain}
	if diff := cmp.Diff([]string{"a", "b", "c", "a"}, pickIDs(t, p1, es, req, 4)); diff != "" {
		t.Errorf("first instance mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "b"}, pickIDs(t, p2, es, req, 2)); diff != "" {
		t.Errorf("second instance has its own cursor; mismatch (-want +got):\n%s", diff)
	}
}

func TestRandomCoversCandidates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b", "c")
	seen := map[string]int{}
	for _, id := range pickIDs(t, newRandom(f.deps, admission.Limits{}), es, Request{Stage: registry.RolePlain}, 600) {
		seen[id]++
	}
	for _, id := range []string{"a", "b", "c"} {
		if seen[id] < 100 {
			t.Errorf("random picked %s %d times of 600, want roughly 200", id, seen[id])
		}
	}
}

func TestPowerOfTwoPressure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		stage   registry.Role
		loads   map[string]loadtable.Report
		flights map[string]int
		draws   []int // intN draws: first sample index, then second among the rest
		want    string
	}{
		{
			name:  "prefill lower waiting uncached wins",
			stage: registry.RolePrefill,
			loads: map[string]loadtable.Report{"a": nativeLoad(5000, 1, 1), "b": nativeLoad(100, 9, 9)},
			draws: []int{0, 0}, want: "b",
		},
		{
			name:  "prefill uncached tie falls to waiting then running",
			stage: registry.RolePrefill,
			loads: map[string]loadtable.Report{"a": nativeLoad(100, 2, 1), "b": nativeLoad(100, 2, 0)},
			draws: []int{0, 0}, want: "b",
		},
		{
			name:    "complete tie keeps first sample even with higher id",
			stage:   registry.RolePrefill,
			loads:   map[string]loadtable.Report{"a": nativeLoad(100, 2, 1), "b": nativeLoad(100, 2, 1)},
			flights: map[string]int{},
			draws:   []int{1, 0}, want: "b",
		},
		{
			name:    "reported tie broken by router-local in-flight",
			stage:   registry.RolePrefill,
			loads:   map[string]loadtable.Report{"a": nativeLoad(100, 2, 1), "b": nativeLoad(100, 2, 1)},
			flights: map[string]int{"b": 2},
			draws:   []int{1, 0}, want: "a",
		},
		{
			name:    "basic report on one side compares in-flight only",
			stage:   registry.RolePrefill,
			loads:   map[string]loadtable.Report{"a": nativeLoad(0, 0, 0), "b": {Running: 50, Waiting: 50, KVUsedTokens: 1, KVCapacityTokens: 10}},
			flights: map[string]int{"a": 3, "b": 1},
			draws:   []int{0, 0}, want: "b",
		},
		{
			name:    "missing report compares in-flight only",
			stage:   registry.RolePrefill,
			loads:   map[string]loadtable.Report{"a": nativeLoad(0, 0, 0)},
			flights: map[string]int{"a": 1},
			draws:   []int{0, 0}, want: "b",
		},
		{
			name:  "decode compares waiting first",
			stage: registry.RoleDecode,
			loads: map[string]loadtable.Report{
				"a": {Running: 1, Waiting: 3, KVUsedTokens: 1, KVCapacityTokens: 100, Native: &loadtable.Native{MaxRunningRequests: 8}},
				"b": {Running: 9, Waiting: 2, KVUsedTokens: 99, KVCapacityTokens: 100, Native: &loadtable.Native{MaxRunningRequests: 8}},
			},
			draws: []int{0, 0}, want: "b",
		},
		{
			name:  "decode compares kv usage fraction, not absolute tokens",
			stage: registry.RoleDecode,
			loads: map[string]loadtable.Report{
				"a": {Running: 1, Waiting: 0, KVUsedTokens: 500, KVCapacityTokens: 1000, Native: &loadtable.Native{MaxRunningRequests: 8}},
				"b": {Running: 1, Waiting: 0, KVUsedTokens: 600, KVCapacityTokens: 4000, Native: &loadtable.Native{MaxRunningRequests: 8}},
			},
			draws: []int{0, 0}, want: "b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			es := f.engines(tt.stage, "a", "b")
			for id, r := range tt.loads {
				f.report(id, r)
			}
			for _, w := range es {
				f.inflight(w, tt.flights[w.ID])
			}
			p := newPowerOfTwo(f.deps, admission.Limits{})
			p.intN = seq(tt.draws...)
			pk, err := p.Pick(context.Background(), es, Request{Stage: tt.stage})
			if err != nil {
				t.Fatal(err)
			}
			if pk.Engine.ID != tt.want || pk.Reason != config.PolicyPowerOfTwo {
				t.Errorf("Pick() = %s (%s), want %s (%s)", pk.Engine.ID, pk.Reason, tt.want, config.PolicyPowerOfTwo)
			}
		})
	}
}

func TestPowerOfTwoQueueTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePrefill, "a", "b")
	// a: 1000 tokens/s, 4000 waiting uncached -> 4 s queue. b: 10000 tokens/s, 8000 -> 0.8 s.
	// b has more waiting uncached tokens but the shorter estimated queue, which is compared first.
	base := time.Now().Add(-2 * time.Second)
	for _, e := range []struct {
		id               string
		rate, uncachedQd int64
	}{{"a", 1000, 4000}, {"b", 10000, 8000}} {
		r1 := nativeLoad(e.uncachedQd, 1, 1)
		r1.CapturedAt = base
		r1.Native.PrefillUncachedTokensTotal, r1.Native.PrefillBusyMicrosTotal = 1_000_000, 10_000_000
		f.report(e.id, r1)
		r2 := nativeLoad(e.uncachedQd, 1, 1)
		r2.CapturedAt = base.Add(time.Second)
		r2.Native.PrefillUncachedTokensTotal, r2.Native.PrefillBusyMicrosTotal = 1_000_000+e.rate, 11_000_000
		f.report(e.id, r2)
	}
	snap := f.load.Snapshot()
	for _, w := range es {
		if v, ok := snap.View(w.Slot); !ok || !v.HasQueueTime {
			t.Fatalf("engine %s has no queue-time estimate: %+v ok=%v", w.ID, v, ok)
		}
	}
	p := newPowerOfTwo(f.deps, admission.Limits{})
	p.intN = seq(0, 0)
	pk, err := p.Pick(context.Background(), es, Request{Stage: registry.RolePrefill})
	if err != nil {
		t.Fatal(err)
	}
	if pk.Engine.ID != "b" {
		t.Errorf("Pick() = %s, want b (shorter estimated queue)", pk.Engine.ID)
	}
}

func TestPowerOfTwoAdmissionOnceNoResample(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b")
	f.report("a", nativeLoad(0, 0, 1))  // less pressured: chosen
	f.report("b", nativeLoad(0, 0, 30)) // admissible, but never considered after rejection
	p := newPowerOfTwo(f.deps, admission.Limits{MaxRunningRequests: 1})
	p.intN = seq(0, 0)
	_, err := p.Pick(context.Background(), es, Request{Stage: registry.RolePlain})
	var rj *RejectedError
	if !errors.As(err, &rj) {
		t.Fatalf("Pick() error = %v, want *RejectedError", err)
	}
	want := []Rejection{{EngineID: "a", Limit: admission.LimitRunningRequests}}
	if diff := cmp.Diff(want, rj.Rejections); diff != "" {
		t.Errorf("rejections mismatch (-want +got):\n%s", diff)
	}
}

func TestPowerOfTwoSingleCandidateChecksAdmission(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a")
	f.report("a", nativeLoad(0, 5, 0))
	p := newPowerOfTwo(f.deps, admission.Limits{MaxWaitingRequests: 5})
	if _, err := p.Pick(context.Background(), es, Request{Stage: registry.RolePlain}); err == nil {
		t.Fatal("Pick() admitted an engine at its waiting cap")
	}
	p = newPowerOfTwo(f.deps, admission.Limits{MaxWaitingRequests: 6})
	if pk, err := p.Pick(context.Background(), es, Request{Stage: registry.RolePlain}); err != nil || pk.Engine.ID != "a" {
		t.Fatalf("Pick() = %v, %v; want a", pk.Engine, err)
	}
}

func TestAdmissionFailsOpenOnStaleAndPartialReports(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "stale", "partial")
	stale := nativeLoad(0, 100, 100)
	stale.CapturedAt = time.Now().Add(-time.Minute)
	f.report("stale", stale)
	// Two advertised ranks, only rank 0 reported: no view, never a partial sum.
	part := nativeLoad(0, 100, 100)
	part.Ranks = 2
	f.report("partial", part)
	limits := admission.Limits{MaxRunningRequests: 1, MaxWaitingRequests: 1}
	for _, w := range es {
		t.Run(w.ID, func(t *testing.T) {
			t.Parallel()
			p := newRoundRobin(f.deps, limits)
			pk, err := p.Pick(context.Background(), []*registry.Engine{w}, Request{Stage: registry.RolePlain})
			if err != nil || pk.Engine != w {
				t.Errorf("Pick() = %v, %v; want %s admitted (unknown load fails open)", pk.Engine, err, w.ID)
			}
		})
	}
}

func TestLeastLoad(t *testing.T) {
	t.Parallel()
	t.Run("dispatches since the report are added", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		f.report("a", loadtable.Report{Running: 2, Waiting: 0, KVUsedTokens: 1, KVCapacityTokens: 10, CapturedAt: time.Now().Add(-time.Second)})
		f.report("b", loadtable.Report{Running: 3, Waiting: 0, KVUsedTokens: 1, KVCapacityTokens: 10, CapturedAt: time.Now().Add(-time.Second)})
		// Two dispatches to a after its report: a scores 4, b scores 3.
		f.inflight(es[0], 2)
		p := newLeastLoad(f.deps, admission.Limits{})
		if got := pickIDs(t, p, es, Request{Stage: registry.RolePlain}, 1); got[0] != "b" {
			t.Errorf("Pick() = %s, want b", got[0])
		}
	})
	t.Run("dispatches before the report are not counted twice", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		// Two dispatches to a, then reports captured a millisecond later that already count them.
		dispatched := time.Now().Add(-time.Second)
		f.now = func() time.Time { return dispatched }
		f.inflight(es[0], 2)
		captured := dispatched.Add(time.Millisecond)
		f.report("a", loadtable.Report{Running: 2, KVUsedTokens: 1, KVCapacityTokens: 10, CapturedAt: captured})
		f.report("b", loadtable.Report{Running: 3, KVUsedTokens: 1, KVCapacityTokens: 10, CapturedAt: captured})
		p := newLeastLoad(f.deps, admission.Limits{})
		if got := pickIDs(t, p, es, Request{Stage: registry.RolePlain}, 1); got[0] != "a" {
			t.Errorf("Pick() = %s, want a", got[0])
		}
	})
	t.Run("a missing report ranks everyone by in-flight", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		f.report("a", loadtable.Report{Running: 0, KVUsedTokens: 1, KVCapacityTokens: 10})
		f.inflight(es[0], 3)
		f.inflight(es[1], 1)
		p := newLeastLoad(f.deps, admission.Limits{})
		if got := pickIDs(t, p, es, Request{Stage: registry.RolePlain}, 1); got[0] != "b" {
			t.Errorf("Pick() = %s, want b", got[0])
		}
	})
	t.Run("ties rotate", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b", "c")
		f.inflight(es[1], 1)
		p := newLeastLoad(f.deps, admission.Limits{})
		if diff := cmp.Diff([]string{"a", "c", "a", "c"}, pickIDs(t, p, es, Request{Stage: registry.RolePlain}, 4)); diff != "" {
			t.Errorf("tie rotation mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestTraceRecordsCandidates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b")
	f.report("a", nativeLoad(0, 0, 0))
	p := newPowerOfTwo(f.deps, admission.Limits{})
	p.intN = seq(0, 0)
	tr := &Trace{}
	if _, err := p.Pick(context.Background(), es, Request{Stage: registry.RolePlain, Trace: tr}); err != nil {
		t.Fatal(err)
	}
	if len(tr.Candidates) != 2 || tr.Detail == "" {
		t.Fatalf("trace = %+v, want two candidates and a detail", tr)
	}
	if !tr.Candidates[0].LoadKnown && !tr.Candidates[1].LoadKnown {
		t.Errorf("trace lost the known load of a")
	}
}

func TestComparePressureProductsNoOverflow(t *testing.T) {
	t.Parallel()
	const big = int64(1) << 62
	if c := compareProducts(big, 4, big, 3); c <= 0 {
		t.Errorf("compareProducts overflowed: got %d, want > 0", c)
	}
}

// TestNewBuildsEveryConfiguredType: every policy type configuration accepts builds, and the
// policy reports that name.
func TestNewBuildsEveryConfiguredType(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	deps := f.deps
	deps.Prefix = &LocalIndex{}
	deps.Affinity = newAffinity(t)
	for _, typ := range config.PolicyTypes() {
		p, err := New(config.PolicySpec{Type: typ}, deps)
		if err != nil {
			t.Errorf("New(%s) error: %v", typ, err)
			continue
		}
		if p.Name() != typ {
			t.Errorf("New(%s).Name() = %s", typ, p.Name())
		}
	}
}
