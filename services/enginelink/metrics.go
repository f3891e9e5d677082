package enginelink

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the link's Prometheus series (sluice_enginelink_*). Per-engine series are removed
// when the engine is no longer followed.
type metrics struct {
	engines *prometheus.GaugeVec // {mode}

	kvReceived    *prometheus.CounterVec // {engine}
	kvForwarded   *prometheus.CounterVec // {engine, source}
	kvDuplicates  *prometheus.CounterVec // {engine}
	kvGaps        *prometheus.CounterVec // {engine, kind}
	kvGapBatches  *prometheus.CounterVec // {engine, kind, outcome}
	kvEpochs      *prometheus.CounterVec // {engine, reason}
	kvReplays     *prometheus.CounterVec // {engine, result}
	kvMalformed   *prometheus.CounterVec // {reason}
	kvUnknown     prometheus.Counter
	kvStreamDrops *prometheus.CounterVec // {engine}
	kvLastBatch   *prometheus.GaugeVec   // {engine}
	kvConnected   *prometheus.GaugeVec   // {engine}

	kafkaProduced *prometheus.CounterVec // {topic}
	kafkaAcked    *prometheus.CounterVec // {topic}
	kafkaDropped  *prometheus.CounterVec // {topic, reason}
	kafkaLatency  *prometheus.HistogramVec
	kafkaBuffered prometheus.Gauge
	kafkaLastAck  prometheus.Gauge

	scrapes     *prometheus.CounterVec // {engine, result}
	scrapeLast  *prometheus.GaugeVec   // {engine}
	loadReports *prometheus.CounterVec // {engine}

	fleetPolls *prometheus.CounterVec // {result}
	fleetLast  prometheus.Gauge

	shardMapVersion prometheus.Gauge
	shardMoves      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns = "sluice_enginelink_"
	m := &metrics{
		engines: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "engines",
			Help: "Engines followed, by source (static or fleet)."}, []string{"source"}),
		kvReceived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_batches_received_total",
			Help: "KV-event batches received live from engines' ZMQ publishers."}, []string{"engine"}),
		kvForwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_batches_forwarded_total",
			Help: "KV-event batches handed to the Kafka producer, by source (live or replay)."}, []string{"engine", "source"}),
		kvDuplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_duplicate_batches_total",
			Help: "Live batches skipped because replay had already forwarded them."}, []string{"engine"}),
		kvGaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_gaps_total",
			Help: "Seq gaps detected: seq_jump (lost batches) or epoch_start (a new epoch whose first live seq is above 0)."}, []string{"engine", "kind"}),
		kvGapBatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_gap_batches_total",
			Help: "Missing batches of detected gaps, by outcome: replayed, or unrecovered (forwarded as a visible seq jump)."}, []string{"engine", "kind", "outcome"}),
		kvEpochs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_epochs_total",
			Help: "Epochs minted per engine, by reason (start, or restart when its seq went backwards)."}, []string{"engine", "reason"}),
		kvReplays: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_replay_requests_total",
			Help: "Replay requests to engines' replay sockets, by result."}, []string{"engine", "result"}),
		kvMalformed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_malformed_messages_total",
			Help: "ZMQ messages that are not [topic, 8-byte seq, payload], by reason."}, []string{"reason"}),
		kvUnknown: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "kv_unknown_topic_total",
			Help: "Messages on the bound socket whose topic names no followed engine (want kv@<id>@<model>)."}),
		kvStreamDrops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kv_stream_dropped_total",
			Help: "Batches dropped because the engine rank's stream buffer was full (recovered by replay when possible)."}, []string{"engine"}),
		kvLastBatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "kv_last_batch_timestamp_seconds",
			Help: "Unix time of the last live batch received from the engine."}, []string{"engine"}),
		kvConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "kv_subscriptions",
			Help: "ZMQ SUB sockets connected to the engine's publishers (one per DP rank)."}, []string{"engine"}),

		kafkaProduced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kafka_records_produced_total",
			Help: "Records handed to the Kafka writer, by topic."}, []string{"topic"}),
		kafkaAcked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kafka_records_acked_total",
			Help: "Records acknowledged by all in-sync replicas, by topic."}, []string{"topic"}),
		kafkaDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "kafka_records_dropped_total",
			Help: "Records dropped, by topic and reason (buffer_full: more than -max-buffered-records waiting; write_failed: retries exhausted). KV drops are seq gaps for the decider."}, []string{"topic", "reason"}),
		kafkaLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ns + "kafka_ack_latency_seconds",
			Help:    "Time from receiving a batch (ZMQ or scrape) to its Kafka acknowledgement.",
			Buckets: []float64{.00025, .0005, .001, .0015, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"topic"}),
		kafkaBuffered: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "kafka_buffered_records",
			Help: "Records waiting for Kafka (queued or in flight)."}),
		kafkaLastAck: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "kafka_last_ack_timestamp_seconds",
			Help: "Unix time of the last acknowledged produce."}),

		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "scrapes_total",
			Help: "Load scrapes, by engine and result (ok, error). A failed scrape publishes nothing."}, []string{"engine", "result"}),
		scrapeLast: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ns + "scrape_last_success_timestamp_seconds",
			Help: "Unix time of the engine's last successful load scrape."}, []string{"engine"}),
		loadReports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "load_reports_total",
			Help: "LoadReports produced, one per engine rank and scrape."}, []string{"engine"}),

		fleetPolls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "fleet_polls_total",
			Help: "Reads of the decider's engine registry, by result."}, []string{"result"}),
		fleetLast: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "fleet_last_success_timestamp_seconds",
			Help: "Unix time of the last successful read of the decider's engine registry."}),
		shardMapVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "shard_map_version",
			Help: "Configuration version of the shard map in force (-shards-config or -shards-postgres-dsn); 0 without one."}),
		shardMoves: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "shard_map_moves_total",
			Help: "Models whose shard changed in a newer shard map (their records go to the new shard's topics from then on)."}),
	}
	reg.MustRegister(m.engines, m.kvReceived, m.kvForwarded, m.kvDuplicates, m.kvGaps, m.kvGapBatches, m.kvEpochs,
		m.kvReplays, m.kvMalformed, m.kvUnknown, m.kvStreamDrops, m.kvLastBatch, m.kvConnected,
		m.kafkaProduced, m.kafkaAcked, m.kafkaDropped, m.kafkaLatency, m.kafkaBuffered, m.kafkaLastAck,
		m.scrapes, m.scrapeLast, m.loadReports, m.fleetPolls, m.fleetLast, m.shardMapVersion, m.shardMoves)
	return m
}

// forgetEngine removes the series of an engine no longer followed.
func (m *metrics) forgetEngine(id string) {
	l := prometheus.Labels{"engine": id}
	for _, v := range []*prometheus.MetricVec{m.kvReceived.MetricVec, m.kvForwarded.MetricVec, m.kvDuplicates.MetricVec,
		m.kvGaps.MetricVec, m.kvGapBatches.MetricVec, m.kvEpochs.MetricVec, m.kvReplays.MetricVec,
		m.kvStreamDrops.MetricVec, m.kvLastBatch.MetricVec, m.kvConnected.MetricVec, m.scrapes.MetricVec,
		m.scrapeLast.MetricVec, m.loadReports.MetricVec} {
		v.DeletePartialMatch(l)
	}
}
