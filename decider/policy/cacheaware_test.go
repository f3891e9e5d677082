package policy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// fakePrefix is a hand-written PrefixSource returning fixed matched tokens per engine id.
type fakePrefix struct {
	slots   *slots.Table
	matched map[string]int64
	err     error
	calls   int
}

func (f *fakePrefix) LookupPrefix(_ context.Context, _ Namespace, _ []uint32, out []PrefixMatch) ([]PrefixMatch, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	for id, n := range f.matched {
		s, _ := f.slots.Lookup(id)
		out = append(out, PrefixMatch{Engine: s, Tokens: n})
	}
	return out, nil
}

func defaults() config.CacheAwareSettings {
	return config.PolicySpec{Type: config.PolicyCacheAware}.Resolved().CacheAware
}

func tokens(n int) []uint32 { return make([]uint32, n) }

func TestCacheAware(t *testing.T) {
	t.Parallel()
	const input = 8000
	type load struct{ waiting, uncachedQ, running int64 }
	tests := []struct {
		name     string
		settings func(*config.CacheAwareSettings)
		limits   admission.Limits
		matched  map[string]int64
		loads    map[string]load
		want     string
		reason   string
		rejected bool
	}{
		{
			name:    "deepest holder wins",
			matched: map[string]int64{"a": 2048, "b": 6144},
			want:    "b", reason: ReasonCacheCandidate,
		},
		{
			name:    "below min match tokens is a miss",
			matched: map[string]int64{"a": 1000},
			loads:   map[string]load{"a": {running: 9}, "b": {}, "c": {running: 9}},
			want:    "b", reason: ReasonNoCacheCandidate,
		},
		{
			name:     "ratio gate turns a small hit into a miss",
			settings: func(s *config.CacheAwareSettings) { s.MinMatchRatio = 0.5 },
			matched:  map[string]int64{"a": 2048},
			loads:    map[string]load{"a": {running: 9}, "b": {}, "c": {running: 9}},
			want:     "b", reason: ReasonNoCacheCandidate,
		},
		{
			name:     "queue-gated holder loses to an ungated cold engine",
			settings: func(s *config.CacheAwareSettings) { s.QueueLimit = 5 },
			matched:  map[string]int64{"a": 6144},
			loads:    map[string]load{"a": {waiting: 8}, "b": {waiting: 1}, "c": {waiting: 9}},
			want:     "b", reason: ReasonNoCacheCandidate,
		},
		{
			name:     "queue-gated holder beats a deeper-queued group: saturation pin",
			settings: func(s *config.CacheAwareSettings) { s.QueueLimit = 5 },
			matched:  map[string]int64{"a": 6144},
			loads:    map[string]load{"a": {waiting: 8}, "b": {waiting: 20}, "c": {waiting: 30}},
			want:     "a", reason: ReasonSaturationPin,
		},
		{
			name:     "gated holder with a shallower ungated holder: the ungated one",
			settings: func(s *config.CacheAwareSettings) { s.QueueLimit = 5 },
			matched:  map[string]int64{"a": 6144, "b": 2048},
			loads:    map[string]load{"a": {waiting: 8}, "b": {waiting: 1}, "c": {}},
			want:     "b", reason: ReasonCacheCandidate,
		},
		{
			name:     "floor: whole group at or above it pins the least pressured gated holder",
			settings: func(s *config.CacheAwareSettings) { s.QueueLimit, s.SaturationFloor = 5, 3 },
			matched:  map[string]int64{"a": 6144, "b": 4096},
			loads:    map[string]load{"a": {waiting: 9, uncachedQ: 500}, "b": {waiting: 6, uncachedQ: 100}, "c": {waiting: 4}},
			want:     "b", reason: ReasonSaturationPin,
		},
		{
			name:     "floor: an engine below the floor means a miss, not a pin",
			settings: func(s *config.CacheAwareSettings) { s.QueueLimit, s.SaturationFloor = 5, 3 },
			matched:  map[string]int64{"a": 6144},
			loads:    map[string]load{"a": {waiting: 9}, "b": {waiting: 2}, "c": {waiting: 9}},
			want:     "b", reason: ReasonNoCacheCandidate,
		},
		{
			name:    "pressure guard switches inside the margin",
			matched: map[string]int64{"a": 6000, "b": 5500},
			loads:   map[string]load{"a": {uncachedQ: 20000}, "b": {uncachedQ: 100}, "c": {}},
			want:    "b", reason: ReasonCacheCandidate,
		},
		{
			name:    "no switch outside the margin",
			matched: map[string]int64{"a": 6000, "b": 3000},
			loads:   map[string]load{"a": {uncachedQ: 20000}, "b": {uncachedQ: 100}, "c": {}},
			want:    "a", reason: ReasonCacheCandidate,
		},
		{
			name:    "no switch when the difference is under the absolute threshold",
			matched: map[string]int64{"a": 6000, "b": 5500},
			loads:   map[string]load{"a": {uncachedQ: 8000}, "b": {uncachedQ: 100}, "c": {}},
			want:    "a", reason: ReasonCacheCandidate,
		},
		{
			name:     "guard off: never switches",
			settings: func(s *config.CacheAwareSettings) { s.PressureGuard = false },
			matched:  map[string]int64{"a": 6000, "b": 5500},
			loads:    map[string]load{"a": {uncachedQ: 20000}, "b": {uncachedQ: 100}, "c": {}},
			want:     "a", reason: ReasonCacheCandidate,
		},
		{
			name:    "rejected deepest holder falls to the next admitted holder",
			limits:  admission.Limits{MaxRunningRequests: 5},
			matched: map[string]int64{"a": 6144, "b": 2048},
			loads:   map[string]load{"a": {running: 5}, "b": {running: 1}, "c": {}},
			want:    "b", reason: ReasonCacheCandidate,
		},
		{
			name:     "every holder rejected: rejection, never a cold pick",
			limits:   admission.Limits{MaxRunningRequests: 5},
			matched:  map[string]int64{"a": 6144, "b": 2048},
			loads:    map[string]load{"a": {running: 5}, "b": {running: 7}, "c": {}},
			rejected: true,
		},
		{
			name:     "candidate bound keeps only the best K holders",
			settings: func(s *config.CacheAwareSettings) { s.CandidateMin, s.CandidateMax = 1, 1 },
			limits:   admission.Limits{MaxRunningRequests: 5},
			matched:  map[string]int64{"a": 6144, "b": 5000},
			loads:    map[string]load{"a": {running: 5}, "b": {}, "c": {}},
			rejected: true, // b is outside K = 1, so the only evaluated holder is rejected
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			es := f.engines(registry.RolePrefill, "a", "b", "c")
			for _, w := range es {
				l := tt.loads[w.ID]
				r := nativeLoad(l.uncachedQ, l.waiting, l.running)
				f.report(w.ID, r)
			}
			s := defaults()
			if tt.settings != nil {
				tt.settings(&s)
			}
			src := &fakePrefix{slots: f.slots, matched: tt.matched}
			p := newCacheAware(f.deps, tt.limits, s, src)
			p.intN = seq(0, 0, 0)
			s.MissChoices = 3
			p.s.MissChoices = 3 // exact minimum over the pool: deterministic miss fallback
			tr := &Trace{}
			pk, err := p.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: input, TokenIDs: tokens(input), Trace: tr})
			if tt.rejected {
				var rj *RejectedError
				if !errors.As(err, &rj) {
					t.Fatalf("Pick() = %v, %v; want a rejection", pk.Engine, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pk.Engine.ID != tt.want || pk.Reason != tt.reason {
				t.Errorf("Pick() = %s (%s), want %s (%s); trace %s %+v", pk.Engine.ID, pk.Reason, tt.want, tt.reason, tr.Detail, tr.Candidates)
			}
		})
	}
}

func TestCacheAwarePrefixStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePrefill, "a", "b")
	for _, tt := range []struct {
		name string
		src  *fakePrefix
		toks []uint32
		want PrefixStatus
	}{
		{"unavailable backend is a miss, reported as unavailable", &fakePrefix{slots: f.slots, err: fmt.Errorf("dial: %w", errPrefixUnavailable)}, tokens(10), prefixUnavailable},
		{"confirmed miss", &fakePrefix{slots: f.slots, matched: map[string]int64{}}, tokens(10), prefixMiss},
		{"no token ids", &fakePrefix{slots: f.slots}, nil, prefixNoTokens},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newCacheAware(f.deps, admission.Limits{}, defaults(), tt.src)
			tr := &Trace{}
			pk, err := p.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: int64(len(tt.toks)), TokenIDs: tt.toks, Trace: tr})
			if err != nil || pk.Reason != ReasonNoCacheCandidate || tr.Prefix != tt.want {
				t.Errorf("Pick() = %v %v, prefix %v; want no_cache_candidate with %v", pk.Reason, err, tr.Prefix, tt.want)
			}
		})
	}
	t.Run("a rejected query is an error", func(t *testing.T) {
		t.Parallel()
		p := newCacheAware(f.deps, admission.Limits{}, defaults(), &fakePrefix{slots: f.slots, err: errors.New("bad namespace")})
		if _, err := p.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: 3, TokenIDs: tokens(3)}); err == nil {
			t.Error("Pick() swallowed a rejected query")
		}
	})
	t.Run("decode group is a configuration error", func(t *testing.T) {
		t.Parallel()
		p := newCacheAware(f.deps, admission.Limits{}, defaults(), &fakePrefix{slots: f.slots})
		if _, err := p.Pick(context.Background(), es, Request{Stage: registry.RoleDecode}); !errors.Is(err, ErrInvalidConfiguration) {
			t.Errorf("Pick(decode) = %v, want ErrInvalidConfiguration", err)
		}
	})
}

func TestPrefixMemoSharesOneLookup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePrefill, "a", "b")
	src := &fakePrefix{slots: f.slots, matched: map[string]int64{"a": 4096}}
	memo := &PrefixMemo{}
	p1 := newCacheAware(f.deps, admission.Limits{}, defaults(), src)
	p2 := newCacheAware(f.deps, admission.Limits{}, defaults(), src)
	req := Request{Model: "m", Stage: registry.RolePrefill, InputTokens: 5000, TokenIDs: tokens(5000), Prefix: memo}
	for _, p := range []Policy{p1, p2, p1} {
		mustPick(t, p, es, req)
	}
	if src.calls != 1 {
		t.Errorf("backend called %d times for one request, want 1", src.calls)
	}
	// Each group filters the shared matches to its own candidates.
	pk := mustPick(t, p2, es[1:], req)
	if pk.Engine.ID != "b" || pk.Reason != ReasonNoCacheCandidate {
		t.Errorf("group without the holder = %s (%s), want b no_cache_candidate", pk.Engine.ID, pk.Reason)
	}
}

// TestCacheAwareMissExplainsEveryComparedEngine: on a miss the trace lists each engine the
// power-of-k fallback compared, the losers as "compared" with their load, not only the winner.
func TestCacheAwareMissExplainsEveryComparedEngine(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePrefill, "a", "b", "c")
	for i, w := range es {
		f.report(w.ID, nativeLoad(int64(100*(3-i)), int64(3-i), 1))
	}
	for _, k := range []int64{2, 3} {
		t.Run(fmt.Sprintf("power-of-%d", k), func(t *testing.T) {
			t.Parallel()
			p := newCacheAware(f.deps, admission.Limits{}, defaults(), &fakePrefix{slots: f.slots, matched: map[string]int64{}})
			p.s.MissChoices = k
			tr := &Trace{}
			pk, err := p.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: 64, TokenIDs: tokens(64), Trace: tr})
			if err != nil || pk.Reason != ReasonNoCacheCandidate {
				t.Fatalf("Pick() = %v, %v; want a no_cache_candidate pick", pk, err)
			}
			notes := map[string]string{}
			for _, c := range tr.Candidates {
				if _, dup := notes[c.EngineID]; dup {
					t.Errorf("engine %s noted twice: %+v", c.EngineID, tr.Candidates)
				}
				notes[c.EngineID] = c.Note
				if !c.LoadKnown {
					t.Errorf("candidate %s lost its load", c.EngineID)
				}
			}
			if len(notes) != int(k) || notes[pk.Engine.ID] != "selected" {
				t.Fatalf("trace candidates = %+v, want %d compared engines with %s selected", tr.Candidates, k, pk.Engine.ID)
			}
			for id, n := range notes {
				if id != pk.Engine.ID && n != "compared" {
					t.Errorf("loser %s noted %q, want compared", id, n)
				}
			}
			if k == 3 && pk.Engine.ID != "c" {
				t.Errorf("exact minimum over the pool picked %s, want c (least waiting)", pk.Engine.ID)
			}
		})
	}
}
