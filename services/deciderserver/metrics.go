package deciderserver

import (
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/state/inflight"
)

// metrics are the decider service's Prometheus collectors; callCounter (below) counts the calls
// of every service.
type metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	releases  *prometheus.CounterVec
	// children caches the decisions and latency children by their labels, so a Decide hashes
	// no label values, takes no lock and builds no PD reason string (decisionCells).
	children decisionCells
}

func newMetrics(reg prometheus.Registerer, leases *inflight.Tracker, version func() int64) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decider_decisions_total",
			Help: "Decide calls by outcome (ok, invalid_argument, unavailable, internal, canceled), reason and bucket.",
		}, []string{"outcome", "reason", "bucket"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_decider_decide_duration_seconds",
			Help:    "Time spent in Decide, excluding transport.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2},
		}, []string{"outcome"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decider_releases_total",
			Help: "Release calls by reported outcome and whether a live lease was released.",
		}, []string{"outcome", "released"}),
	}
	reg.MustRegister(m.decisions, m.latency, m.releases,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_decider_leases",
			Help: "Leases currently held (requests dispatched and not yet released or expired).",
		}, func() float64 { return float64(leases.Leases()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_decider_leases_expired_total",
			Help: "Leases expired by TTL because the caller never released them.",
		}, func() float64 { return float64(leases.Expired()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_decider_config_version",
			Help: "Version of the configuration snapshot in use.",
		}, func() float64 { return float64(version()) }),
	)
	return m
}

func (m *metrics) observeDecide(d time.Duration, bucket string, err error, dec *decider.Decision) {
	k := decisionLabels{outcome: "ok", bucket: bucket}
	if err == nil {
		if dec.PD {
			k.reason, k.decodeReason, k.pd = dec.Prefill.Reason, dec.Decode.Reason, true
		} else {
			k.reason = dec.Plain.Reason
		}
	} else {
		var e *decider.Error
		if errors.As(err, &e) {
			k.outcome, k.reason = e.Kind.String(), e.Reason
		} else {
			k.outcome, k.reason = "canceled", "CONTEXT"
		}
	}
	c := m.children.get(k, m)
	c.decisions.Inc()
	c.latency.Observe(d.Seconds())
}

// decisionLabels are the labels of one decisions child: the reason label is reason, or for a
// PD pick reason+"+"+decodeReason.
type decisionLabels struct {
	outcome, reason, decodeReason, bucket string
	pd                                    bool
}

// decisionChildren are the collectors one Decide outcome counts into.
type decisionChildren struct {
	decisions prometheus.Counter
	latency   prometheus.Observer
}

// decisionCells maps labels to their children: an immutable map behind an atomic pointer,
// copied with one entry more when a new label set first appears (the set is bounded by the
// buckets, the policies' reasons and the error reasons, so this soon stops).
type decisionCells struct {
	mu    sync.Mutex // serializes adding an entry
	cells atomic.Pointer[map[decisionLabels]decisionChildren]
}

func (dc *decisionCells) get(k decisionLabels, m *metrics) decisionChildren {
	if p := dc.cells.Load(); p != nil {
		if c, ok := (*p)[k]; ok {
			return c
		}
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	var old map[decisionLabels]decisionChildren
	if p := dc.cells.Load(); p != nil {
		if c, ok := (*p)[k]; ok {
			return c
		}
		old = *p
	}
	reason := k.reason
	if k.pd {
		reason = k.reason + "+" + k.decodeReason
	}
	c := decisionChildren{decisions: m.decisions.WithLabelValues(k.outcome, reason, k.bucket), latency: m.latency.WithLabelValues(k.outcome)}
	next := make(map[decisionLabels]decisionChildren, len(old)+1)
	maps.Copy(next, old)
	next[k] = c
	dc.cells.Store(&next)
	return c
}

// callCounter is sluice_decider_rpcs_total with the children of the server's own procedures
// kept in arrays, so counting a call hashes no label values and takes no lock.
type callCounter struct {
	vec *prometheus.CounterVec
	mu  sync.Mutex // serializes creating a child
	// byProcedure is filled at construction and read-only after; a cell is set once.
	byProcedure map[string]*callCells
}

type callCells [numProtocols][codes.Unauthenticated + 1]atomic.Pointer[counterBox]

type counterBox struct{ prometheus.Counter }

func newCallCounter(reg prometheus.Registerer, procedures []string) *callCounter {
	c := &callCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_decider_rpcs_total",
		Help: "Calls of every procedure (DeciderService, AdminService, health, reflection) by protocol (grpc, connect, grpc-web, rest, in-process) and status code, refusals by authentication included.",
	}, []string{"procedure", "protocol", "code"}),
		byProcedure: map[string]*callCells{}}
	for _, p := range procedures {
		c.byProcedure[p] = new(callCells)
	}
	reg.MustRegister(c.vec)
	return c
}

func (c *callCounter) inc(procedure string, protocol int, code codes.Code) {
	cells, ok := c.byProcedure[procedure]
	if !ok || code > codes.Unauthenticated {
		c.vec.WithLabelValues(procedure, protocols[protocol], code.String()).Inc()
		return
	}
	cell := &cells[protocol][code]
	box := cell.Load()
	if box == nil {
		c.mu.Lock()
		if box = cell.Load(); box == nil {
			box = &counterBox{c.vec.WithLabelValues(procedure, protocols[protocol], code.String())}
			cell.Store(box)
		}
		c.mu.Unlock()
	}
	box.Inc()
}
