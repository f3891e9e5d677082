package simengine

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/simengine/engine"
)

// Record headers and the msgpack format name, as components/kvwire reads them.
const (
	HeaderFormat      = "sluice-format"
	HeaderEpoch       = "sluice-epoch"
	HeaderSeq         = "sluice-seq"
	HeaderModel       = "sluice-model"
	FormatVLLMMsgpack = "vllm.msgpack"
)

const (
	maxEventsPerBatch = 512
	maxPendingEvents  = 100_000 // beyond, events are dropped and the seq skips (a visible gap)
	maxOutbox         = 1024    // unsent records kept for retry
	errorLogEvery     = 30 * time.Second
)

// Publisher sends the engine's load reports (every LoadInterval) and KV events (batched every
// KVInterval) to Kafka, keyed by engine id. Both streams carry the epoch chosen at start (the
// start time in ns, so a restart is a newer epoch) and their own seq counting from 1. Kafka
// being unreachable never blocks the engine: KV records wait in a bounded outbox and are
// retried (the oldest dropped beyond it, which consumers see as a seq gap); load reports are
// not retried, the next one supersedes them. Failures are logged at most every 30 s and counted.
type Publisher struct {
	logger *slog.Logger
	cfg    Config
	epoch  uint64
	writer *kafka.Writer
	load   func() engine.Load

	queue eventQueue

	sent, failed *prometheus.CounterVec
	lastSuccess  *prometheus.GaugeVec
	dropped      prometheus.Counter
}

func newPublisher(logger *slog.Logger, cfg Config, brokers []string, reg *prometheus.Registry) *Publisher {
	p := &Publisher{
		logger: logger.With(slog.String("component", "publisher")),
		cfg:    cfg,
		epoch:  uint64(time.Now().UnixNano()),
		writer: &kafka.Writer{
			Addr: kafka.TCP(brokers...), Balancer: &kafka.Hash{}, AllowAutoTopicCreation: true,
			BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireOne,
			MaxAttempts: 3, WriteBackoffMin: 50 * time.Millisecond, WriteBackoffMax: 500 * time.Millisecond,
		},
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_simengine_kafka_records_total",
			Help: "Records written to Kafka, by topic."}, []string{"topic"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_simengine_kafka_write_errors_total",
			Help: "Failed Kafka writes, by topic."}, []string{"topic"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_simengine_kafka_last_success_timestamp_seconds",
			Help: "Unix time of the last successful write, by topic."}, []string{"topic"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_simengine_kv_events_dropped_total",
			Help: "KV events dropped because Kafka was unreachable for too long."}),
	}
	p.queue.dropped = p.dropped
	reg.MustRegister(p.sent, p.failed, p.lastSuccess, p.dropped)
	return p
}

// Epoch is the epoch stamped on every record.
func (p *Publisher) Epoch() uint64 { return p.epoch }

// enqueueKV is the engine's Sink.
func (p *Publisher) enqueueKV(evs []engine.Event) { p.queue.add(evs) }

// Run publishes until ctx is cancelled, then makes one last bounded attempt to send the KV
// events it holds and closes the writer.
func (p *Publisher) Run(ctx context.Context) error {
	var outbox []kafka.Message
	var kvSeq uint64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		p.loadLoop(gctx)
		return nil
	})
	g.Go(func() error {
		t := time.NewTicker(p.cfg.KVInterval)
		defer t.Stop()
		ticker := newErrorTicker(p.logger, p.cfg.KVTopic)
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
			outbox = p.drain(outbox, &kvSeq)
			outbox = p.flush(gctx, outbox, ticker)
		}
	})
	_ = g.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	outbox = p.drain(outbox, &kvSeq)
	if outbox = p.flush(ctx, outbox, newErrorTicker(p.logger, p.cfg.KVTopic)); len(outbox) > 0 {
		p.logger.Warn("KV records not sent at shutdown", slog.Int("records", len(outbox)))
	}
	return p.writer.Close()
}

// drain turns the pending events into records appended to outbox.
func (p *Publisher) drain(outbox []kafka.Message, seq *uint64) []kafka.Message {
	evs, skipped := p.queue.take()
	*seq += uint64(skipped) // the dropped events leave a gap consumers can see
	now := time.Now()
	for len(evs) > 0 {
		n := min(len(evs), maxEventsPerBatch)
		*seq++
		if msg, err := p.kvMessage(now, *seq, evs[:n]); err != nil {
			p.logger.Error("encode KV batch", slog.Any("error", err))
		} else {
			outbox = append(outbox, msg)
		}
		evs = evs[n:]
	}
	if over := len(outbox) - maxOutbox; over > 0 {
		for _, m := range outbox[:over] {
			p.dropped.Add(float64(eventCount(m)))
		}
		outbox = append(outbox[:0], outbox[over:]...)
	}
	return outbox
}

func eventCount(m kafka.Message) int {
	for _, h := range m.Headers {
		if h.Key == "sluice-events" {
			n, _ := strconv.Atoi(string(h.Value))
			return n
		}
	}
	return 0
}

func (p *Publisher) kvMessage(at time.Time, seq uint64, evs []engine.Event) (kafka.Message, error) {
	if p.cfg.KVFormat != KVFormatVLLMMsgpack {
		msg, err := KVRecord(p.cfg.ID, p.cfg.Model, p.epoch, seq, at, evs)
		msg.Topic = p.cfg.KVTopic
		return msg, err
	}
	value, err := kvBatchVLLM(at, evs)
	return kafka.Message{Topic: p.cfg.KVTopic, Key: []byte(p.cfg.ID), Value: value, Headers: append(recordHeaders(p.epoch, seq, p.cfg.Model, len(evs)),
		kafka.Header{Key: HeaderFormat, Value: []byte(FormatVLLMMsgpack)}), Time: at}, err
}

// KVRecord is one batch of an engine's KV events as the sluice.kv-events.v1 record the
// simulated engine produces in its default protobuf format (no topic set); sluice simulate
// feeds the same records to the decider's ingestion.
func KVRecord(id, model string, epoch, seq uint64, at time.Time, evs []engine.Event) (kafka.Message, error) {
	value, err := proto.Marshal(KVBatchProto(id, model, epoch, seq, at, evs))
	return kafka.Message{Key: []byte(id), Value: value, Headers: recordHeaders(epoch, seq, model, len(evs)), Time: at}, err
}

func recordHeaders(epoch, seq uint64, model string, events int) []kafka.Header {
	h := []kafka.Header{
		{Key: HeaderEpoch, Value: []byte(strconv.FormatUint(epoch, 10))},
		{Key: HeaderSeq, Value: []byte(strconv.FormatUint(seq, 10))},
		{Key: HeaderModel, Value: []byte(model)},
	}
	if events >= 0 {
		h = append(h, kafka.Header{Key: "sluice-events", Value: []byte(strconv.Itoa(events))})
	}
	return h
}

// flush writes outbox and returns what is left to retry.
func (p *Publisher) flush(ctx context.Context, outbox []kafka.Message, et *errorTicker) []kafka.Message {
	if len(outbox) == 0 {
		return outbox
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.writer.WriteMessages(wctx, outbox...); err != nil {
		p.failed.WithLabelValues(p.cfg.KVTopic).Inc()
		et.failure(err, len(outbox))
		return outbox
	}
	p.sent.WithLabelValues(p.cfg.KVTopic).Add(float64(len(outbox)))
	p.lastSuccess.WithLabelValues(p.cfg.KVTopic).SetToCurrentTime()
	et.success()
	return outbox[:0]
}

func (p *Publisher) loadLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.LoadInterval)
	defer t.Stop()
	et := newErrorTicker(p.logger, p.cfg.LoadTopic)
	var seq uint64
	for {
		seq++
		msg, err := p.loadMessage(seq)
		if err != nil {
			p.logger.Error("encode load report", slog.Any("error", err))
		} else {
			wctx, cancel := context.WithTimeout(ctx, max(2*p.cfg.LoadInterval, 2*time.Second))
			err = p.writer.WriteMessages(wctx, msg)
			cancel()
			if err != nil {
				p.failed.WithLabelValues(p.cfg.LoadTopic).Inc()
				et.failure(err, 1)
			} else {
				p.sent.WithLabelValues(p.cfg.LoadTopic).Inc()
				p.lastSuccess.WithLabelValues(p.cfg.LoadTopic).SetToCurrentTime()
				et.success()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Publisher) loadMessage(seq uint64) (kafka.Message, error) {
	msg, err := LoadRecord(p.cfg.ID, p.cfg.Model, p.epoch, seq, time.Now(), p.load())
	msg.Topic = p.cfg.LoadTopic
	return msg, err
}

// LoadRecord is an engine's load at at as the sluice.engine-load.v1 record the simulated engine
// produces (no topic set); sluice simulate feeds the same records to the decider's ingestion.
func LoadRecord(id, model string, epoch, seq uint64, at time.Time, l engine.Load) (kafka.Message, error) {
	v, err := proto.Marshal(LoadReportProto(id, epoch, seq, at, l))
	return kafka.Message{Key: []byte(id), Value: v, Time: at, Headers: recordHeaders(epoch, seq, model, -1)}, err
}

// LoadReportProto is one engine's (one DP rank's) load at at as a sluice.v1.LoadReport with
// the native extension, the value of a sluice.engine-load.v1 record (sluice simulate builds its
// records with it too).
func LoadReportProto(id string, epoch, seq uint64, at time.Time, l engine.Load) *sluicev1.LoadReport {
	return &sluicev1.LoadReport{
		EngineId: id, DpRank: 0, DpSize: 1, Epoch: epoch, Seq: seq, CapturedAt: timestamppb.New(at),
		RunningRequests: l.Running, WaitingRequests: l.Waiting,
		KvUsedTokens: l.KVUsedTokens, KvCapacityTokens: l.KVCapacityTokens,
		Native: &sluicev1.NativeLoad{
			WaitingUncachedTokens: l.WaitingUncachedTokens, TotalTokens: l.TotalTokens,
			MaxRunningRequests: l.MaxRunning, PrefillUncachedTokensTotal: l.PrefillUncachedTokensTotal,
			PrefillBusyMicrosTotal: l.PrefillBusyMicrosTotal,
		},
	}
}

// errorTicker logs the first write failure of a run of them, then at most every errorLogEvery,
// and the recovery.
type errorTicker struct {
	logger  *slog.Logger
	topic   string
	failing bool
	lastLog time.Time
	count   int
}

func newErrorTicker(logger *slog.Logger, topic string) *errorTicker {
	return &errorTicker{logger: logger, topic: topic}
}

func (t *errorTicker) failure(err error, records int) {
	t.count++
	if !t.failing || time.Since(t.lastLog) >= errorLogEvery {
		t.logger.Warn("kafka write failed; serving continues and the write is retried",
			slog.String("topic", t.topic), slog.Int("records", records), slog.Int("failures", t.count), slog.Any("error", err))
		t.lastLog = time.Now()
	}
	t.failing = true
}

func (t *errorTicker) success() {
	if t.failing {
		t.logger.Info("kafka writes recovered", slog.String("topic", t.topic), slog.Int("failures", t.count))
	}
	t.failing, t.count = false, 0
}
