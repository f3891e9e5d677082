// Package registry holds the set of inference engines (the configuration's `workers`) the router
// may pick, their roles and health, and serves immutable snapshots of it.
//
// Writers (configuration loads, admin calls, health probes) are serialised
// by a mutex and publish a new *Snapshot atomically; readers on the request
// path load the current snapshot without locking or allocating.
package registry

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/state/slots"
)

// Registry is the engine registry. It is safe for concurrent use.
type Registry struct {
	slots *slots.Table
	now   func() time.Time

	mu    sync.Mutex // serialises writers and guards hooks and initial
	hooks []func(w *Engine)
	snap  atomic.Pointer[Snapshot]
	// initial is the health of an engine the registry has not seen at its url; nil is healthy.
	initial *Health
}

// New returns an empty registry whose engines get their slots from t.
func New(t *slots.Table) *Registry {
	r := &Registry{slots: t, now: time.Now}
	r.snap.Store(emptySnapshot)
	return r
}

// Snapshot returns the current snapshot. It never returns nil, takes no lock
// and does not allocate.
func (r *Registry) Snapshot() *Snapshot { return r.snap.Load() }

// OnRemove registers fn to run after an engine leaves the registry, through
// Remove or by being absent from a Replace. fn receives the departed
// registration. Hooks run synchronously, in registration order, while the
// registry's write lock is held, after the new snapshot is published; they
// must therefore be quick and must not call the Registry's write methods
// (reading Snapshot is fine). Register hooks before the registry is used;
// this is not a hot path.
func (r *Registry) OnRemove(fn func(w *Engine)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks = append(r.hooks, fn)
}

// SetInitialHealth sets the health an engine starts with when it is new (or its url changed);
// the default is healthy. Active health checking uses it so a newly registered engine is no
// candidate until its first successful probe. Since is set when the engine is added.
func (r *Registry) SetInitialHealth(h Health) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.initial = &h
}

// fresh is the health of a new engine; called with r.mu held.
func (r *Registry) fresh() Health {
	h := Health{Healthy: true}
	if r.initial != nil {
		h = *r.initial
	}
	h.Since = r.now()
	return h
}

// Replace makes engines the whole registered set, as a configuration load
// does. It validates the whole set first and changes nothing if any engine is
// invalid, returning every problem found (errors.Join of *ValidationError,
// matching ErrInvalid). Engines whose id and url are unchanged keep their
// health; other engines start healthy (or as SetInitialHealth says). OnRemove hooks run for every
// previously registered id absent from engines. The version increases even
// if the new set equals the old one.
func (r *Registry) Replace(engines []Engine) error {
	next := make([]*Engine, len(engines))
	for i := range engines {
		next[i] = &engines[i]
	}
	slices.SortStableFunc(next, func(a, b *Engine) int { return cmp.Compare(a.ID, b.ID) })
	if err := validateSet(next); err != nil {
		return err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	fresh := r.fresh()
	health := make([]Health, len(next))
	for i, w := range next {
		next[i] = w.clone(r.slots.Intern(w.ID))
		health[i] = fresh
		if j, ok := cur.byID[w.ID]; ok && cur.engines[j].URL == w.URL {
			health[i] = cur.health[j]
		}
	}
	s := buildSnapshot(cur.version+1, next, health)
	r.snap.Store(s)
	for _, old := range cur.engines {
		if _, ok := s.byID[old.ID]; !ok {
			r.runHooks(old)
		}
	}
	return nil
}

// Upsert adds w, or replaces the registration with the same id. It validates
// w against the rest of the registered set (for example, a model may not mix
// plain and prefill/decode engines) and changes nothing on error. A
// replacement keeps its health when its url is unchanged; otherwise the
// engine starts healthy (or as SetInitialHealth says).
func (r *Registry) Upsert(w Engine) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	i, exists := cur.byID[w.ID]
	next := make([]*Engine, 0, len(cur.engines)+1)
	health := make([]Health, 0, len(cur.engines)+1)
	if exists {
		next = append(next, cur.engines...)
		health = append(health, cur.health...)
		next[i] = &w
	} else {
		i, _ = slices.BinarySearchFunc(cur.engines, w.ID, func(x *Engine, id string) int { return cmp.Compare(x.ID, id) })
		next = append(append(append(next, cur.engines[:i]...), &w), cur.engines[i:]...)
		health = append(append(append(health, cur.health[:i]...), Health{}), cur.health[i:]...)
	}
	if err := validateSet(next); err != nil {
		return err
	}
	next[i] = w.clone(r.slots.Intern(w.ID))
	if !exists || cur.engines[i].URL != w.URL {
		health[i] = r.fresh()
	}
	r.snap.Store(buildSnapshot(cur.version+1, next, health))
	return nil
}

// Remove unregisters the engine with the given id and runs the OnRemove
// hooks. It reports false, changing nothing, if id is not registered.
func (r *Registry) Remove(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	i, ok := cur.byID[id]
	if !ok {
		return false
	}
	old := cur.engines[i]
	r.snap.Store(buildSnapshot(cur.version+1,
		slices.Delete(slices.Clone(cur.engines), i, i+1),
		slices.Delete(slices.Clone(cur.health), i, i+1)))
	r.runHooks(old)
	return true
}

// SetHealth records the health of the engine with the given id and reports
// false if id is not registered. When Healthy changes, the stored Health is
// h (Since defaults to now when zero), candidate lists are rebuilt and the
// version increases. When Healthy is unchanged, only a changed Reason is
// recorded, keeping the original Since and the version; an identical call
// changes nothing.
func (r *Registry) SetHealth(id string, h Health) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	i, ok := cur.byID[id]
	if !ok {
		return false
	}
	old := cur.health[i]
	switch {
	case old.Healthy != h.Healthy:
		if h.Since.IsZero() {
			h.Since = r.now()
		}
		r.snap.Store(cur.withHealth(cur.version+1, i, h))
	case old.Reason != h.Reason:
		old.Reason = h.Reason
		r.snap.Store(cur.withHealth(cur.version, i, old))
	}
	return true
}

// runHooks calls every OnRemove hook with w. r.mu must be held.
func (r *Registry) runHooks(w *Engine) {
	for _, fn := range r.hooks {
		fn(w)
	}
}
