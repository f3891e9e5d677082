package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// ErrNotRunning is returned by Healthy before Run starts and after it returns.
var ErrNotRunning = errors.New("ingest: not running")

// stream is the consumer machinery one component is built on: it discovers
// the topic's partitions, runs one kafka-go partition reader per partition
// (no consumer group), and applies every record once, in partition order,
// under one writer lock shared with snapshot capture.
type stream struct {
	logger *slog.Logger
	cfg    Config
	name   string
	m      *metrics
	bad    *badLog
	// apply decodes and applies one record. It is called with mu held and
	// must not block on I/O.
	apply func(p int, msg *kafka.Message)
	// applied, when set (benchmarks), is called after each record applies.
	applied func(msg *kafka.Message)

	mu   sync.Mutex
	next map[int]int64 // partition -> next offset to apply; absent = from the earliest retained
	// changes counts the changes to the stream's state: records applied
	// (every record that advances next, bad ones too) and changes made
	// outside records (KVIngester.RemoveEngine). A snapshot whose counts
	// equal the last written one's would write the same state; it is skipped.
	changes uint64

	running      atomic.Bool
	lastRecord   atomic.Int64 // Kafka timestamp (Unix ns) of the last record applied
	failingSince atomic.Int64 // Unix ns of the first failure since the last success; 0 when fine
	partitions   atomic.Int32 // partitions being consumed
}

func newStream(logger *slog.Logger, cfg Config, name string, reg prometheus.Registerer) (*stream, error) {
	s := &stream{logger: logger, cfg: cfg, name: name, next: map[int]int64{}}
	m, err := newMetrics(reg, name, s.lastRecordTime)
	if err != nil {
		return nil, fmt.Errorf("ingest: register %s metrics: %w", name, err)
	}
	s.m = m
	s.bad = newBadLog(logger, name, cfg.BadLogInterval)
	return s, nil
}

func (s *stream) lastRecordTime() time.Time {
	if n := s.lastRecord.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// badRecord counts and (rate-limited) logs one bad record or event.
func (s *stream) badRecord(kind string, p int, offset int64, err error) {
	s.m.bad.WithLabelValues(kind).Inc()
	s.bad.record(kind, p, offset, err)
}

// setOffsets sets where each partition starts: the next offset to read. It
// must be called before run.
func (s *stream) setOffsets(next map[int]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = maps.Clone(next)
	if s.next == nil {
		s.next = map[int]int64{}
	}
}

// offsets returns a copy of the next offset per partition applied so far.
func (s *stream) offsets() map[int]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.next)
}

// capture runs fn with application paused and returns the offsets that the
// state fn sees covers (the next offset to read per partition), the change
// count of that state and how long application was paused. fn must only
// copy state to memory: every record waits while it runs.
func (s *stream) capture(fn func() error) (map[int]int64, uint64, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t0 := time.Now()
	if err := fn(); err != nil {
		return nil, 0, time.Since(t0), err
	}
	next := maps.Clone(s.next)
	return next, s.changes, time.Since(t0), nil
}

// changeCount returns the stream's change count (see stream.changes).
func (s *stream) changeCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes
}

// handle applies msg unless its offset was applied already (a refetch after
// a reconnect), and advances the partition's next offset.
func (s *stream) handle(p int, msg *kafka.Message, lag prometheus.Gauge) {
	s.m.records.Inc()
	s.m.bytes.Add(float64(len(msg.Value)))
	s.mu.Lock()
	if next, ok := s.next[p]; ok && next >= 0 && msg.Offset < next {
		s.mu.Unlock()
		return
	}
	t0 := time.Now()
	if len(msg.Value) > s.cfg.MaxRecordBytes {
		s.badRecord("absurd_size", p, msg.Offset, fmt.Errorf("record value of %d bytes exceeds MaxRecordBytes %d", len(msg.Value), s.cfg.MaxRecordBytes))
	} else {
		s.apply(p, msg)
	}
	s.next[p] = msg.Offset + 1
	s.changes++
	s.mu.Unlock()
	s.m.apply.Observe(time.Since(t0).Seconds())
	if !msg.Time.IsZero() {
		s.lastRecord.Store(msg.Time.UnixNano())
		s.m.delay.Observe(time.Since(msg.Time).Seconds())
	}
	lag.Set(float64(max(msg.HighWaterMark-msg.Offset-1, 0)))
	if s.applied != nil {
		s.applied(msg)
	}
}

func (s *stream) ok() {
	s.failingSince.Store(0)
	s.m.reachable.Set(1)
}

func (s *stream) fail() {
	s.failingSince.CompareAndSwap(0, time.Now().UnixNano())
	s.m.reachable.Set(0)
}

// jitter returns a wait in [d/2, d] so that replicas retrying after a
// shared outage do not hit the brokers in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1) //nolint:gosec // timing jitter, not security
}

// watch probes the brokers every HealthInterval for the high watermark of
// every partition being consumed, until ctx ends. A probe that answers marks
// the stream reachable and sets each partition's lag from the broker's
// numbers; one that fails marks it failing. kafka-go's readers retry broker
// errors internally and would otherwise leave a lost broker invisible: they
// block in FetchMessage instead of returning an error.
func (s *stream) watch(ctx context.Context, c *kafka.Client, partitions func() []int) {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids := partitions()
		if len(ids) == 0 {
			continue
		}
		hwm, err := s.highWatermarks(ctx, c, ids)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if s.failingSince.Load() == 0 {
				s.logger.Warn("brokers do not answer; the tables stop receiving updates until they return",
					"stream", s.name, "topic", s.cfg.Topic, "error", err)
			}
			s.fail()
			continue
		}
		if s.failingSince.Load() != 0 {
			s.logger.Info("brokers answer again", "stream", s.name, "topic", s.cfg.Topic)
		}
		s.ok()
		s.mu.Lock()
		for p, end := range hwm {
			next, ok := s.next[p]
			if !ok || next < 0 {
				next = 0
			}
			s.m.lag.WithLabelValues(strconv.Itoa(p)).Set(float64(max(end-next, 0)))
		}
		s.mu.Unlock()
	}
}

// highWatermarks asks the brokers for the next offset to be written in each
// partition.
func (s *stream) highWatermarks(ctx context.Context, c *kafka.Client, ids []int) (map[int]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout+s.cfg.MaxWait)
	defer cancel()
	req := make([]kafka.OffsetRequest, len(ids))
	for i, p := range ids {
		req[i] = kafka.LastOffsetOf(p)
	}
	resp, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.cfg.Topic: req}})
	if err != nil {
		return nil, fmt.Errorf("list offsets of %q: %w", s.cfg.Topic, err)
	}
	out := make(map[int]int64, len(ids))
	for _, po := range resp.Topics[s.cfg.Topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("list offsets of %q partition %d: %w", s.cfg.Topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out, nil
}

// healthy reports ErrNotRunning, or an error when the stream has been unable
// to reach the brokers for longer than UnhealthyAfter.
func (s *stream) healthy() error {
	if !s.running.Load() {
		return fmt.Errorf("%s: %w", s.name, ErrNotRunning)
	}
	if since := s.failingSince.Load(); since != 0 {
		if d := time.Since(time.Unix(0, since)); d > s.cfg.UnhealthyAfter {
			return fmt.Errorf("ingest %s: cannot read topic %q from %v for %v", s.name, s.cfg.Topic, s.cfg.Brokers, d.Round(time.Second))
		}
	}
	return nil
}

func (s *stream) client() *kafka.Client {
	return &kafka.Client{
		Addr:    kafka.TCP(s.cfg.Brokers...),
		Timeout: s.cfg.DialTimeout + s.cfg.MaxWait,
		Transport: &kafka.Transport{
			ClientID:    s.cfg.ClientID,
			DialTimeout: s.cfg.DialTimeout,
			MetadataTTL: time.Second,
		},
	}
}

// listPartitions returns the topic's partition ids, sorted.
func (s *stream) listPartitions(ctx context.Context, c *kafka.Client) ([]int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout+s.cfg.MaxWait)
	defer cancel()
	resp, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{s.cfg.Topic}})
	if err != nil {
		return nil, fmt.Errorf("list partitions of %q: %w", s.cfg.Topic, err)
	}
	for _, t := range resp.Topics {
		if t.Name != s.cfg.Topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("list partitions of %q: %w", s.cfg.Topic, t.Error)
		}
		ids := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		return ids, nil
	}
	return nil, fmt.Errorf("list partitions of %q: topic not in metadata response", s.cfg.Topic)
}

// run consumes every partition until ctx ends, picking up new partitions
// every PartitionRefresh. Broker errors never end it: they are logged,
// backed off and retried. It returns ctx's error once every reader stopped.
func (s *stream) run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("ingest %s: Run called twice", s.name)
	}
	defer s.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		s.partitions.Store(0)
	}()
	c := s.client()
	defer c.Transport.(*kafka.Transport).CloseIdleConnections()
	var startedMu sync.Mutex
	started := map[int]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watch(ctx, c, func() []int {
			startedMu.Lock()
			defer startedMu.Unlock()
			return slices.Sorted(maps.Keys(started))
		})
	}()
	backoff := s.cfg.RetryBackoff
	for {
		wait := s.cfg.PartitionRefresh
		ids, err := s.listPartitions(ctx, c)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			s.fail()
			s.logger.Warn("cannot list partitions; retrying", "stream", s.name, "topic", s.cfg.Topic, "backoff", backoff, "error", err)
			wait, backoff = backoff, min(backoff*2, s.cfg.MaxRetryBackoff)
		default:
			s.ok()
			backoff = s.cfg.RetryBackoff
			startedMu.Lock()
			for _, p := range ids {
				if started[p] {
					continue
				}
				started[p] = true
				s.partitions.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.consume(ctx, p, -1)
				}()
			}
			startedMu.Unlock()
			if len(ids) == 0 {
				wait = min(wait, s.cfg.RetryBackoff)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(jitter(wait)):
		}
	}
}

// drain consumes each partition in until from its next offset up to (not
// including) until[p], then returns; partitions already there are skipped.
func (s *stream) drain(ctx context.Context, until map[int]int64) error {
	var wg sync.WaitGroup
	for p, end := range until {
		s.mu.Lock()
		next, ok := s.next[p]
		s.mu.Unlock()
		if ok && next >= end {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.consume(ctx, p, end)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// consume reads partition p from its next offset until ctx ends, or, when
// until >= 0, until the next offset reaches until. A failing reader is
// closed and reopened at the next unapplied offset after a backoff, so
// nothing is skipped or applied twice.
func (s *stream) consume(ctx context.Context, p int, until int64) {
	lag := s.m.lag.WithLabelValues(strconv.Itoa(p))
	backoff := s.cfg.RetryBackoff
	for ctx.Err() == nil {
		s.mu.Lock()
		start, ok := s.next[p]
		s.mu.Unlock()
		if !ok || start < 0 {
			start = kafka.FirstOffset
		}
		if until >= 0 && start >= until {
			return
		}
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:     s.cfg.Brokers,
			Topic:       s.cfg.Topic,
			Partition:   p,
			MinBytes:    s.cfg.MinBytes,
			MaxBytes:    s.cfg.MaxBytes,
			MaxWait:     s.cfg.MaxWait + readerAnswerAllowance,
			StartOffset: kafka.FirstOffset,
			// The reader reconnects by itself after broker errors; cap its
			// back-off so consumption resumes soon after the broker returns.
			ReadBackoffMin: s.cfg.RetryBackoff,
			ReadBackoffMax: s.cfg.MaxRetryBackoff,
			Dialer:         &kafka.Dialer{ClientID: s.cfg.ClientID, Timeout: s.cfg.DialTimeout, DualStack: true},
			ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
				s.logger.Debug("kafka reader: "+fmt.Sprintf(format, args...), "stream", s.name, "partition", p)
			}),
		})
		err := r.SetOffset(start)
		for err == nil {
			var msg kafka.Message
			msg, err = r.FetchMessage(ctx)
			if err != nil {
				break
			}
			s.ok()
			backoff = s.cfg.RetryBackoff
			s.handle(p, &msg, lag)
			if until >= 0 && msg.Offset+1 >= until {
				_ = r.Close()
				return
			}
		}
		_ = r.Close()
		if ctx.Err() != nil {
			return
		}
		s.fail()
		s.logger.Warn("partition reader failed; reopening", "stream", s.name, "topic", s.cfg.Topic,
			"partition", p, "backoff", backoff, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, s.cfg.MaxRetryBackoff)
	}
}

// readerAnswerAllowance is added to MaxWait in each partition reader's config. kafka-go's reader
// uses its MaxWait as the client's read deadline for a fetch and asks the broker to hold an idle
// fetch for that deadline minus a round-trip allowance of min(1 s, MaxWait/4). With MaxWait 100 ms
// the broker answered an idle partition after 75 ms and the client gave up 25 ms later: on a busy
// host the answer was often later than that, the reader closed the connection ("i/o timeout") and
// dialled again, and the records produced meanwhile waited for the reconnect (ingest lag p99 of
// 100-1,400 ms on a loaded host, 12-40 ms with the allowance; BENCHMARKS.md, "Model shards on one
// machine"). With MaxWait + 1 s the broker holds the fetch for MaxWait, as the field's doc says,
// and the answer has a whole second to arrive. A partition with data is answered at once either way.
const readerAnswerAllowance = time.Second

// feed applies msg as the next record of partition 0, through the same size check, apply and
// bookkeeping as a record read from Kafka. It is for in-process feeds with no broker (a
// virtual-time replay); it must not be mixed with run.
func (s *stream) feed(msg kafka.Message) {
	s.mu.Lock()
	msg.Offset = s.next[0]
	msg.HighWaterMark = msg.Offset + 1
	s.mu.Unlock()
	s.handle(0, &msg, s.m.lag.WithLabelValues("0"))
}
