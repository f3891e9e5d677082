package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// LoadIngester consumes the engine-load topic into a loadtable.Table.
type LoadIngester struct {
	s     *stream
	table *loadtable.Table
	reg   *registry.Registry // may be nil: every engine counts as unknown
	// unknown holds the ids of engines applied while not in the registry,
	// bounded by Config.MaxUnknownEngines. Guarded by s.mu.
	unknown map[string]struct{}
}

// NewLoadIngester returns a load-stream consumer feeding table. Engines that
// engines does not know (or every engine, when engines is nil) are still
// applied, so their load is ready when they register, up to
// cfg.MaxUnknownEngines distinct ids. Metrics are registered on reg. It
// starts no goroutines; call Run.
func NewLoadIngester(logger *slog.Logger, cfg Config, table *loadtable.Table, engines *registry.Registry, reg prometheus.Registerer) (*LoadIngester, error) {
	if logger == nil || table == nil || reg == nil {
		return nil, errors.New("ingest: NewLoadIngester: nil logger, table or registerer")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(DefaultLoadTopic)
	s, err := newStream(logger, cfg, StreamLoad, reg)
	if err != nil {
		return nil, err
	}
	l := &LoadIngester{s: s, table: table, reg: engines, unknown: map[string]struct{}{}}
	s.apply = l.apply
	return l, nil
}

// Stream names, used as the stream metric label and in snapshots.
const (
	StreamLoad = "load"
	StreamKV   = "kv"
)

// Run consumes every partition of the topic until ctx ends and returns
// ctx's error. Broker failures never end it: readers reconnect by themselves.
func (l *LoadIngester) Run(ctx context.Context) error { return l.s.run(ctx) }

// Apply applies one load record (a sluice.v1.LoadReport value keyed by engine id) exactly as a
// record read from the topic: decode, registry check, table apply, metrics. It is the entry
// point of in-process feeds without Kafka (sluice simulate); do not call it beside Run.
func (l *LoadIngester) Apply(msg kafka.Message) { l.s.feed(msg) }

// Healthy returns nil while Run runs and the brokers are reachable, else an
// error saying why.
func (l *LoadIngester) Healthy() error { return l.s.healthy() }

// Offsets returns the next offset to read per partition.
func (l *LoadIngester) Offsets() map[int]int64 { return l.s.offsets() }

// Table returns the table the ingester feeds.
func (l *LoadIngester) Table() *loadtable.Table { return l.table }

func (l *LoadIngester) apply(p int, msg *kafka.Message) {
	r, err := decodeLoadReport(msg.Key, msg.Value)
	if err != nil {
		kind := "malformed_protobuf"
		if errors.Is(err, errKeyMismatch) {
			kind = "key_mismatch"
		}
		l.s.badRecord(kind, p, msg.Offset, err)
		return
	}
	known := false
	if l.reg != nil {
		_, known = l.reg.Snapshot().Get(r.EngineID)
	}
	if known {
		delete(l.unknown, r.EngineID)
	} else if _, seen := l.unknown[r.EngineID]; !seen && len(l.unknown) >= l.s.cfg.MaxUnknownEngines {
		l.s.badRecord("unknown_engine_cap", p, msg.Offset,
			fmt.Errorf("engine %q is not registered and %d unregistered engines already have load state (MaxUnknownEngines)", r.EngineID, len(l.unknown)))
		return
	}
	switch err := l.table.Apply(r); {
	case err == nil:
		if !known {
			l.unknown[r.EngineID] = struct{}{}
		}
	case errors.Is(err, loadtable.ErrStaleEpoch):
		l.s.m.skipped.WithLabelValues("stale_epoch").Inc()
	case errors.Is(err, loadtable.ErrDuplicate):
		l.s.m.skipped.WithLabelValues("duplicate").Inc()
	case errors.Is(err, loadtable.ErrClockSkew):
		l.s.badRecord("clock_skew", p, msg.Offset, err)
	default:
		l.s.badRecord("malformed_report", p, msg.Offset, err)
	}
}

// writeState writes the load table; called with the stream paused.
func (l *LoadIngester) writeState(w io.Writer) error { return l.table.WriteSnapshot(w) }

// readState replaces the load table's contents; called before Run.
func (l *LoadIngester) readState(r io.Reader) error {
	if err := l.table.ReadSnapshot(r); err != nil {
		return err
	}
	clear(l.unknown)
	for _, id := range l.table.Engines() {
		if l.reg != nil {
			if _, ok := l.reg.Snapshot().Get(id); ok {
				continue
			}
		}
		l.unknown[id] = struct{}{}
	}
	return nil
}
