package policy

import (
	"context"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// random chooses uniformly among the candidates, then checks admission on its choice.
type random struct {
	basics
}

// newRandom returns a uniform random policy with the given admission caps.
func newRandom(deps Deps, limits admission.Limits) *random {
	return &random{basics: basics{deps, limits}}
}

// Name implements Policy.
func (p *random) Name() string { return config.PolicyRandom }

// Pick implements Policy.
func (p *random) Pick(_ context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	if len(engines) == 0 {
		return Pick{}, ErrNoCandidates
	}
	w := engines[p.deps.intN()(len(engines))]
	snap := p.deps.snapshot(&req)
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
	}
	return admitSelected(p.limits, w, p.deps.observe(snap, w, req.InputTokens), &req, config.PolicyRandom)
}
