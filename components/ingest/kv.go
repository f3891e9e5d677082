package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/components/kvwire"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// KVIngester consumes the KV-event topic into the prefix index, enforcing
// the epoch/seq rules per (engine, rank) (README.md, docs/kv-events.md): a
// record of an older epoch is ignored; a newer epoch clears the holder
// before its events apply, and is uncertain when its first seq is past the
// format's first (0 for msgpack, 1 for protobuf); a msgpack seq that
// returns to 0 after a higher one is an engine restart within the epoch and
// clears the holder too; any other seq at or below the last applied one is
// a duplicate and skipped (so a replayed record never changes the index
// twice); a seq gap marks the holder uncertain until its next
// AllBlocksCleared or new epoch.
type KVIngester struct {
	s             *stream
	slots         *slots.Table
	defaultFormat string
	onNewEpoch    func(engine string, epoch uint64)

	index   atomic.Pointer[indexBox]   // replaced only by a restore before Run
	holders map[holderKey]*holderState // guarded by s.mu
	stats   KVStats                    // guarded by s.mu
	// dec decodes each record in the buffers of the last (guarded by s.mu):
	// a record is applied before the next is decoded, and neither the
	// ingester nor the index keeps its slices (KVIndex).
	dec kvwire.Decoder

	umu       sync.RWMutex
	uncertain map[string]int // engine id -> uncertain ranks; guarded by umu
	nUncert   int            // guarded by umu
}

type indexBox struct{ KVIndex }

type holderKey struct {
	engine string
	rank   int32
}

// holderState is what the ingester knows of one (engine, rank): its current
// epoch, the last seq applied in it and whether a gap was seen since the
// last full state.
type holderState struct {
	Epoch     uint64 `json:"epoch"`
	Seq       uint64 `json:"seq"`
	Uncertain bool   `json:"uncertain,omitempty"`
}

// KVStats counts what the ingester applied since it was created.
type KVStats struct {
	Batches        int64 // records applied
	BlocksStored   int64 // blocks in applied BlockStored events
	BlocksRemoved  int64 // blocks in applied BlockRemoved events
	Cleared        int64 // AllBlocksCleared events applied
	EpochResets    int64 // holders cleared because a newer epoch arrived
	SeqResets      int64 // holders cleared because a msgpack seq returned to 0 (restart)
	Gaps           int64 // seq gaps seen (a new epoch starting past its first seq included)
	StaleEpoch     int64 // records of an older epoch, ignored
	Duplicates     int64 // records with seq <= last applied, skipped
	IgnoredEvents  int64 // events of KV-cache groups the index does not keep (sliding window, mamba)
	UnknownMedium  int64 // events naming a medium sluice does not know (applied in a tier of its own)
	RejectedEvents int64 // events the index rejected or the decoder skipped
}

// KVConfig is Config plus the KV stream's own settings.
type KVConfig struct {
	Config
	// DefaultFormat is the payload format of records without the
	// sluice-format header; empty selects kvwire.FormatProto.
	DefaultFormat string
	// OnNewEpoch, when set, is called (under the stream's writer lock; it must not block) when
	// an engine rank already seen moves to a newer epoch — the engine restarted — so other
	// tables can drop what they hold from its previous life.
	OnNewEpoch func(engine string, epoch uint64)
}

// NewKVIngester returns a KV-stream consumer feeding index. Engine ids are
// interned in slots (the slot table shared with the registry and load
// table). Metrics are registered on reg. It starts no goroutines; call Run.
func NewKVIngester(logger *slog.Logger, cfg KVConfig, index KVIndex, slotTable *slots.Table, reg prometheus.Registerer) (*KVIngester, error) {
	if logger == nil || index == nil || slotTable == nil || reg == nil {
		return nil, errors.New("ingest: NewKVIngester: nil logger, index, slots table or registerer")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.DefaultFormat {
	case "", kvwire.FormatProto, kvwire.FormatVLLMMsgpack, kvwire.FormatSGLangMsgpack:
	default:
		return nil, fmt.Errorf("ingest: DefaultFormat %q: want %s, %s or %s", cfg.DefaultFormat, kvwire.FormatProto, kvwire.FormatVLLMMsgpack, kvwire.FormatSGLangMsgpack)
	}
	c := cfg.withDefaults(DefaultKVTopic)
	s, err := newStream(logger, c, StreamKV, reg)
	if err != nil {
		return nil, err
	}
	k := &KVIngester{s: s, slots: slotTable, defaultFormat: cfg.DefaultFormat, onNewEpoch: cfg.OnNewEpoch,
		holders: map[holderKey]*holderState{}, uncertain: map[string]int{}}
	k.index.Store(&indexBox{index})
	s.apply = k.apply
	return k, nil
}

// Run consumes every partition of the topic until ctx ends and returns
// ctx's error. Broker failures never end it: readers reconnect by themselves.
func (k *KVIngester) Run(ctx context.Context) error { return k.s.run(ctx) }

// Apply applies one KV record (value and headers as on the topic, keyed by engine id) exactly
// as a record read from the topic: kvwire decoding, the epoch/seq rules, index apply, metrics.
// It is the entry point of in-process feeds without Kafka (sluice simulate); do not call it
// beside Run.
func (k *KVIngester) Apply(msg kafka.Message) { k.s.feed(msg) }

// Healthy returns nil while Run runs and the brokers are reachable, else an
// error saying why.
func (k *KVIngester) Healthy() error { return k.s.healthy() }

// Offsets returns the next offset to read per partition.
func (k *KVIngester) Offsets() map[int]int64 { return k.s.offsets() }

// Index returns the index the ingester feeds. After a snapshot restore it
// is the restored index: callers wire it after Snapshotter.Restore.
func (k *KVIngester) Index() KVIndex { return k.index.Load().KVIndex }

// Uncertain reports whether any rank of the engine has an unresolved seq
// gap, so its residency in the index may be incomplete or stale. It is safe
// for concurrent use and does not wait for the writer.
func (k *KVIngester) Uncertain(engine string) bool {
	k.umu.RLock()
	defer k.umu.RUnlock()
	return k.uncertain[engine] > 0
}

// Stats returns the counters so far.
func (k *KVIngester) Stats() KVStats {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	return k.stats
}

// RemoveEngine drops an engine (every rank) from the index and forgets its
// epoch and seq, as when it leaves the registry; its next record starts
// afresh.
func (k *KVIngester) RemoveEngine(id string) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.s.changes++
	for hk, st := range k.holders {
		if hk.engine == id {
			k.setUncertain(hk, st, false)
			delete(k.holders, hk)
		}
	}
	if s, ok := k.slots.Lookup(id); ok {
		k.Index().RemoveEngine(s)
	}
}

// setUncertain flips st's flag and the exported views of it.
func (k *KVIngester) setUncertain(hk holderKey, st *holderState, v bool) {
	if st.Uncertain == v {
		return
	}
	st.Uncertain = v
	k.umu.Lock()
	if v {
		k.uncertain[hk.engine]++
		k.nUncert++
	} else {
		if k.uncertain[hk.engine]--; k.uncertain[hk.engine] <= 0 {
			delete(k.uncertain, hk.engine)
		}
		k.nUncert--
	}
	n := k.nUncert
	k.umu.Unlock()
	k.s.m.uncertain.Set(float64(n))
}

func (k *KVIngester) apply(p int, msg *kafka.Message) {
	rec, rerr := k.dec.DecodeRecord(msg, k.defaultFormat)
	if rerr != nil {
		k.s.badRecord(rerr.Kind, p, msg.Offset, rerr.Err)
		return
	}
	k.applyRecord(p, msg.Offset, &rec)
}

// applyRecord applies one decoded record under the epoch/seq rules. k.s.mu
// must be held.
func (k *KVIngester) applyRecord(p int, offset int64, rec *kvwire.Record) {
	idx := k.Index()
	hk := holderKey{rec.Engine, rec.Rank}
	h := Holder{Engine: k.slots.Intern(rec.Engine), Rank: rec.Rank}
	st := k.holders[hk]
	switch {
	case st == nil:
		st = &holderState{Epoch: rec.Epoch}
		k.holders[hk] = st
	case rec.Epoch < st.Epoch:
		k.stats.StaleEpoch++
		k.s.m.skipped.WithLabelValues("stale_epoch").Inc()
		return
	case rec.Epoch > st.Epoch:
		idx.Clear(h)
		k.stats.EpochResets++
		k.setUncertain(hk, st, false)
		st.Epoch = rec.Epoch
		if k.onNewEpoch != nil {
			k.onNewEpoch(rec.Engine, rec.Epoch)
		}
		if rec.Seq > rec.FirstSeq {
			// The new life's first batches never arrived.
			k.gap(hk, st, rec, rec.FirstSeq)
		}
	case rec.Seq == 0 && rec.FirstSeq == 0 && st.Seq > 0:
		// The ZMQ publisher restarted (its seq starts at 0) without the
		// bridge moving to a new epoch: its old blocks are gone and its
		// new ones must not be taken for duplicates. A seq 0 after seq 0
		// is a duplicate (below); see docs/kv-events.md.
		idx.Clear(h)
		k.stats.SeqResets++
		k.setUncertain(hk, st, false)
		k.s.logger.Debug("kv seq reset to 0: engine restarted, holder cleared", "engine_id", rec.Engine,
			"rank", rec.Rank, "epoch", rec.Epoch, "last_seq", st.Seq)
	case rec.Seq <= st.Seq:
		k.stats.Duplicates++
		k.s.m.skipped.WithLabelValues("duplicate").Inc()
		return
	case rec.Seq > st.Seq+1:
		k.gap(hk, st, rec, st.Seq+1)
	}
	st.Seq = rec.Seq
	k.stats.Batches++
	k.s.m.events.Add(float64(len(rec.Batch.Events)))
	for _, e := range rec.Batch.Skipped {
		k.stats.RejectedEvents++
		k.s.badRecord(string(e.Kind), p, offset, e)
	}
	base := Namespace{Model: rec.Model, LoRA: rec.LoRA, CacheSalt: rec.CacheSalt}
	for i := range rec.Batch.Events {
		ev := &rec.Batch.Events[i]
		switch ev.Kind {
		case kvevents.KindBlockStored:
			ns := base
			if ev.Stored.LoRAName != "" {
				ns.LoRA = ev.Stored.LoRAName
			}
			if ev.Stored.CacheSalt != "" {
				ns.CacheSalt = ev.Stored.CacheSalt
			}
			k.countMedium(ev.Stored.Medium)
			err := idx.Store(h, ns, ev.Stored)
			if errors.Is(err, kvindex.ErrGroupNotIndexed) {
				k.stats.IgnoredEvents++
				k.s.m.ignored.WithLabelValues("non_prefix_group").Inc()
				continue
			}
			if err != nil {
				k.stats.RejectedEvents++
				k.s.badRecord("index_rejected", p, offset, fmt.Errorf("engine %q rank %d: %w", rec.Engine, rec.Rank, err))
				continue
			}
			k.stats.BlocksStored += int64(len(ev.Stored.BlockHashes))
		case kvevents.KindBlockRemoved:
			if !ev.Removed.AllTiers {
				k.countMedium(ev.Removed.Medium)
			}
			idx.Remove(h, ev.Removed)
			k.stats.BlocksRemoved += int64(len(ev.Removed.BlockHashes))
		case kvevents.KindAllBlocksCleared:
			idx.Clear(h)
			k.stats.Cleared++
			k.setUncertain(hk, st, false)
		}
	}
}

// gap marks st uncertain: batches from want up to rec.Seq-1 never arrived.
// k.s.mu must be held.
func (k *KVIngester) gap(hk holderKey, st *holderState, rec *kvwire.Record, want uint64) {
	k.stats.Gaps++
	k.s.logger.Debug("kv seq gap: holder uncertain until its next full state", "engine_id", rec.Engine,
		"rank", rec.Rank, "epoch", rec.Epoch, "want_seq", want, "seq", rec.Seq)
	k.setUncertain(hk, st, true)
}

// countMedium counts an event naming a medium sluice does not know; the
// index keeps such blocks in a tier of their own. k.s.mu must be held.
func (k *KVIngester) countMedium(m kvevents.Medium) {
	if m == kvevents.MediumUnknown {
		k.stats.UnknownMedium++
		k.s.m.ignored.WithLabelValues("unknown_medium").Inc()
	}
}

// holderStates copies the epoch/seq state of every holder, for a snapshot.
// k.s.mu must be held.
func (k *KVIngester) holderStates() []holderPersist {
	holders := make([]holderPersist, 0, len(k.holders))
	for hk, st := range k.holders {
		holders = append(holders, holderPersist{Engine: hk.engine, Rank: hk.rank, holderState: *st})
	}
	return holders
}

// restore installs a restored index and epoch/seq state; before Run.
func (k *KVIngester) restore(index KVIndex, holders []holderPersist) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.index.Store(&indexBox{index})
	for hk, st := range k.holders {
		k.setUncertain(hk, st, false)
	}
	clear(k.holders)
	for _, hp := range holders {
		hk := holderKey{hp.Engine, hp.Rank}
		st := &holderState{Epoch: hp.Epoch, Seq: hp.Seq}
		k.holders[hk] = st
		k.setUncertain(hk, st, hp.Uncertain)
	}
}
