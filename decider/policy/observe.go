package policy

import (
	"math/rand/v2"
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
	// SnapshotAt is Snapshot judged at now instead of a fresh clock reading.
	SnapshotAt(now time.Time) loadtable.Snapshot
	// Now reads the clock Snapshot judges at.
	Now() time.Time
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
	// IntN draws a uniform integer in [0, n) for the sampling policies (random, power_of_two,
	// cache_aware's miss fallback); nil uses math/rand/v2's global source. A trace replay
	// passes a seeded source so its runs repeat; production leaves it nil (it must be safe for
	// concurrent use when set on a decider serving calls in parallel).
	IntN func(n int) int
}

// snapshot is the load snapshot of one pick for req: judged at req.NowNanos, or at a fresh
// clock reading when it is zero.
func (d *Deps) snapshot(req *Request) loadtable.Snapshot {
	if req.NowNanos == 0 {
		return d.Load.Snapshot()
	}
	return d.Load.SnapshotAt(time.Unix(0, req.NowNanos))
}

// intN is Deps.IntN, or the global source when unset.
func (d Deps) intN() func(n int) int {
	if d.IntN != nil {
		return d.IntN
	}
	return rand.IntN
}

// observation is one engine's load as a policy sees it during one pick.
//
// report is the engine's view exactly as reported (explain output and admission read it), the
// snapshot's shared immutable record, nil when the load is unknown;
// load is that report with the dispatches the report cannot hold folded in (pressure.set): the
// ones this router made to the engine after the report's capture, and the ones it made before
// the capture that had not reached the engine by then (transit). Every comparison of reported
// load, in every policy, reads load, never report: a burst decided between two reports must see
// its own earlier picks, and so must one decided while the previous picks were still on their
// way to the engine (docs/decisions.md, "Load observation").
type observation struct {
	report   *loadtable.View
	load     pressure
	known    bool
	inflight int64
	// since is the number of dispatches to the engine after report was captured (0 if unknown).
	since int64
	// transit is the number of this router's dispatches to the engine made before the capture
	// that the report does not count (see inTransit; 0 if unknown).
	transit int64
}

// observe reads one engine's load from snap and the in-flight tracker. tokens is what each
// dispatch the report cannot hold is assumed to add to the engine's pending prefill and KV: the
// uncached tokens the request being placed would have on that engine (see pressure.set).
func (d Deps) observe(snap loadtable.Snapshot, w *registry.Engine, tokens int64) (o observation) {
	d.observeInto(&o, snap, w, tokens)
	return o
}

// observeInto is observe writing into *o, which must be zero: a policy that observes every
// candidate into its own array avoids copying each observation out and back.
func (d *Deps) observeInto(o *observation, snap loadtable.Snapshot, w *registry.Engine, tokens int64) {
	o.inflight = d.InFlight.InFlight(w.Slot)
	if v := snap.ViewRef(w.Slot); v != nil {
		o.report, o.known = v, true
		if o.inflight > 0 { // nothing in flight: no dispatch since the report can still count
			o.since = min(sinceReport(d.InFlight, w.Slot, v.CapturedAt), o.inflight)
			o.transit = inTransit(v, o.inflight, o.since)
		}
		o.load.set(v, satAdd(o.since, o.transit), tokens)
	}
}

// sinceReport counts the dispatches to s at or after a report's capture instant. The report
// cannot hold a request dispatched at that very instant (it had yet to reach the engine), so
// such a dispatch is since the report; counting only strictly later ones loses every dispatch
// of a burst decided at one clock reading (a virtual clock, or a coarse one) against a report
// captured at that reading.
func sinceReport(t InFlightReader, s slots.Slot, capturedAt time.Time) int64 {
	return t.DispatchesSince(s, capturedAt.Add(-time.Nanosecond))
}

// inTransit is how many of this router's dispatches to an engine were made before v's capture
// and had not reached the engine when it was captured: the leases alive now that were acquired
// before the capture (inflight − since) less the requests the engine itself reported (running +
// waiting), never negative. A lease is held from the decision until the response has been
// relayed, so on a busy host, where a request takes hundreds of milliseconds from the decision
// to its engine, those leases outnumber what the engine holds; in virtual time, where a request
// reaches its engine at the instant it is decided, they never do. The count is a lower bound of
// the requests in transit: the engine's figures include requests other routers sent it (another
// decider replica, direct traffic), and a lease released since the capture no longer counts.
// It also counts a request the engine had finished before the capture whose lease was still
// held (its response not yet relayed to the client), an excess as large as the completions
// within the response relay time.
func inTransit(v *loadtable.View, inflight, since int64) int64 {
	return max(inflight-since-satAdd(max(v.Running, 0), max(v.Waiting, 0)), 0)
}

func (o observation) metrics() admission.Metrics {
	m := admission.Metrics{Known: o.known, InFlight: o.inflight}
	if o.known {
		m.View = *o.report
	}
	return m
}

// native reports whether the observation carries a fresh native view usable for pressure ranking.
func (o observation) native() bool { return o.known && o.report.Native }
