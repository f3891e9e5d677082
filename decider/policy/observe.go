package policy

import (
	"time"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/affinity"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// LoadReader is the engine-reported load table a policy reads; *loadtable.Table implements it.
// A policy captures one snapshot per non-empty pick and reuses it for admission.
type LoadReader interface {
	Snapshot() loadtable.Snapshot
}

// InFlightReader is the router-local accounting a policy reads; *inflight.Tracker implements it.
type InFlightReader interface {
	// InFlight is the number of dispatched, unreleased requests on the engine.
	InFlight(s slots.Slot) int64
	// DispatchesSince counts dispatches to the engine recorded strictly after since.
	DispatchesSince(s slots.Slot, since time.Time) int64
}

// Deps are the shared state handles policies are built with. Wiring creates them once; policies
// never start their own subscriptions or loops.
type Deps struct {
	Load     LoadReader
	InFlight InFlightReader
	// Prefix is the KV prefix index cache-aware policies read; nil without KV ingestion.
	Prefix PrefixSource
	// Affinity holds session and sticky bindings; nil when no policy needs it.
	Affinity *affinity.Store
}

// observation is one engine's load as a policy sees it during one pick.
type observation struct {
	view     loadtable.View
	known    bool
	inflight int64
}

func (d Deps) observe(snap loadtable.Snapshot, w *registry.Engine) observation {
	v, ok := snap.View(w.Slot)
	return observation{view: v, known: ok, inflight: d.InFlight.InFlight(w.Slot)}
}

func (o observation) metrics() admission.Metrics {
	return admission.Metrics{View: o.view, Known: o.known, InFlight: o.inflight}
}

// native reports whether the observation carries a fresh native view usable for pressure ranking.
func (o observation) native() bool { return o.known && o.view.Native }
