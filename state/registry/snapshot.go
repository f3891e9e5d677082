package registry

import (
	"slices"
)

// Snapshot is an immutable view of the registry: engines, their health and the
// per-(model, role) candidate lists derived from them. All read methods are
// lock-free and allocation-free; slices returned by a Snapshot are shared and
// must not be modified.
type Snapshot struct {
	version uint64
	engines []*Engine      // sorted by ID
	health  []Health       // parallel to engines
	byID    map[string]int // ID -> index in engines
	models  []string       // sorted union of engine models
	byModel map[string]*modelIndex
}

// modelIndex holds one model's precomputed candidates, per role.
type modelIndex struct {
	roles [numRoles]roleIndex
}

type roleIndex struct {
	healthy   []*Engine // sorted by ID; nil if none
	unhealthy int
}

// emptySnapshot is the registry's state before its first change.
var emptySnapshot = &Snapshot{}

// buildSnapshot derives a snapshot from engines (sorted by ID) and their
// health (parallel to engines). It takes ownership of both slices.
func buildSnapshot(version uint64, engines []*Engine, health []Health) *Snapshot {
	s := &Snapshot{
		version: version,
		engines: engines,
		health:  health,
		byID:    make(map[string]int, len(engines)),
		byModel: map[string]*modelIndex{},
	}
	for i, w := range engines {
		s.byID[w.ID] = i
		for _, m := range w.Models {
			mi := s.byModel[m]
			if mi == nil {
				mi = &modelIndex{}
				s.byModel[m] = mi
				s.models = append(s.models, m)
			}
			ri := &mi.roles[w.Role]
			if w.Drained() {
				continue // still registered (in-flight work finishes), never a new candidate
			}
			if health[i].Healthy {
				ri.healthy = append(ri.healthy, w)
			} else {
				ri.unhealthy++
			}
		}
	}
	slices.Sort(s.models)
	// Trim candidate slices so that an append by a careless caller can never
	// write into memory shared with another list.
	for _, mi := range s.byModel {
		for r := range mi.roles {
			mi.roles[r].healthy = slices.Clip(mi.roles[r].healthy)
		}
	}
	return s
}

// withHealth returns a copy of s sharing everything but the health of engine
// i, with the given version. Candidate lists are rebuilt only when the
// Healthy bit changed.
func (s *Snapshot) withHealth(version uint64, i int, h Health) *Snapshot {
	health := slices.Clone(s.health)
	health[i] = h
	if s.health[i].Healthy != h.Healthy {
		return buildSnapshot(version, s.engines, health)
	}
	c := *s
	c.version = version
	c.health = health
	return &c
}

// Version returns the snapshot's version. It increases with every change of
// membership, engine fields or health (a change of Reason alone, without a
// change of Healthy, keeps the version). The empty registry has version 0.
func (s *Snapshot) Version() uint64 { return s.version }

// Len returns the number of registered engines.
func (s *Snapshot) Len() int { return len(s.engines) }

// Engines returns every registered engine, healthy or not, sorted by ID.
// The slice is shared; callers must not modify it.
func (s *Snapshot) Engines() []*Engine { return s.engines }

// Get returns the current registration of the engine with the given id.
func (s *Snapshot) Get(id string) (*Engine, bool) {
	i, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	return s.engines[i], true
}

// Health returns the health of the engine with the given id.
func (s *Snapshot) Health(id string) (Health, bool) {
	i, ok := s.byID[id]
	if !ok {
		return Health{}, false
	}
	return s.health[i], true
}

// Candidates returns the healthy engines that serve model with the given
// role, sorted by ID, or nil if there are none. The lists are precomputed
// when the snapshot is built, so this is a map lookup; the slice is shared
// and must not be modified.
func (s *Snapshot) Candidates(model string, role Role) []*Engine {
	mi := s.byModel[model]
	if mi == nil || int(role) >= numRoles {
		return nil
	}
	return mi.roles[role].healthy
}

// UnhealthyCount returns how many unhealthy engines serve model with the
// given role, so callers can tell "no healthy engines" from "no engines".
func (s *Snapshot) UnhealthyCount(model string, role Role) int {
	mi := s.byModel[model]
	if mi == nil || int(role) >= numRoles {
		return 0
	}
	return mi.roles[role].unhealthy
}

// Models returns the sorted union of every registered engine's models,
// healthy or not. The slice is shared; callers must not modify it.
func (s *Snapshot) Models() []string { return s.models }
