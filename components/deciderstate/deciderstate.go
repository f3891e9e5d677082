// Package deciderstate builds the decider's in-memory state the way production wires it — slot
// table, engine registry, load table, leases, affinity store, the KV prefix index with its two
// ingesters, and the decider over them — and installs configuration snapshots. The decider
// process (services/deciderserver) and the virtual-time trace replay (services/simulate) both
// build their state here, so a replay routes through exactly the code a decider runs.
package deciderstate

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/components/ingest"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/affinity"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// Config holds the settings of the state tables.
type Config struct {
	// LoadFreshness and ClockSkew are the load table's (loadtable.Config).
	LoadFreshness, ClockSkew time.Duration
	// LeaseTTL is the leases' expiry (inflight.Config).
	LeaseTTL time.Duration
	// AffinitySweep is the affinity store's sweep interval.
	AffinitySweep time.Duration
	// Now is the clock of the load table, leases and affinity store; nil is time.Now. A
	// virtual-time replay passes a clock.Manual's Now.
	Now func() time.Time
	// IntN is the sampling policies' random source (policy.Deps.IntN); nil is math/rand/v2's
	// global one. A replay passes a seeded source so its runs repeat.
	IntN func(n int) int
}

// State is the decider's state. Decider is nil until BuildDecider.
type State struct {
	Slots    *slots.Table
	Registry *registry.Registry
	Load     *loadtable.Table
	Leases   *inflight.Tracker
	Affinity *affinity.Store
	Decider  *decider.Decider

	// registryFromConfig is true while the registry holds the engines of the document in force.
	registryFromConfig bool
	// intN is Config.IntN, handed to the policies.
	intN func(n int) int
}

// New builds the tables and the hooks that drop an engine's load and bindings when it leaves
// the registry. It starts no goroutines: the caller runs Leases.Run and Affinity.Run when it
// wants their sweeps.
func New(cfg Config) (*State, error) {
	st := slots.NewTable()
	load, err := loadtable.New(st, loadtable.Config{Freshness: cfg.LoadFreshness, ClockSkew: cfg.ClockSkew, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	leases, err := inflight.New(st, inflight.Config{LeaseTTL: cfg.LeaseTTL}, cfg.Now)
	if err != nil {
		return nil, err
	}
	aff, err := affinity.New(affinity.Config{SweepInterval: cfg.AffinitySweep}, cfg.Now)
	if err != nil {
		return nil, err
	}
	reg := registry.New(st)
	reg.OnRemove(func(w *registry.Engine) { aff.InvalidateEngine(w.ID) })
	reg.OnRemove(func(w *registry.Engine) { load.RemoveEngine(w.ID) })
	return &State{Slots: st, Registry: reg, Load: load, Leases: leases, Affinity: aff, intN: cfg.IntN}, nil
}

// IngestConfig configures the two ingesters.
type IngestConfig struct {
	// Load and KV are the streams' settings (brokers, topics, bounds).
	Load, KV ingest.Config
	// KVDefaultFormat is the payload format of KV records without a sluice-format header.
	KVDefaultFormat string
	// KVMaxNodes caps the prefix index (LRU beyond it).
	KVMaxNodes int
}

// Ingestion is the load and KV ingesters feeding the state, and the prefix index.
type Ingestion struct {
	Load  *ingest.LoadIngester
	KV    *ingest.KVIngester
	Index *kvindex.Index
	// IndexConfig is the index's configuration (for snapshot readers).
	IndexConfig kvindex.Config
}

// NewIngestion builds the prefix index and the two ingesters over s, with the production hooks:
// a new KV epoch drops the engine's older load, and an engine leaving the registry leaves the
// index. It starts nothing: a decider runs the ingesters on Kafka, a replay feeds them records
// with Apply. Metrics are registered on promReg.
func (s *State) NewIngestion(logger *slog.Logger, cfg IngestConfig, promReg prometheus.Registerer) (*Ingestion, error) {
	ixCfg := kvindex.Config{MaxNodes: cfg.KVMaxNodes}
	index, err := kvindex.New(ixCfg)
	if err != nil {
		return nil, fmt.Errorf("-kv-max-nodes: %w", err)
	}
	li, err := ingest.NewLoadIngester(logger, cfg.Load, s.Load, s.Registry, promReg)
	if err != nil {
		return nil, err
	}
	// A new epoch on the KV stream means the engine restarted: its load from the previous life
	// is dropped too (the load stream resets on its own epoch as well).
	load := s.Load
	onNewEpoch := func(engine string, epoch uint64) { load.ResetEngineBefore(engine, epoch) }
	ki, err := ingest.NewKVIngester(logger, ingest.KVConfig{Config: cfg.KV, DefaultFormat: cfg.KVDefaultFormat, OnNewEpoch: onNewEpoch},
		index, s.Slots, promReg)
	if err != nil {
		return nil, err
	}
	s.Registry.OnRemove(func(w *registry.Engine) { ki.RemoveEngine(w.ID) })
	return &Ingestion{Load: li, KV: ki, Index: index, IndexConfig: ixCfg}, nil
}

// SyncIndex points Index at the KV ingester's index, which a snapshot restore replaces.
func (in *Ingestion) SyncIndex() error {
	ix, ok := in.KV.Index().(*kvindex.Index)
	if !ok {
		return errors.New("restored KV index has an unexpected type")
	}
	in.Index = ix
	return nil
}

// PrefixSource is what cache-aware policies read: the local index, with the KV ingester's
// residency-uncertainty flags.
func (in *Ingestion) PrefixSource() policy.PrefixSource {
	return &policy.LocalIndex{Index: in.Index, Uncertain: in.KV.Uncertain}
}

// BuildDecider builds the decider over the state; in may be nil (no KV ingestion, so no
// cache_aware policy).
func (s *State) BuildDecider(logger *slog.Logger, in *Ingestion, cfg decider.Config) error {
	deps := policy.Deps{Load: s.Load, InFlight: s.Leases, Affinity: s.Affinity, IntN: s.intN}
	if in != nil {
		deps.Prefix = in.PrefixSource()
	}
	d, err := decider.New(logger, s.Registry, deps, s.Leases, cfg)
	if err != nil {
		return err
	}
	s.Decider = d
	return nil
}

// Apply installs a snapshot: its engines (when the document lists any) and its buckets. The
// buckets are checked first so a snapshot that cannot be built changes nothing.
func (s *State) Apply(snap config.Snapshot) error {
	if err := s.Decider.Check(snap.Document); err != nil {
		return err
	}
	// A document that lists engines owns the registry. One that omits them leaves the registry
	// to the embedding process (dev mode, tests), unless the engines in it came from an earlier
	// document: those go too, so the document in force and the engines routed to never
	// disagree (and a restart on this document would not bring them back either).
	if snap.Document.Engines != nil || s.registryFromConfig {
		engines, err := EnginesFromConfig(snap.Document.Engines)
		if err != nil {
			return err
		}
		if err := s.Registry.Replace(engines); err != nil {
			return err
		}
		s.registryFromConfig = snap.Document.Engines != nil
	}
	return s.Decider.Apply(snap)
}

// EnginesFromConfig turns a document's engine specs into registry engines.
func EnginesFromConfig(specs []config.EngineSpec) ([]registry.Engine, error) {
	out := make([]registry.Engine, 0, len(specs))
	for i, ws := range specs {
		role, err := registry.ParseRole(ws.Role)
		if err != nil {
			return nil, fmt.Errorf("workers[%d] (%q): %w", i, ws.ID, err)
		}
		out = append(out, registry.Engine{ID: ws.ID, URL: ws.URL, Models: ws.Models, Role: role,
			BootstrapPort: ws.BootstrapPort, Labels: ws.Labels,
			KVEventsEndpoint: ws.KVEventsEndpoint, KVReplayEndpoint: ws.KVReplayEndpoint, MetricsURL: ws.MetricsURL,
			DPSize: ws.DPSize, LoRAAdapters: ws.LoRAAdapters})
	}
	return out, nil
}
