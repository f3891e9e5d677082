package enginelink

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go/protocol"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// producer writes records to Kafka with acks from all in-sync replicas. It never blocks its
// callers: enqueue fails (and counts the drop) once MaxBufferedRecords records are queued or in
// flight, so a slow or unreachable broker costs bounded memory and shows up as seq gaps, never
// as a stalled ZMQ reader or a crash. Records of one key keep their order: one loop hands them
// to the writer of their kind (KV records, load reports), whose per-partition writer sends
// batches one after another. Each writer's gate holds a partition's records back while a
// request for it is unanswered, so a backlog leaves in few requests (partitionGate).
type producer struct {
	logger  *slog.Logger
	w       *kafka.Writer // KV records
	lw      *kafka.Writer // load reports (enqueueLoads): loadBatchSize, loadLinger
	kvGate  *partitionGate
	lgGate  *partitionGate
	ready   chan struct{} // a gate has records to release (cap 1)
	in      chan kafka.Message
	loadIn  chan []kafka.Message // one scrape's load reports per send
	max     int64
	batch   int
	timeout time.Duration
	m       *metrics

	buffered atomic.Int64

	perTopic sync.Map // topic -> *topicMetrics

	loadBatch []kafka.Message // Run's goroutine only
	admitted  []kafka.Message // Run's goroutine only: what a gate let through

	errMu   sync.Mutex
	errLast time.Time
	errN    int
}

type topicMetrics struct {
	produced, acked, dropFull, dropFailed, dropLarge prometheus.Counter
	latency                                          prometheus.Observer
}

func newProducer(logger *slog.Logger, cfg Config, m *metrics) *producer {
	p := &producer{
		logger:  logger.With(slog.String("component", "producer")),
		in:      make(chan kafka.Message, cfg.MaxBufferedRecords),
		loadIn:  make(chan []kafka.Message, cfg.MaxBufferedRecords), // MaxBufferedRecords bounds the records
		max:     int64(cfg.MaxBufferedRecords),
		batch:   cfg.KafkaBatchSize,
		timeout: cfg.ShutdownTimeout,
		m:       m,
		kvGate:  newPartitionGate(),
		lgGate:  newPartitionGate(),
		ready:   make(chan struct{}, 1),
	}
	codec, _ := compression(cfg.KafkaCompression) // validated
	p.w = p.writer(cfg, cfg.KafkaBatchSize, cfg.KafkaBatchTimeout, codec, p.kvGate)
	p.lw = p.writer(cfg, min(cfg.KafkaBatchSize, loadBatchSize), min(cfg.KafkaBatchTimeout, loadLinger), codec, p.lgGate)
	return p
}

// loadBatchSize bounds the load reports in one produce batch. kafka-go's writer allocates a
// batch's message slice at its full BatchSize when the batch opens: at -kafka-batch-size 2000
// that is 2000 × 152 B ≈ 300 KB cleared and collected for every batch, while a scrape's
// records (one per DP rank) go to the broker in batches of one to a few. 64 keeps that slice
// at ~10 KB and still sends a backlog of load reports 64 per request (BENCHMARKS.md,
// "Scrape cost").
const loadBatchSize = 64

// loadLinger is the load writer's BatchTimeout. A scrape's reports arrive in one call
// (enqueueLoads), so waiting -kafka-batch-timeout for more only adds a timer's wake-up per
// scrape, and on the shared 2-core machine one wake-up of an idle process costs 50-100 µs of
// CPU (BENCHMARKS.md, "Scrape cost"); reports of scrapes queued meanwhile still share the
// request.
const loadLinger = time.Microsecond

// writer is the producer's Kafka writer with batches of at most batchSize records waiting at
// most linger, compressed with codec (0: uncompressed), balanced by key through gate.
func (p *producer) writer(cfg Config, batchSize int, linger time.Duration, codec kafka.Compression, gate *partitionGate) *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(cfg.brokers()...),
		Balancer:               gate,
		RequiredAcks:           kafka.RequireAll,
		Async:                  true,
		AllowAutoTopicCreation: true,
		BatchSize:              batchSize,
		BatchBytes:             int64(cfg.KafkaMaxBatchBytes), // at most the topic's max.message.bytes
		BatchTimeout:           linger,
		// A produce batch is retried in place, which keeps each partition's order, for about
		// two minutes (backoff capped at 1s): a broker outage shorter than that loses nothing
		// while the bounded buffer (MaxBufferedRecords) holds the records arriving meanwhile;
		// only a longer outage or a full buffer drops records, which the decider then sees as
		// seq gaps.
		MaxAttempts:     writerAttempts,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: time.Second,
		WriteTimeout:    5 * time.Second,
		Compression:     codec,
		Completion: func(msgs []kafka.Message, err error) {
			p.completed(msgs, err)
			if gate.done(msgs) {
				select {
				case p.ready <- struct{}{}:
				default:
				}
			}
		},
		Transport: leaderRetry{kafka.DefaultTransport},
	}
}

// leaderRetry makes "no leader" answers temporary. While a restarted broker elects partition
// leaders, the writer's cached metadata names none and a produce fails with
// protocol.ErrNoLeader (or ErrNoPartition while a topic is being recreated), which kafka-go's
// writer does not retry: every batch in that window was dropped, and the decider saw seq gaps
// after an outage the retry budget above was meant to cover (TestOutageLinkSoak, about one run
// in six). Marked temporary, the writer retries the batch in place like any other broker error,
// refreshing metadata, in order.
type leaderRetry struct{ kafka.RoundTripper }

func (t leaderRetry) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	res, err := t.RoundTripper.RoundTrip(ctx, addr, req)
	if err != nil && (errors.Is(err, protocol.ErrNoLeader) || errors.Is(err, protocol.ErrNoPartition)) {
		err = temporaryError{err}
	}
	return res, err
}

// temporaryError is err, reported as temporary to kafka-go's retry logic.
type temporaryError struct{ error }

func (temporaryError) Temporary() bool { return true }
func (e temporaryError) Unwrap() error { return e.error }

func (p *producer) topic(t string) *topicMetrics {
	if v, ok := p.perTopic.Load(t); ok {
		return v.(*topicMetrics)
	}
	tm := &topicMetrics{
		produced:   p.m.kafkaProduced.WithLabelValues(t),
		acked:      p.m.kafkaAcked.WithLabelValues(t),
		dropFull:   p.m.kafkaDropped.WithLabelValues(t, "buffer_full"),
		dropFailed: p.m.kafkaDropped.WithLabelValues(t, "write_failed"),
		dropLarge:  p.m.kafkaDropped.WithLabelValues(t, "too_large"),
		latency:    p.m.kafkaLatency.WithLabelValues(t),
	}
	v, _ := p.perTopic.LoadOrStore(t, tm)
	return v.(*topicMetrics)
}

// enqueue queues msg (Topic and Time set: Time is when the data was received, for the latency
// histogram) and reports whether it was accepted.
func (p *producer) enqueue(msg kafka.Message) bool {
	if p.buffered.Add(1) > p.max {
		p.buffered.Add(-1)
		p.topic(msg.Topic).dropFull.Inc()
		return false
	}
	select {
	case p.in <- msg:
		return true
	default:
		p.buffered.Add(-1)
		p.topic(msg.Topic).dropFull.Inc()
		return false
	}
}

// enqueueLoads queues one scrape's load reports (as enqueue does each record) and reports how
// many were accepted: all or none. They reach the load writer in one call, so a DP engine's
// ranks share a produce request without waiting for a linger. The producer owns msgs.
func (p *producer) enqueueLoads(msgs []kafka.Message) int {
	n := int64(len(msgs))
	if n == 0 {
		return 0
	}
	if p.buffered.Add(n) > p.max {
		p.buffered.Add(-n)
		p.dropFull(msgs)
		return 0
	}
	select {
	case p.loadIn <- msgs:
		return len(msgs)
	default:
		p.buffered.Add(-n)
		p.dropFull(msgs)
		return 0
	}
}

func (p *producer) dropFull(msgs []kafka.Message) {
	for i := range msgs {
		p.topic(msgs[i].Topic).dropFull.Inc()
	}
}

// Run hands queued records to the writers until ctx is cancelled, then flushes what is queued
// within the shutdown timeout and closes the writers.
func (p *producer) Run(ctx context.Context) error {
	batch := make([]kafka.Message, 0, p.batch)
	for {
		select {
		case <-ctx.Done():
			return p.shutdown()
		case msg := <-p.in:
			batch = p.drainInto(append(batch[:0], msg))
			p.admit(ctx, p.w, p.kvGate, batch)
		case msgs := <-p.loadIn:
			p.writeLoads(ctx, msgs)
		case <-p.ready:
			p.release(ctx, false)
		}
	}
}

// admit hands the records of batch that gate lets through to w.
func (p *producer) admit(ctx context.Context, w *kafka.Writer, gate *partitionGate, batch []kafka.Message) {
	p.admitted = gate.admit(batch, p.admitted[:0])
	if len(p.admitted) > 0 {
		p.write(ctx, w, gate, p.admitted)
	}
	clear(p.admitted) // the writer holds its own copies; drop the payloads
}

// release hands the writers what the gates held back for partitions with nothing in flight,
// or everything held when all is set.
func (p *producer) release(ctx context.Context, all bool) {
	for _, s := range []struct {
		w    *kafka.Writer
		gate *partitionGate
	}{{p.w, p.kvGate}, {p.lw, p.lgGate}} {
		p.admitted = s.gate.release(p.admitted[:0], all)
		if len(p.admitted) > 0 {
			p.write(ctx, s.w, s.gate, p.admitted)
		}
		clear(p.admitted)
	}
}

// writeLoads hands msgs, and the other scrapes' reports already queued, to the load writer.
func (p *producer) writeLoads(ctx context.Context, msgs []kafka.Message) {
	load := append(p.loadBatch[:0], msgs...)
	for more := true; more && len(load) < p.batch; {
		select {
		case msgs := <-p.loadIn:
			load = append(load, msgs...)
		default:
			more = false
		}
	}
	p.admit(ctx, p.lw, p.lgGate, load)
	clear(load) // the writer holds its own copies; drop the payloads
	p.loadBatch = load[:0]
}

func (p *producer) drainInto(batch []kafka.Message) []kafka.Message {
	for len(batch) < cap(batch) {
		select {
		case msg := <-p.in:
			batch = append(batch, msg)
		default:
			return batch
		}
	}
	return batch
}

// write hands batch, which gate admitted, to the async writer; the writer keeps its own copy
// of the slice's messages. Records the writer does not take are done for the gate.
func (p *producer) write(ctx context.Context, w *kafka.Writer, gate *partitionGate, batch []kafka.Message) {
	for i := range batch {
		p.topic(batch[i].Topic).produced.Inc()
	}
	p.m.kafkaBuffered.Set(float64(p.buffered.Load()))
	// Async mode fails here only before anything is queued (metadata lookups, closed writer), so
	// the whole batch can be retried: a topic being auto-created answers UnknownTopicOrPartition
	// or LeaderNotAvailable for a moment. Meanwhile new records wait in the bounded buffer.
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := w.WriteMessages(ctx, batch...)
		if err == nil {
			return
		}
		// One record above -kafka-max-batch-bytes fails the whole call: drop that one, counted,
		// and send the others.
		var big kafka.MessageTooLargeError
		if errors.As(err, &big) {
			p.tooLarge(big.Message)
			gate.done([]kafka.Message{big.Message})
			if batch = big.Remaining; len(batch) == 0 {
				return
			}
			continue
		}
		if attempt >= writeAttempts || !retriable(err) || ctx.Err() != nil {
			p.failed(batch, err)
			gate.done(batch)
			return
		}
		sleep(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// writerAttempts bounds the writer's attempts at one produce batch (about two minutes at the
// 1 s back-off cap).
const writerAttempts = 120

// writeAttempts bounds the retries of one batch the writer did not accept.
const writeAttempts = 8

func retriable(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke.Temporary()
	}
	return false
}

// completed is the writer's Completion callback: one call per produced batch.
func (p *producer) completed(msgs []kafka.Message, err error) {
	if err != nil {
		p.failed(msgs, err)
		return
	}
	now := time.Now()
	for i := range msgs {
		tm := p.topic(msgs[i].Topic)
		tm.acked.Inc()
		if !msgs[i].Time.IsZero() {
			tm.latency.Observe(now.Sub(msgs[i].Time).Seconds())
		}
	}
	p.buffered.Add(-int64(len(msgs)))
	p.m.kafkaLastAck.Set(float64(now.UnixNano()) / 1e9)
	p.errMu.Lock()
	if p.errN > 0 {
		p.logger.Info("kafka writes recovered", slog.Int("failed_batches", p.errN))
		p.errN = 0
	}
	p.errMu.Unlock()
}

// tooLarge drops one record above the produce size bound and says what to change.
func (p *producer) tooLarge(msg kafka.Message) {
	p.topic(msg.Topic).dropLarge.Inc()
	p.buffered.Add(-1)
	p.logger.Warn("record larger than -kafka-max-batch-bytes dropped (the decider sees the KV seq gap); raise -kafka-max-batch-bytes and the topic's max.message.bytes together to carry it",
		slog.String("topic", msg.Topic), slog.String("key", string(msg.Key)), slog.Int("bytes", len(msg.Value)+len(msg.Key)))
}

func (p *producer) failed(msgs []kafka.Message, err error) {
	for i := range msgs {
		p.topic(msgs[i].Topic).dropFailed.Inc()
	}
	p.buffered.Add(-int64(len(msgs)))
	p.errMu.Lock()
	defer p.errMu.Unlock()
	p.errN++
	if p.errN == 1 || time.Since(p.errLast) >= logEvery {
		p.errLast = time.Now()
		p.logger.Warn("kafka write failed; records dropped (the decider sees the KV seq gap)",
			slog.Int("records", len(msgs)), slog.Int("failed_batches", p.errN), slog.Any("error", err))
	}
}

// shutdown sends what is still queued and closes the writer, bounded by the shutdown timeout.
func (p *producer) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	batch := make([]kafka.Message, 0, p.batch)
	for {
		batch = p.drainInto(batch[:0])
		if len(batch) == 0 {
			break
		}
		p.admit(ctx, p.w, p.kvGate, batch)
	}
	for more := true; more; {
		select {
		case msgs := <-p.loadIn:
			p.writeLoads(ctx, msgs)
		default:
			more = false
		}
	}
	// What the gates hold goes behind what is in flight: the writer keeps each partition's
	// order, so nothing needs to wait for an answer now.
	p.release(ctx, true)
	done := make(chan error, 1)
	go func() {
		var errs []error
		for _, w := range []*kafka.Writer{p.w, p.lw} {
			if err := w.Close(); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		p.logger.Warn("kafka writer did not drain before the shutdown timeout; unsent records are lost",
			slog.Int64("records", p.buffered.Load()), slog.Duration("timeout", p.timeout))
		return nil
	}
}

// healthy reports whether the last produce succeeded (or none failed yet).
func (p *producer) healthy() bool {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.errN == 0
}
