package policy

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// Cache-aware pick reasons.
const (
	ReasonCacheCandidate   = "cache_candidate"
	ReasonSaturationPin    = "saturation_pin"
	ReasonNoCacheCandidate = "no_cache_candidate"
)

// cacheAware prefers an engine that already holds a usable prefix of the request, under the
// cache and pressure rules of docs/decisions.md ("cache_aware"): hit thresholds, a bounded holder set ranked by
// (uncached tokens, prefill pressure, id), a soft queue gate with saturation handling, hard
// admission on every evaluated holder (a rejection never turns into a cold pick), a switch
// margin with a pressure guard, and on a miss a power-of-k fallback over the engines that pass
// the queue gate followed by this policy's admission. Plain and prefill groups only.
type cacheAware struct {
	deps   Deps
	limits admission.Limits
	s      config.CacheAwareSettings
	source PrefixSource
	intN   func(n int) int
}

var _ Policy = (*cacheAware)(nil)

// newCacheAware returns a cache-aware policy reading prefixes from source.
func newCacheAware(deps Deps, limits admission.Limits, s config.CacheAwareSettings, source PrefixSource) *cacheAware {
	return &cacheAware{deps: deps, limits: limits, s: s, source: source, intN: deps.intN()}
}

// Name implements Policy.
func (p *cacheAware) Name() string { return config.PolicyCacheAware }

// holder is a candidate that holds part of the request's prefix.
type holder struct {
	w        *registry.Engine
	o        observation
	uncached int64
	gated    bool
}

// Pick implements Policy.
func (p *cacheAware) Pick(ctx context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	if len(engines) == 0 {
		return Pick{}, ErrNoCandidates
	}
	if req.Stage == registry.RoleDecode {
		return Pick{}, fmt.Errorf("cache_aware on a decode group: %w", ErrInvalidConfiguration)
	}
	if p.source == nil {
		return Pick{}, fmt.Errorf("cache_aware has no prefix source: %w", ErrInvalidConfiguration)
	}
	res, err := req.Prefix.lookup(ctx, p.source, req.namespace(), req.TokenIDs)
	if err != nil {
		return Pick{}, fmt.Errorf("prefix lookup: %w", err)
	}
	snap := p.deps.snapshot(&req)
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
		req.Trace.Prefix = res.Status
	}

	// Steps 3-4: holders passing the thresholds, ranked, bounded to K.
	var holders []holder
	if res.Status == prefixHit {
		for _, m := range res.Matches {
			i := slices.IndexFunc(engines, func(w *registry.Engine) bool { return w.Slot == m.Engine })
			if i < 0 || m.Tokens <= 0 {
				continue
			}
			matched := min(m.Tokens, req.InputTokens)
			if matched < p.s.MinMatchTokens {
				continue
			}
			if p.s.MinMatchRatio > 0 && float64(matched) < p.s.MinMatchRatio*float64(req.InputTokens) {
				continue
			}
			uncached := req.InputTokens - matched
			holders = append(holders, holder{w: engines[i], o: p.deps.observe(snap, engines[i], uncached), uncached: uncached})
		}
	}
	byPressure := setComparator(req.Stage, holdersObs(holders))
	slices.SortFunc(holders, func(a, b holder) int {
		if c := cmp.Compare(a.uncached, b.uncached); c != 0 {
			return c
		}
		if c := byPressure(a.o, b.o); c != 0 {
			return c
		}
		return cmp.Compare(a.w.ID, b.w.ID)
	})
	k := int(min(int64(len(engines)), p.s.CandidateMax, max(p.s.CandidateMin, int64(math.Ceil(p.s.CandidateRatio*float64(len(engines)))))))
	if len(holders) > k {
		holders = holders[:k]
	}

	// Step 5: soft queue gate.
	var open []holder
	for i := range holders {
		holders[i].gated = p.queued(holders[i].o, p.s.QueueLimit)
		if !holders[i].gated {
			open = append(open, holders[i])
		}
	}
	reason := ReasonCacheCandidate
	if len(holders) > 0 && len(open) == 0 && p.s.SaturationFloor == 0 && p.groupQueued(snap, engines, p.s.QueueLimit, req.InputTokens) {
		open, reason = holders, ReasonSaturationPin
		req.Trace.setDetail("every holder and the whole group is queued: holders re-admitted")
	}

	// Step 6: hard admission on each remaining holder; margin and pressure guard.
	var rejections []Rejection
	var admitted []holder
	for _, h := range open {
		if limit := p.limits.Check(h.o.metrics()); limit != "" {
			rejections = append(rejections, Rejection{EngineID: h.w.ID, Limit: limit})
			req.Trace.noteHolder(h, req.InputTokens, limit, "holder", p.residency())
			continue
		}
		admitted = append(admitted, h)
	}
	if len(admitted) > 0 {
		chosen := admitted[0]
		detail := "least uncached holder"
		for _, h := range admitted[1:] {
			if h.uncached > admitted[0].uncached+p.s.SwitchMarginTokens {
				break
			}
			if p.guardSwitch(chosen.o, h.o) {
				chosen, detail = h, "pressure guard switched from "+chosen.w.ID
			}
		}
		if req.Trace != nil {
			for _, h := range holders {
				if h.w != chosen.w && !slices.ContainsFunc(rejections, func(r Rejection) bool { return r.EngineID == h.w.ID }) {
					note := "holder"
					if h.gated && reason != ReasonSaturationPin {
						note = "holder, queue-gated"
					}
					req.Trace.noteHolder(h, req.InputTokens, "", note, p.residency())
				}
			}
			req.Trace.noteHolder(chosen, req.InputTokens, "", "selected holder", p.residency())
			if req.Trace.Detail == "" {
				req.Trace.setDetail(detail)
			}
		}
		return Pick{Engine: chosen.w, Reason: reason}, nil
	}

	// Step 7: nothing admitted.
	if len(holders) > 0 && p.s.SaturationFloor > 0 && !p.anyBelow(snap, engines, p.s.SaturationFloor, req.InputTokens) {
		gated := holders[:0:0]
		for _, h := range holders {
			if h.gated {
				gated = append(gated, h)
			}
		}
		if len(gated) > 0 {
			pin := gated[0]
			for _, h := range gated[1:] {
				if byPressure(h.o, pin.o) < 0 {
					pin = h
				}
			}
			req.Trace.setDetail("saturation pin: no engine below the floor")
			if limit := p.limits.Check(pin.o.metrics()); limit != "" {
				req.Trace.noteHolder(pin, req.InputTokens, limit, "saturation pin", p.residency())
				return Pick{}, &RejectedError{Rejections: append(rejections, Rejection{EngineID: pin.w.ID, Limit: limit}), Exhausted: true}
			}
			req.Trace.noteHolder(pin, req.InputTokens, "", "saturation pin", p.residency())
			return Pick{Engine: pin.w, Reason: ReasonSaturationPin}, nil
		}
	}
	if len(rejections) > 0 {
		return Pick{}, &RejectedError{Rejections: rejections, Exhausted: len(rejections) > 1}
	}

	// Step 8: miss. Power-of-k over the engines that pass the queue gate (all if none do).
	obs := make([]observation, len(engines))
	for i, w := range engines {
		obs[i] = p.deps.observe(snap, w, req.InputTokens)
	}
	pool := make([]int, 0, len(engines))
	for i := range engines {
		if !p.queued(obs[i], p.s.QueueLimit) {
			pool = append(pool, i)
		}
	}
	if len(pool) == 0 {
		for i := range engines {
			pool = append(pool, i)
		}
	}
	best, compared := p.powerOfK(req.Stage, pool, obs)
	if req.Trace != nil {
		if req.Trace.Detail == "" {
			req.Trace.setDetail(fmt.Sprintf("prefix %s: power-of-%d over %d engines passing the queue gate", res.Status, p.s.MissChoices, len(pool)))
		}
		// Every engine the fallback compared, so the explanation shows what the winner beat.
		for _, idx := range compared {
			if idx != best {
				req.Trace.note(engines[idx], obs[idx], "", "compared")
			}
		}
	}
	return admitSelected(p.limits, engines[best], obs[best], &req, ReasonNoCacheCandidate)
}

// residency returns the source's residency checker, if it has one.
func (p *cacheAware) residency() residencyChecker {
	rc, _ := p.source.(residencyChecker)
	return rc
}

// queued reports whether an engine reads a fresh waiting count at or above limit (0 = gate off).
// The count is the observation's load: reported waiting plus the dispatches since the report
// that pressure.set places in the queue. Unknown load passes the gate.
func (p *cacheAware) queued(o observation, limit int64) bool {
	return limit > 0 && o.known && o.load.waiting >= limit
}

// groupQueued reports whether every engine of the group provably reads waiting >= limit
// (reported waiting plus dispatches since, as queued counts it).
func (p *cacheAware) groupQueued(snap loadtable.Snapshot, engines []*registry.Engine, limit, tokens int64) bool {
	if limit <= 0 {
		return false
	}
	for _, w := range engines {
		if o := p.deps.observe(snap, w, tokens); !o.known || o.load.waiting < limit {
			return false
		}
	}
	return true
}

// anyBelow reports whether some engine reads a fresh waiting count below floor (reported waiting
// plus dispatches since, as queued counts it).
func (p *cacheAware) anyBelow(snap loadtable.Snapshot, engines []*registry.Engine, floor, tokens int64) bool {
	for _, w := range engines {
		if o := p.deps.observe(snap, w, tokens); o.known && o.load.waiting < floor {
			return true
		}
	}
	return false
}

// guardSwitch reports whether cur is materially more pressured than other: its measure exceeds
// other's by the absolute threshold and by the factor. The measure is waiting uncached tokens,
// or estimated queue milliseconds when a millisecond threshold is set and both have one, each
// including the dispatches since the report (pressure.set). Without native reports on both,
// the guard never switches.
func (p *cacheAware) guardSwitch(cur, other observation) bool {
	if !p.s.PressureGuard || !cur.native() || !other.native() {
		return false
	}
	if p.s.GuardAbsoluteMillis > 0 && cur.load.hasQueueTime && other.load.hasQueueTime {
		c, o := float64(cur.load.queueTime.Milliseconds()), float64(other.load.queueTime.Milliseconds())
		return c-o >= float64(p.s.GuardAbsoluteMillis) && c > p.s.GuardFactor*o
	}
	c, o := float64(cur.load.waitingUncached), float64(other.load.waitingUncached)
	return c-o >= float64(p.s.GuardAbsoluteTokens) && c > p.s.GuardFactor*o
}

// powerOfK samples k distinct engines of pool and returns the index of the least pressured
// (the first sampled on a tie) and the indexes it compared; when k covers the pool it takes the
// exact minimum. The set comparator keeps the choice transitive.
func (p *cacheAware) powerOfK(stage registry.Role, pool []int, obs []observation) (int, []int) {
	k := int(p.s.MissChoices)
	sample := pool
	if k < len(pool) {
		sample = slices.Clone(pool)
		for i := range k { // partial Fisher-Yates
			j := i + p.intN(len(sample)-i)
			sample[i], sample[j] = sample[j], sample[i]
		}
		sample = sample[:k]
	}
	set := make([]observation, len(sample))
	for i, idx := range sample {
		set[i] = obs[idx]
	}
	less := setComparator(stage, set)
	best := sample[0]
	for _, idx := range sample[1:] {
		if less(obs[idx], obs[best]) < 0 {
			best = idx
		}
	}
	return best, sample
}

func holdersObs(hs []holder) []observation {
	out := make([]observation, len(hs))
	for i, h := range hs {
		out[i] = h.o
	}
	return out
}

// setComparator returns the pressure order for ranking a whole set: engine-reported values only
// when every member has a fresh native view, otherwise router-local in-flight for all, so the
// order is transitive.
func setComparator(stage registry.Role, set []observation) func(a, b observation) int {
	for _, o := range set {
		if !o.native() {
			return func(a, b observation) int { return cmp.Compare(a.inflight, b.inflight) }
		}
	}
	return func(a, b observation) int { return comparePressure(stage, a, b) }
}
