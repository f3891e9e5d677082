package enginelink

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Record header names, as components/kvwire reads them.
const (
	HeaderFormat    = "sluice-format"
	HeaderEpoch     = "sluice-epoch"
	HeaderSeq       = "sluice-seq"
	HeaderModel     = "sluice-model"
	HeaderDPRank    = "sluice-dp-rank"
	HeaderLoRA      = "sluice-lora"
	HeaderCacheSalt = "sluice-cache-salt"
)

// batch is one engine message: a live [topic, seq, payload] or one replayed batch.
type batch struct {
	seq     uint64
	payload []byte
	at      time.Time // when the link received it
}

// replayer fetches an engine rank's buffered batches with seq >= from, in seq order.
type replayer interface {
	replay(ctx context.Context, endpoint string, from uint64) ([]batch, error)
}

// kvStream sequences one (engine, DP rank): it forwards batches in strict seq order, fills
// gaps through the replay socket, and tracks restarts. Not safe for concurrent use: one
// goroutine (the rank's feeder) owns it.
type kvStream struct {
	logger   *slog.Logger
	id       string
	rank     int
	epochs   *engineEpoch
	replayEP string // the rank's replay endpoint; empty: gaps cannot be filled
	replayer replayer
	replayTO time.Duration
	enqueue  func(kafka.Message) bool
	topic    func() string // the KV topic of the engine's model's shard, per record
	key      []byte
	headers  []kafka.Header // static headers; epoch and seq are added per record

	epoch    uint64 // epoch of the records this stream forwards
	next     uint64 // next seq to forward in epoch
	haveLive bool   // lastLive is set
	lastLive uint64 // seq of the last live batch, to detect restarts

	lastPayload []byte // payload of the last forwarded batch, to recognise it in a replay

	m streamMetrics
}

type streamMetrics struct {
	received, live, replayed, duplicates prometheus.Counter
	lastBatch                            prometheus.Gauge
	all                                  *metrics
}

func newKVStream(logger *slog.Logger, spec EngineSpec, rank int, epochs *engineEpoch, rp replayer, replayTO time.Duration,
	kvTopic func() string, enqueue func(kafka.Message) bool, m *metrics) *kvStream {
	s := &kvStream{
		logger:   logger.With(slog.String("engine_id", spec.ID), slog.Int("dp_rank", rank)),
		id:       spec.ID,
		rank:     rank,
		epochs:   epochs,
		replayer: rp,
		replayTO: replayTO,
		enqueue:  enqueue,
		topic:    kvTopic,
		key:      []byte(spec.ID),
		headers: []kafka.Header{
			{Key: HeaderFormat, Value: []byte(spec.format())},
			{Key: HeaderModel, Value: []byte(spec.Model)},
			{Key: HeaderDPRank, Value: []byte(strconv.Itoa(rank))},
		},
		m: streamMetrics{
			received:   m.kvReceived.WithLabelValues(spec.ID),
			live:       m.kvForwarded.WithLabelValues(spec.ID, "live"),
			replayed:   m.kvForwarded.WithLabelValues(spec.ID, "replay"),
			duplicates: m.kvDuplicates.WithLabelValues(spec.ID),
			lastBatch:  m.kvLastBatch.WithLabelValues(spec.ID),
			all:        m,
		},
	}
	if spec.KVReplayEndpoint != "" {
		s.replayEP, _ = rankEndpoint(spec.KVReplayEndpoint, rank) // validated with the spec
	}
	if spec.LoRAName != "" {
		s.headers = append(s.headers, kafka.Header{Key: HeaderLoRA, Value: []byte(spec.LoRAName)})
	}
	if spec.CacheSalt != "" {
		s.headers = append(s.headers, kafka.Header{Key: HeaderCacheSalt, Value: []byte(spec.CacheSalt)})
	}
	return s
}

// adopt follows the engine's current epoch; a new one starts the stream afresh (seq 0).
func (s *kvStream) adopt() {
	if e, _ := s.epochs.current(); e != s.epoch {
		s.epoch, s.next, s.haveLive, s.lastPayload = e, 0, false, nil
	}
}

// fresh reports whether nothing was forwarded in the current epoch.
func (s *kvStream) fresh() bool { return s.next == 0 }

// handleLive processes one live batch.
func (s *kvStream) handleLive(ctx context.Context, b batch) {
	s.m.received.Inc()
	s.m.lastBatch.Set(float64(b.at.UnixNano()) / 1e9)
	s.adopt()
	if s.haveLive && b.seq <= s.lastLive {
		s.newEpoch(b.seq, "its seq went backwards")
	}
	if b.seq < s.next {
		s.haveLive, s.lastLive = true, b.seq
		s.m.duplicates.Inc() // already forwarded by a replay
		return
	}
	if b.seq > s.next {
		s.fill(ctx, b.seq) // may find a restart and start a new epoch
	}
	s.haveLive, s.lastLive = true, b.seq
	s.forward(b, s.m.live)
}

// fill replays the missing batches [next, until) when it can, and counts what stays missing.
//
// The replay is asked from the last forwarded seq, to check it still is the same engine process:
// when the engine holds another payload under that seq it restarted without the link seeing its
// seq go backwards (the new process got past the old seq while batches were lost), and the gap
// is the start of a new epoch, replayed from 0.
func (s *kvStream) fill(ctx context.Context, until uint64) {
	var replayed uint64
	if s.replayEP != "" {
		from, verify := s.next, !s.fresh()
		if verify {
			from--
		}
		bs, ok := s.replayFrom(ctx, from)
		if ok && verify && len(bs) > 0 && bs[0].seq == from && !bytes.Equal(bs[0].payload, s.lastPayload) {
			s.newEpoch(until, "its replay buffer holds another batch under the last forwarded seq")
			bs, _ = s.replayFrom(ctx, 0)
		}
		s.countGap()
		from = s.next
		replayed = s.forwardRange(bs, until)
		s.countMissing(from, until, replayed)
		return
	}
	s.countGap()
	s.countMissing(s.next, until, 0)
}

func (s *kvStream) gapKind() string {
	if s.fresh() {
		return "epoch_start"
	}
	return "seq_jump"
}

func (s *kvStream) countGap() { s.m.all.kvGaps.WithLabelValues(s.id, s.gapKind()).Inc() }

// countMissing counts and logs the outcome of a gap [from, until) of which replayed were filled.
func (s *kvStream) countMissing(from, until, replayed uint64) {
	kind := "seq_jump"
	if from == 0 {
		kind = "epoch_start"
	}
	if replayed > 0 {
		s.m.all.kvGapBatches.WithLabelValues(s.id, kind, "replayed").Add(float64(replayed))
	}
	if lost := until - from - replayed; lost > 0 {
		s.m.all.kvGapBatches.WithLabelValues(s.id, kind, "unrecovered").Add(float64(lost))
		level := slog.LevelWarn
		if kind == "epoch_start" {
			level = slog.LevelInfo // history from before the link followed this engine process
		}
		s.logger.Log(context.Background(), level, "KV batches missing and not replayable: forwarding the seq jump so the decider marks the engine uncertain",
			slog.String("kind", kind), slog.Uint64("from_seq", from), slog.Uint64("until_seq", until),
			slog.Uint64("lost", lost), slog.Bool("replay_configured", s.replayEP != ""))
	}
}

// forwardRange forwards the batches of bs in [next, until) (until 0: no upper bound) in order
// and returns how many it forwarded.
func (s *kvStream) forwardRange(bs []batch, until uint64) uint64 {
	var n uint64
	for _, b := range bs {
		if b.seq < s.next || (until > 0 && b.seq >= until) {
			continue
		}
		s.forward(b, s.m.replayed)
		n++
	}
	return n
}

// resync runs when the link (re)connects to the rank or the engine's epoch changed: it replays
// everything the engine still buffers from the next seq (0 in a new epoch), so a new epoch
// starts complete and a reconnect loses nothing the engine can replay.
//
// After a reconnect the engine may have restarted without the link seeing its seq go backwards
// (the new process may already be past the old seq). The replay tells: it is asked from the last
// forwarded seq, and the engine restarted when it no longer has that batch or has another
// payload under that seq. Then a new epoch is minted and replayed from 0.
func (s *kvStream) resync(ctx context.Context, reconnect bool) {
	s.adopt()
	if s.replayEP == "" {
		return
	}
	from := s.next
	if reconnect && !s.fresh() {
		from = s.next - 1
	}
	bs, ok := s.replayFrom(ctx, from)
	if !ok {
		return
	}
	if reconnect && !s.fresh() && (len(bs) == 0 || bs[0].seq < from || bs[0].seq == from && !bytes.Equal(bs[0].payload, s.lastPayload)) {
		s.newEpoch(from, "its replay buffer no longer holds the last forwarded batch")
		if bs, ok = s.replayFrom(ctx, 0); !ok {
			return
		}
	}
	if len(bs) > 0 && bs[0].seq > s.next {
		s.countGap()
		s.countMissing(s.next, bs[0].seq, 0)
	}
	n := s.forwardRange(bs, 0)
	s.logger.Debug("KV resync replayed", slog.Uint64("from_seq", from), slog.Uint64("batches", n))
}

// replayFrom asks for the batches from seq on; ok is false (and logged) when the request failed.
func (s *kvStream) replayFrom(ctx context.Context, from uint64) ([]batch, bool) {
	rctx, cancel := context.WithTimeout(ctx, s.replayTO)
	defer cancel()
	bs, err := s.replayer.replay(rctx, s.replayEP, from)
	if err != nil {
		s.m.all.kvReplays.WithLabelValues(s.id, "error").Inc()
		s.logger.Warn("KV replay failed; what it could not fill stays a visible seq gap",
			slog.String("endpoint", s.replayEP), slog.Uint64("from_seq", from), slog.Any("error", err))
		return nil, false
	}
	s.m.all.kvReplays.WithLabelValues(s.id, "ok").Inc()
	return bs, true
}

// newEpoch records an engine restart: the stream starts over at seq 0 in a new epoch (shared
// with the engine's other ranks, which resync on their own).
func (s *kvStream) newEpoch(seq uint64, why string) {
	old := s.epoch
	epoch, minted := s.epochs.restart(s.epoch)
	if minted {
		s.m.all.kvEpochs.WithLabelValues(s.id, "restart").Inc()
		s.logger.Info("engine restarted: new epoch", slog.String("evidence", why),
			slog.Uint64("seq", seq), slog.Uint64("last_seq", s.lastLive),
			slog.Uint64("old_epoch", old), slog.Uint64("epoch", epoch))
	}
	s.epoch, s.next, s.haveLive, s.lastPayload = epoch, 0, false, nil
}

// forward hands one batch to the producer and advances next.
func (s *kvStream) forward(b batch, c prometheus.Counter) {
	h := make([]kafka.Header, len(s.headers), len(s.headers)+2)
	copy(h, s.headers)
	h = append(h,
		kafka.Header{Key: HeaderEpoch, Value: strconv.AppendUint(nil, s.epoch, 10)},
		kafka.Header{Key: HeaderSeq, Value: strconv.AppendUint(nil, b.seq, 10)})
	s.enqueue(kafka.Message{Topic: s.topic(), Key: s.key, Value: b.payload, Headers: h, Time: b.at})
	c.Inc()
	s.next, s.lastPayload = b.seq+1, b.payload
}
