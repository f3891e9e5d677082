package ingest

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one component's Prometheus series. The vectors are shared by
// both streams (label stream), so registering the second component reuses
// the collectors the first one registered.
type metrics struct {
	records   prometheus.Counter
	bytes     prometheus.Counter
	bad       *prometheus.CounterVec // by kind, curried with stream
	skipped   *prometheus.CounterVec // by reason, curried with stream
	lag       *prometheus.GaugeVec   // by partition, curried with stream
	apply     prometheus.Observer
	delay     prometheus.Observer    // Kafka timestamp to applied, per record
	events    prometheus.Counter     // KV events in applied records; KV only
	uncertain prometheus.Gauge       // KV only
	reachable prometheus.Gauge       // 1 while the last broker probe answered
	ignored   *prometheus.CounterVec // KV events applied partly or not at all on purpose, by reason
}

func newMetrics(reg prometheus.Registerer, stream string, lastRecord func() time.Time) (*metrics, error) {
	records, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ingest_records_total", Help: "Records read from Kafka, by stream (bad and skipped ones included).",
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	bytes, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ingest_bytes_total", Help: "Record value bytes read from Kafka, by stream.",
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	bad, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ingest_bad_records_total", Help: "Records (or events within records) skipped because they are invalid, by stream and kind.",
	}, []string{"stream", "kind"}))
	if err != nil {
		return nil, err
	}
	skipped, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ingest_skipped_records_total", Help: "Valid records ignored by the epoch/seq rules (stale_epoch, duplicate), by stream and reason.",
	}, []string{"stream", "reason"}))
	if err != nil {
		return nil, err
	}
	lag, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_ingest_lag_records", Help: "Records in the partition not yet applied: the broker's high watermark (probed every health interval, and seen on each fetch) minus the next offset to apply.",
	}, []string{"stream", "partition"}))
	if err != nil {
		return nil, err
	}
	apply, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_ingest_apply_seconds", Help: "Time to decode and apply one record to the in-memory tables.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10),
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	delay, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_ingest_record_delay_seconds",
		Help:    "Time from a record's Kafka timestamp (when its producer handed it over) to its application: the ingest lag in time, per record. Records caught up after a restart count with their age.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms to 65 s
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	events, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ingest_kv_events_total", Help: "KV events (block stored, block removed, all blocks cleared) in the records applied, by stream.",
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	uncertain, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_ingest_kv_uncertain_holders", Help: "(engine, rank) holders whose KV residency is uncertain after a seq gap.",
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	reachable, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_ingest_broker_reachable", Help: "1 while the stream's last probe of the brokers (metadata and high watermarks) answered; 0 means the replica is not receiving load or KV updates.",
	}, []string{"stream"}))
	if err != nil {
		return nil, err
	}
	ignored, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ingest_kv_events_ignored_total",
		Help: "Valid KV events not indexed as usual, by reason: non_prefix_group (a KV-cache group that does not describe a reusable prefix), unknown_medium (a tier sluice does not know; indexed in a tier of its own).",
	}, []string{"stream", "reason"}))
	if err != nil {
		return nil, err
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_ingest_last_record_age_seconds", Help: "Seconds since the Kafka timestamp of the last record applied; -1 before the first.",
		ConstLabels: prometheus.Labels{"stream": stream},
	}, func() float64 {
		t := lastRecord()
		if t.IsZero() {
			return -1
		}
		return time.Since(t).Seconds()
	})
	if err := reg.Register(age); err != nil {
		return nil, err
	}
	// Only the KV stream counts events; the load stream's counter is a detached one, so no
	// always-zero series is exported for it.
	eventsOf := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ingest_kv_events_total"})
	if stream == StreamKV {
		eventsOf = events.WithLabelValues(stream)
	}
	return &metrics{
		records: records.WithLabelValues(stream), bytes: bytes.WithLabelValues(stream),
		bad:     bad.MustCurryWith(prometheus.Labels{"stream": stream}),
		skipped: skipped.MustCurryWith(prometheus.Labels{"stream": stream}),
		lag:     lag.MustCurryWith(prometheus.Labels{"stream": stream}),
		ignored: ignored.MustCurryWith(prometheus.Labels{"stream": stream}),
		apply:   apply.WithLabelValues(stream), uncertain: uncertain.WithLabelValues(stream),
		delay: delay.WithLabelValues(stream), events: eventsOf,
		reachable: reachable.WithLabelValues(stream),
	}, nil
}

// register registers c, or returns the equal collector already registered
// (the other stream's component registered it first).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, err
	}
	return c, nil
}
