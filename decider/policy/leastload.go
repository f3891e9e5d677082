package policy

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// leastLoad (configuration name load_based) chooses the least loaded candidate, then checks
// admission on it. When every candidate has a fresh report the score is waiting + running with
// the dispatches this router made to the engine after the report was captured placed as every
// other comparison places them (requestsWith, pressure.set): each adds one request, so the
// score is reported waiting + running + dispatches since, and requests the report already
// counts are not counted twice. Otherwise every candidate is scored by router-local in-flight
// requests, which keeps the comparison consistent across the set. Ties rotate with a cursor
// owned by this instance.
type leastLoad struct {
	basics
	cursor atomic.Uint64
}

// newLeastLoad returns a least-load policy with the given admission caps.
func newLeastLoad(deps Deps, limits admission.Limits) *leastLoad {
	return &leastLoad{basics: basics{deps, limits}}
}

// Name implements Policy.
func (p *leastLoad) Name() string { return config.PolicyLoadBased }

// Pick implements Policy.
func (p *leastLoad) Pick(_ context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	if len(engines) == 0 {
		return Pick{}, ErrNoCandidates
	}
	snap := p.deps.snapshot(&req)
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
	}
	// Scores are read once into a stack buffer: in-flight counters move concurrently, and the tie
	// rotation below must see the same numbers as the minimum search.
	var buf [64]int64
	scores := buf[:0]
	reported := true
	for _, w := range engines {
		v := snap.ViewRef(w.Slot)
		if v == nil {
			reported = false
			break
		}
		// The request counts of an observation's load, without building the rest of one: the
		// report with the dispatches since it and those still in transit at it folded in.
		d := sinceReport(p.deps.InFlight, w.Slot, v.CapturedAt)
		if n := p.deps.InFlight.InFlight(w.Slot); n > 0 {
			d = satAdd(d, inTransit(v, n, d))
		}
		waiting, running := requestsWith(v, d)
		scores = append(scores, satAdd(waiting, running))
	}
	if !reported {
		scores = scores[:0]
		for _, w := range engines {
			scores = append(scores, p.deps.InFlight.InFlight(w.Slot))
		}
	}
	best, ties := int64(math.MaxInt64), 0
	for _, s := range scores {
		switch {
		case s < best:
			best, ties = s, 1
		case s == best:
			ties++
		}
	}
	k := int((p.cursor.Add(1) - 1) % uint64(ties))
	var chosen *registry.Engine
	for i, w := range engines {
		if scores[i] != best {
			continue
		}
		if k == 0 {
			chosen = w
			break
		}
		k--
	}
	if req.Trace != nil {
		for _, w := range engines {
			if w != chosen {
				req.Trace.note(w, p.deps.observe(snap, w, req.InputTokens), "", "scored")
			}
		}
		if reported {
			req.Trace.setDetail("scored waiting + running + dispatches since report (and in transit at it)")
		} else {
			req.Trace.setDetail("scored router-local in-flight (a candidate lacks a fresh report)")
		}
	}
	return admitSelected(p.limits, chosen, p.deps.observe(snap, chosen, req.InputTokens), &req, config.PolicyLoadBased)
}
