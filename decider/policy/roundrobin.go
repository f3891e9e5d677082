package policy

import (
	"context"
	"sync/atomic"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// roundRobin rotates over the candidates with a cursor owned by this instance (one cursor per
// role-group policy), then checks admission on the engine it landed on.
type roundRobin struct {
	basics
	cursor atomic.Uint64
}

// newRoundRobin returns a round-robin policy with the given admission caps.
func newRoundRobin(deps Deps, limits admission.Limits) *roundRobin {
	return &roundRobin{basics: basics{deps, limits}}
}

// Name implements Policy.
func (p *roundRobin) Name() string { return config.PolicyRoundRobin }

// Pick implements Policy.
func (p *roundRobin) Pick(_ context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	n := uint64(len(engines))
	if n == 0 {
		return Pick{}, ErrNoCandidates
	}
	w := engines[(p.cursor.Add(1)-1)%n]
	snap := p.deps.snapshot(&req)
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
	}
	return admitSelected(p.limits, w, p.deps.observe(snap, w, req.InputTokens), &req, config.PolicyRoundRobin)
}
