package enginelink

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/pgstore"
)

// Model shards (docs/decisions.md, "Model-sharded deciders"): with -shards-config (the
// deciders' configuration file) or -shards-postgres-dsn (their Postgres store), the link reads
// the document's shards list and publishes each engine's KV records and load reports to its
// model's shard topics (<topic>.<shard>); an engine whose model no shard lists keeps the
// unsuffixed topics. The link follows the store: every record is routed by the shard map in
// force when it is handed to the producer, so a model moved to another shard has its records
// on the new shard's topics from the next record on, without restarting anything.

// shardRoutes is one version of the shard map: each sharded model's KV and load topics.
// It is immutable once published.
type shardRoutes struct {
	version  int64
	shardOf  map[string]string // model -> shard id
	kv, load map[string]string // model -> topic; a model absent uses the unsharded topics
}

func newShardRoutes(snap config.Snapshot, kvBase, loadBase string) *shardRoutes {
	r := &shardRoutes{version: snap.Version, shardOf: map[string]string{}, kv: map[string]string{}, load: map[string]string{}}
	if snap.Document == nil {
		return r
	}
	for _, s := range snap.Document.Shards {
		for _, model := range s.Models {
			r.shardOf[model] = s.ID
			r.kv[model] = config.ShardTopic(kvBase, s.ID)
			r.load[model] = config.ShardTopic(loadBase, s.ID)
		}
	}
	return r
}

// moved lists the models whose shard differs between r and next, sorted.
func (r *shardRoutes) moved(next *shardRoutes) []string {
	var out []string
	for model, s := range next.shardOf {
		if r.shardOf[model] != s {
			out = append(out, model)
		}
	}
	for model := range r.shardOf {
		if _, ok := next.shardOf[model]; !ok {
			out = append(out, model)
		}
	}
	slices.Sort(out)
	return out
}

// openShardStore opens the store the shard map comes from: the Postgres store with a DSN,
// else the file store on path (polled every poll), else none (nil).
func openShardStore(logger *slog.Logger, cfg Config) (config.Store, error) {
	switch {
	case cfg.ShardsPostgresDSN != "":
		ctx, cancel := context.WithTimeout(context.Background(), 4*pgstore.DefaultConnectTimeout)
		defer cancel()
		s, err := pgstore.Open(ctx, logger, pgstore.Config{DSN: cfg.ShardsPostgresDSN})
		if err != nil {
			return nil, fmt.Errorf("-shards-postgres-dsn: %w", err)
		}
		return s, nil
	case cfg.ShardsConfig != "":
		s, err := config.NewFileStore(logger, cfg.ShardsConfig, config.FileStoreConfig{PollInterval: cfg.ShardsPoll})
		if err != nil {
			return nil, fmt.Errorf("-shards-config %s: %w", cfg.ShardsConfig, err)
		}
		return s, nil
	}
	return nil, nil
}

// followShards runs the shard store and publishes each newer version's routes until ctx ends.
func (l *Link) followShards(ctx context.Context) error {
	ch, unsubscribe := l.shardStore.Subscribe()
	defer unsubscribe()
	storeDone := make(chan error, 1)
	go func() { storeDone <- l.shardStore.Run(ctx) }()
	// A version published between New's read and Subscribe is in Current.
	l.setShards(l.shardStore.Current())
	for {
		select {
		case <-ctx.Done():
			return <-storeDone
		case err := <-storeDone:
			return fmt.Errorf("shard map store: %w", err)
		case snap := <-ch:
			l.setShards(snap)
		}
	}
}

// setShards publishes snap's routes when it is newer than the routes in force.
func (l *Link) setShards(snap config.Snapshot) {
	prev := l.shards.Load()
	if prev != nil && snap.Version <= prev.version {
		return
	}
	next := newShardRoutes(snap, l.cfg.KVTopic, l.cfg.LoadTopic)
	l.shards.Store(next)
	l.m.shardMapVersion.Set(float64(next.version))
	if prev == nil {
		return
	}
	if moved := prev.moved(next); len(moved) > 0 {
		l.m.shardMoves.Add(float64(len(moved)))
		l.logger.Info("shard map changed: these models' records go to their new shard's topics from now on",
			slog.Int64("config_version", next.version), slog.Any("models", moved), slog.Any("shards", pick(next.shardOf, moved)))
	}
}

// pick returns model -> shard for models ("" = unsharded).
func pick(shardOf map[string]string, models []string) map[string]string {
	out := make(map[string]string, len(models))
	for _, m := range models {
		out[m] = shardOf[m]
	}
	return out
}

// kvTopic is the KV topic of model's shard in the shard map in force.
func (l *Link) kvTopic(model string) string {
	if r := l.shards.Load(); r != nil {
		if t, ok := r.kv[model]; ok {
			return t
		}
	}
	return l.cfg.KVTopic
}

// loadTopic is the load topic of model's shard in the shard map in force.
func (l *Link) loadTopic(model string) string {
	if r := l.shards.Load(); r != nil {
		if t, ok := r.load[model]; ok {
			return t
		}
	}
	return l.cfg.LoadTopic
}

// defaultShardsPoll is how often -shards-config is checked for changes by default (the
// deciders' -config-poll default).
const defaultShardsPoll = 2 * time.Second
