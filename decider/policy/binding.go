package policy

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/affinity"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// bindRetries bounds how often a policy retries a binding whose concurrent winner is no longer a
// candidate before it serves its own pick unbound.
const bindRetries = 3

// binder holds the binding rules session_aware and sticky share: reuse an admitted binding;
// a rejected bound engine fails the attempt and keeps its binding; a missing or out-of-group
// binding falls back, checks admission, then binds first-binder-wins; a concurrent winner is
// checked before it is returned; no key binds nothing.
type binder struct {
	deps     Deps
	limits   admission.Limits
	store    *affinity.Store
	idle     time.Duration
	fallback Policy
	// reasons: the bound engine reused, a new binding written, no key.
	reasonBound, reasonNoKey string
}

// reasonAssigned is the pick reason when a session or sticky policy wrote a new binding.
const reasonAssigned = "assigned"

func (b *binder) pick(ctx context.Context, engines []*registry.Engine, req Request, key string) (Pick, error) {
	if len(engines) == 0 {
		return Pick{}, ErrNoCandidates
	}
	if b.store == nil {
		return Pick{}, errors.Join(ErrInvalidConfiguration, errors.New("no affinity store attached"))
	}
	if key == "" {
		req.Trace.setDetail("no key: fallback " + b.fallback.Name() + ", nothing bound")
		p, err := b.fallbackPick(ctx, engines, req)
		if err != nil {
			return Pick{}, err
		}
		return b.admit(p.Engine, req, b.reasonNoKey)
	}
	scope := affinity.Scope{Model: req.Model, Bucket: req.BucketID, Stage: uint8(req.Stage), Key: key}
	expect := ""
	if id, ok := b.store.Get(scope); ok {
		if w := byID(engines, id); w != nil {
			req.Trace.setDetail("binding reused: " + id)
			return b.admit(w, req, b.reasonBound)
		}
		expect = id // bound engine left the group or is unhealthy: replace the binding
	}
	var p Pick
	for range bindRetries {
		var err error
		if p, err = b.fallbackPick(ctx, engines, req); err != nil {
			return Pick{}, err
		}
		if p, err = b.admit(p.Engine, req, reasonAssigned); err != nil {
			return Pick{}, err
		}
		actual, won, err := b.store.Bind(scope, expect, p.Engine.ID, b.idle)
		if err != nil {
			req.Trace.setDetail("binding not written (" + err.Error() + "): " + p.Engine.ID)
			return p, nil
		}
		if won {
			req.Trace.setDetail("binding written: " + p.Engine.ID)
			return p, nil
		}
		if w := byID(engines, actual); w != nil {
			req.Trace.setDetail("concurrent binder won: " + actual)
			return b.admit(w, req, b.reasonBound)
		}
		expect = actual
	}
	req.Trace.setDetail("binding contended; served unbound: " + p.Engine.ID)
	return p, nil
}

// fallbackPick runs the nested fallback policy; it has default admission, so only a policy
// failure (not a rejection) can come back, and the owning policy checks its own caps after.
func (b *binder) fallbackPick(ctx context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	inner := req
	inner.Trace = nil
	return b.fallback.Pick(ctx, engines, inner)
}

func (b *binder) admit(w *registry.Engine, req Request, reason string) (Pick, error) {
	snap := b.deps.snapshot(&req)
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
	}
	return admitSelected(b.limits, w, b.deps.observe(snap, w, req.InputTokens), &req, reason)
}

func byID(engines []*registry.Engine, id string) *registry.Engine {
	for _, w := range engines {
		if w.ID == id {
			return w
		}
	}
	return nil
}

// sessionAware reuses an admitted session binding scoped by (model, bucket, stage, session key);
// new, keyless or out-of-group sessions use power-of-two with default admission, then this
// policy's admission, then bind. Reasons: session_primary, assigned, no_session.
type sessionAware struct{ b binder }

var _ Policy = (*sessionAware)(nil)

// newSessionAware returns a session-aware policy over store with the given caps and idle expiry.
func newSessionAware(deps Deps, limits admission.Limits, store *affinity.Store, idle time.Duration) *sessionAware {
	return &sessionAware{b: binder{deps: deps, limits: limits, store: store, idle: idle,
		fallback: newPowerOfTwo(deps, admission.Limits{}), reasonBound: "session_primary", reasonNoKey: "no_session"}}
}

// Name implements Policy.
func (p *sessionAware) Name() string { return config.PolicySessionAware }

// Pick implements Policy.
func (p *sessionAware) Pick(ctx context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	return p.b.pick(ctx, engines, req, req.SessionKey)
}

// sticky is sessionAware keyed by the routing key, with a configurable fallback (round_robin by
// default, or random, power_of_two, load_based; each with default admission). Reasons:
// sticky_primary, assigned, no_routing_key.
type sticky struct{ b binder }

var _ Policy = (*sticky)(nil)

// newSticky returns a sticky policy; fallback must be built with default admission.
func newSticky(deps Deps, limits admission.Limits, store *affinity.Store, idle time.Duration, fallback Policy) *sticky {
	return &sticky{b: binder{deps: deps, limits: limits, store: store, idle: idle, fallback: fallback,
		reasonBound: "sticky_primary", reasonNoKey: "no_routing_key"}}
}

// Name implements Policy.
func (p *sticky) Name() string { return config.PolicySticky }

// Pick implements Policy.
func (p *sticky) Pick(ctx context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	return p.b.pick(ctx, engines, req, req.RoutingKey)
}
