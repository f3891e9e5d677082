package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus collectors.
type metrics struct {
	requests           *prometheus.CounterVec
	upstream           *prometheus.HistogramVec
	ttfb               *prometheus.HistogramVec
	decide             prometheus.Histogram
	retries            prometheus.Counter
	overloadRetries    prometheus.Counter
	tokenizerFallbacks prometheus.Counter
}

// latencyBuckets span a sub-millisecond proxy hop to multi-minute generations.
var latencyBuckets = []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_requests_total",
			Help: "Requests on the OpenAI/SGLang routes by route and HTTP status answered.",
		}, []string{"route", "status"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_gateway_upstream_seconds",
			Help:    "Time from sending a request to an engine until its response ended (the decode engine's for PD).",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_gateway_ttfb_seconds",
			Help:    "Time from receiving a request until the first response body byte was written to the client.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		decide: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_gateway_decide_seconds",
			Help:    "Decide call latency as the gateway sees it, transport included.",
			Buckets: []float64{5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1},
		}),
		overloadRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_decider_overload_retries_total",
			Help: "Decide calls retried once because a decider replica shed them (DECIDER_OVERLOADED).",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_retries_total",
			Help: "Requests retried on a new decision after their engine failed before the first byte.",
		}),
		tokenizerFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_tokenizer_fallbacks_total",
			Help: "Requests counted by the bytes/4 estimate because the configured tokenizer failed.",
		}),
	}
	reg.MustRegister(m.requests, m.upstream, m.ttfb, m.decide, m.retries, m.overloadRetries, m.tokenizerFallbacks)
	return m
}

// routeMetrics holds one route's metric handles, so the request path does not hash and look
// up its label values on every request. A handle is made on first use, so a series still
// appears on /metrics only once it has a sample.
type routeMetrics struct {
	m      *metrics
	route  string
	ttfb   func() prometheus.Observer
	up     func() prometheus.Observer
	status [600]atomic.Pointer[prometheus.Counter]
}

func (m *metrics) forRoute(route string) *routeMetrics {
	return &routeMetrics{m: m, route: route,
		ttfb: sync.OnceValue(func() prometheus.Observer { return m.ttfb.WithLabelValues(route) }),
		up:   sync.OnceValue(func() prometheus.Observer { return m.upstream.WithLabelValues(route) })}
}

// requests is the route's request counter for an answered status.
func (r *routeMetrics) requests(code int) prometheus.Counter {
	if code < 0 || code >= len(r.status) {
		return r.m.requests.WithLabelValues(r.route, statusLabel(code))
	}
	if c := r.status[code].Load(); c != nil {
		return *c
	}
	c := r.m.requests.WithLabelValues(r.route, statusLabel(code))
	r.status[code].Store(&c)
	return c
}
