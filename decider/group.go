package decider

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// engineGroup owns an engine membership and the policy attached to it. pick filters the live
// engines by model, health and role, intersects them with the membership, sorts them by id,
// invokes the policy and checks that the result is one of those exact candidates.
//
// An engineGroup belongs to one model's resolver, so its candidate list depends only on the
// registry snapshot; it is cached per snapshot version and never allocated on the pick path.
type engineGroup struct {
	role    registry.Role
	members map[string]struct{} // nil: every engine of the model and role; empty: none
	policy  policy.Policy
	cache   atomic.Pointer[candidateCache]
}

type candidateCache struct {
	version uint64
	model   string
	engines []*registry.Engine
}

// newEngineGroup returns a catch-all group: every healthy engine of the request's model and role.
func newEngineGroup(role registry.Role, p policy.Policy) *engineGroup {
	return &engineGroup{role: role, policy: p}
}

// newEngineGroupOf returns a group limited to the engines with the given ids. An empty (non-nil
// or nil) slice means no engines; use newEngineGroup for "all".
func newEngineGroupOf(role registry.Role, p policy.Policy, ids []string) *engineGroup {
	m := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		m[id] = struct{}{}
	}
	return &engineGroup{role: role, members: m, policy: p}
}

// member reports whether id belongs to the group's membership (nil membership: everyone).
func (g *engineGroup) member(id string) bool {
	if g.members == nil {
		return true
	}
	_, ok := g.members[id]
	return ok
}

// candidates returns the group's current candidates for model, sorted by id. The slice is shared
// and must not be modified.
func (g *engineGroup) candidates(reg *registry.Snapshot, model string) []*registry.Engine {
	if c := g.cache.Load(); c != nil && c.version == reg.Version() && c.model == model {
		return c.engines
	}
	all := reg.Candidates(model, g.role)
	engines := all
	if g.members != nil {
		engines = make([]*registry.Engine, 0, len(g.members))
		for _, w := range all {
			if _, ok := g.members[w.ID]; ok {
				engines = append(engines, w)
			}
		}
	}
	g.cache.Store(&candidateCache{version: reg.Version(), model: model, engines: engines})
	return engines
}

// eligible is the group's candidates for req minus req.ExcludeEngineIDs and, unless adapter is
// "", minus engines that do not declare that adapter. It allocates only when it removes any;
// the result must not be modified.
func (g *engineGroup) eligible(reg *registry.Snapshot, req *policy.Request, adapter string) []*registry.Engine {
	engines := g.candidates(reg, req.Model)
	if exclude := req.ExcludeEngineIDs; len(exclude) > 0 || adapter != "" {
		engines = slices.DeleteFunc(slices.Clone(engines), func(w *registry.Engine) bool {
			return slices.Contains(exclude, w.ID) || !servesAdapter(w, adapter)
		})
	}
	return engines
}

// hasEngineFor reports whether any registered engine of model in the group's role is a member,
// healthy or not, drained or not: whether the group can ever serve the model without a change
// to the registry or the configuration.
func (g *engineGroup) hasEngineFor(reg *registry.Snapshot, model string) bool {
	for _, w := range reg.Engines() {
		if w.Role == g.role && slices.Contains(w.Models, model) && g.member(w.ID) {
			return true
		}
	}
	return false
}

// pick selects one engine for req among the group's candidates minus req.ExcludeEngineIDs
// (engines the caller already failed on) and, unless adapter is "", minus engines that do not
// declare that LoRA adapter. It returns policy.ErrNoCandidates without invoking the policy when
// nothing is eligible, and an error wrapping errOutsideCandidates when the policy returns an
// engine that is not one of the candidates it was given (compared by identity, so a newly
// allocated engine with a candidate's id is rejected too).
func (g *engineGroup) pick(ctx context.Context, reg *registry.Snapshot, req policy.Request, adapter string) (policy.Pick, error) {
	engines := g.eligible(reg, &req, adapter)
	if len(engines) == 0 {
		return policy.Pick{}, policy.ErrNoCandidates
	}
	pick, err := g.policy.Pick(ctx, engines, req)
	if err != nil {
		return policy.Pick{}, err
	}
	if pick.Engine == nil || !slices.Contains(engines, pick.Engine) {
		id := "<nil>"
		if pick.Engine != nil {
			id = pick.Engine.ID
		}
		return policy.Pick{}, fmt.Errorf("policy %s returned engine %q: %w", g.policy.Name(), id, errOutsideCandidates)
	}
	return pick, nil
}
