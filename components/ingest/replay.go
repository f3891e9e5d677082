package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/slots"
)

// ReplayConfig configures Replay.
type ReplayConfig struct {
	// Brokers are the bootstrap brokers; required.
	Brokers []string
	// Topic is the topic to replay; required.
	Topic string
	// Stream is StreamKV or StreamLoad.
	Stream string
	// Format is the KV payload format of records without a sluice-format
	// header; empty selects kvwire.FormatProto. KV only.
	Format string
	// FromOffset is the offset to start at in every partition; negative (or
	// zero, the earliest possible) starts at the earliest retained offset.
	// Ignored when FromTime is set.
	FromOffset int64
	// FromTime, when set, starts every partition at its first record with a
	// timestamp at or after it.
	FromTime time.Time
	// NewIndex returns the fresh index to build, whose holders are slots of
	// the given table; nil selects kvindex.New with the default config.
	NewIndex func(*slots.Table) (KVIndex, error)
	// Slots is the slot table engine ids are interned in; nil selects a
	// new one. Share the decider's table to compare digests with its index.
	Slots *slots.Table
	// Consumer holds optional Kafka settings (fetch sizes, timeouts); its
	// Brokers and Topic are ignored.
	Consumer Config
}

// Summary is what Replay built.
type Summary struct {
	Topic      string
	Stream     string
	Partitions map[int][2]int64 // partition -> [start, end) offsets replayed
	Records    int64            // records read
	Bad        map[string]int64 // bad records or events by kind
	Skipped    map[string]int64 // stale_epoch / duplicate records
	Engines    int              // distinct engines
	Holders    int              // distinct (engine, rank) (KV)
	Uncertain  int              // holders left uncertain (KV)
	KV         KVStats          // KV counters
	Digest     uint64           // index digest (KV)
	IndexStats *kvindex.Stats   // the index's own statistics, when it is a *kvindex.Index
	Took       time.Duration
	// Index and Load are the structures built, for callers that inspect
	// them further (tests compare them).
	Index KVIndex
	Load  *loadtable.Table
	// UncertainEngines lists, sorted, the engines with a rank left
	// uncertain by a seq gap (KV).
	UncertainEngines []string
}

// String renders the summary for people.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic %s (%s stream) replayed in %v\n", s.Topic, s.Stream, s.Took.Round(time.Millisecond))
	for _, p := range slices.Sorted(maps.Keys(s.Partitions)) {
		r := s.Partitions[p]
		fmt.Fprintf(&b, "  partition %d: offsets [%d, %d)\n", p, r[0], r[1])
	}
	fmt.Fprintf(&b, "records: %d\n", s.Records)
	fmt.Fprintf(&b, "engines: %d\n", s.Engines)
	if s.Stream == StreamKV {
		fmt.Fprintf(&b, "holders (engine, rank): %d, uncertain: %d\n", s.Holders, s.Uncertain)
		fmt.Fprintf(&b, "batches applied: %d, blocks stored: %d, blocks removed: %d, clears: %d, epoch resets: %d, seq gaps: %d\n",
			s.KV.Batches, s.KV.BlocksStored, s.KV.BlocksRemoved, s.KV.Cleared, s.KV.EpochResets, s.KV.Gaps)
		if st := s.IndexStats; st != nil {
			fmt.Fprintf(&b, "index: %d blocks, %d (block, holder) pairs, %d holders, ~%d bytes, %d evictions\n",
				st.Nodes, st.Pairs, st.Holders, st.Bytes, st.Evictions)
		}
		fmt.Fprintf(&b, "index digest: %016x\n", s.Digest)
	}
	for _, m := range []struct {
		name string
		v    map[string]int64
	}{{"bad", s.Bad}, {"skipped", s.Skipped}} {
		for _, k := range slices.Sorted(maps.Keys(m.v)) {
			fmt.Fprintf(&b, "%s %s: %d\n", m.name, k, m.v[k])
		}
	}
	return b.String()
}

// Replay builds a fresh load table or KV index from a topic: every partition
// from FromOffset (or FromTime) up to its end offset as of the start (records
// produced meanwhile are not read), then returns what it built.
func Replay(ctx context.Context, logger *slog.Logger, cfg ReplayConfig) (Summary, error) {
	t0 := time.Now()
	if cfg.Topic == "" {
		return Summary{}, errors.New("ingest: Replay: Topic is required")
	}
	c := cfg.Consumer
	c.Brokers, c.Topic = cfg.Brokers, cfg.Topic
	reg := prometheus.NewRegistry()
	st := cfg.Slots
	if st == nil {
		st = slots.NewTable()
	}
	sum := Summary{Topic: cfg.Topic, Stream: cfg.Stream, Partitions: map[int][2]int64{}}
	var s *stream
	var kv *KVIngester
	var load *LoadIngester
	switch cfg.Stream {
	case StreamKV:
		newIndex := cfg.NewIndex
		if newIndex == nil {
			newIndex = func(*slots.Table) (KVIndex, error) { return kvindex.New(kvindex.Config{}) }
		}
		idx, err := newIndex(st)
		if err != nil {
			return Summary{}, fmt.Errorf("ingest: Replay: new index: %w", err)
		}
		kv, err = NewKVIngester(logger, KVConfig{Config: c, DefaultFormat: cfg.Format}, idx, st, reg)
		if err != nil {
			return Summary{}, err
		}
		s = kv.s
	case StreamLoad:
		tbl, err := loadtable.New(st, loadtable.Config{ClockSkew: 100 * 365 * 24 * time.Hour})
		if err != nil {
			return Summary{}, err
		}
		load, err = NewLoadIngester(logger, c, tbl, nil, reg)
		if err != nil {
			return Summary{}, err
		}
		s = load.s
	default:
		return Summary{}, fmt.Errorf("ingest: Replay: Stream %q: want %q or %q", cfg.Stream, StreamKV, StreamLoad)
	}
	start, end, err := replayRange(ctx, s, cfg)
	if err != nil {
		return Summary{}, err
	}
	for p := range end {
		sum.Partitions[p] = [2]int64{start[p], end[p]}
	}
	s.setOffsets(start)
	if err := s.drain(ctx, end); err != nil {
		return Summary{}, err
	}
	mfs, _ := reg.Gather()
	sum.Bad, sum.Skipped = map[string]int64{}, map[string]int64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "sluice_ingest_records_total":
				sum.Records += int64(m.GetCounter().GetValue())
			case "sluice_ingest_bad_records_total":
				sum.Bad[label(m, "kind")] += int64(m.GetCounter().GetValue())
			case "sluice_ingest_skipped_records_total":
				sum.Skipped[label(m, "reason")] += int64(m.GetCounter().GetValue())
			}
		}
	}
	if kv != nil {
		sum.KV = kv.Stats()
		sum.Index = kv.Index()
		sum.Digest = sum.Index.Digest()
		if ix, ok := sum.Index.(*kvindex.Index); ok {
			st := ix.Stats()
			sum.IndexStats = &st
		}
		engines := map[string]bool{}
		kv.s.mu.Lock()
		for hk, h := range kv.holders {
			engines[hk.engine] = true
			if h.Uncertain {
				sum.Uncertain++
				if !slices.Contains(sum.UncertainEngines, hk.engine) {
					sum.UncertainEngines = append(sum.UncertainEngines, hk.engine)
				}
			}
		}
		sum.Holders = len(kv.holders)
		kv.s.mu.Unlock()
		sum.Engines = len(engines)
		slices.Sort(sum.UncertainEngines)
	} else {
		sum.Load = load.table
		sum.Engines = len(load.table.Engines())
	}
	sum.Took = time.Since(t0)
	return sum, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// replayRange returns, per partition, the offset to start at and the end
// offset (exclusive) as of now.
func replayRange(ctx context.Context, s *stream, cfg ReplayConfig) (start, end map[int]int64, err error) {
	ids, err := s.listPartitions(ctx, s.client())
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: Replay: %w", err)
	}
	start, end = map[int]int64{}, map[int]int64{}
	d := &kafka.Dialer{ClientID: s.cfg.ClientID, Timeout: s.cfg.DialTimeout}
	for _, p := range ids {
		conn, err := d.DialLeader(ctx, "tcp", s.cfg.Brokers[0], s.cfg.Topic, p)
		if err != nil {
			return nil, nil, fmt.Errorf("ingest: Replay: dial leader of partition %d: %w", p, err)
		}
		first, last, err := conn.ReadOffsets()
		from := max(first, cfg.FromOffset)
		if err == nil && !cfg.FromTime.IsZero() {
			from, err = conn.ReadOffset(cfg.FromTime)
			if err != nil {
				// No record at or after FromTime: nothing to replay.
				from, err = last, nil
			}
		}
		_ = conn.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("ingest: Replay: offsets of partition %d: %w", p, err)
		}
		start[p], end[p] = min(from, last), last
	}
	return start, end, nil
}
