package policy

import (
	"context"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// powerOfTwo samples two distinct candidates uniformly and keeps the one with lower stage
// pressure (the first sample on a complete tie), then checks admission exactly once on it. A
// single candidate is selected directly, its load still read for admission. A rejection is
// returned as is: no resampling, no switching to the other sample, no fallback.
type powerOfTwo struct {
	basics
	// intN draws a uniform integer in [0, n); replaced in tests for deterministic sampling.
	intN func(n int) int
}

// newPowerOfTwo returns a power-of-two-choices policy with the given admission caps.
func newPowerOfTwo(deps Deps, limits admission.Limits) *powerOfTwo {
	return &powerOfTwo{basics: basics{deps, limits}, intN: deps.intN()}
}

// Name implements Policy.
func (p *powerOfTwo) Name() string { return config.PolicyPowerOfTwo }

// Pick implements Policy.
func (p *powerOfTwo) Pick(_ context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	n := len(engines)
	if n == 0 {
		return Pick{}, ErrNoCandidates
	}
	snap := p.deps.snapshot(&req)
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
	}
	if n == 1 {
		req.Trace.setDetail("single candidate")
		return admitSelected(p.limits, engines[0], p.deps.observe(snap, engines[0], req.InputTokens), &req, config.PolicyPowerOfTwo)
	}
	i := p.intN(n)
	j := p.intN(n - 1)
	if j >= i {
		j++
	}
	a, b := engines[i], engines[j]
	oa, ob := p.deps.observe(snap, a, req.InputTokens), p.deps.observe(snap, b, req.InputTokens)
	if comparePressure(req.Stage, ob, oa) < 0 {
		req.Trace.note(a, oa, "", "sampled")
		req.Trace.setDetail(pressureBasis(oa, ob))
		return admitSelected(p.limits, b, ob, &req, config.PolicyPowerOfTwo)
	}
	req.Trace.note(b, ob, "", "sampled")
	req.Trace.setDetail(pressureBasis(oa, ob))
	return admitSelected(p.limits, a, oa, &req, config.PolicyPowerOfTwo)
}

// pressureBasis says which measure a pairwise comparison used, for explain output.
func pressureBasis(a, b observation) string {
	if a.native() && b.native() {
		return "compared engine-reported pressure plus dispatches since each report"
	}
	return "compared router-local in-flight (a sampled engine lacks a fresh native report)"
}
