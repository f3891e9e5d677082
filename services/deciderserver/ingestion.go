package deciderserver

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/flagenv"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/components/deciderstate"
	"github.com/sluicehq/sluice/components/ingest"
	"github.com/sluicehq/sluice/state/config"
)

// IngestConfig selects Kafka ingestion of engine load reports and KV-cache events. Without
// brokers the decider runs without it: load then only comes from the embedding process, and
// cache_aware policies are refused at configuration time (there is no prefix index).
type IngestConfig struct {
	// Brokers are Kafka bootstrap brokers, comma-separated.
	Brokers string
	// LoadTopic and KVTopic name the two streams.
	LoadTopic, KVTopic string
	// KVDefaultFormat is the payload format of KV records without a sluice-format header.
	KVDefaultFormat string
	// SnapshotDir holds warm-restart snapshots; empty disables them (replay from the earliest
	// retained offset on every start).
	SnapshotDir string
	// SnapshotInterval is the time between snapshots.
	SnapshotInterval time.Duration
	// KVMaxNodes caps the prefix index (LRU beyond it).
	KVMaxNodes int
	// RetryBackoffMax caps the (jittered) back-off of the Kafka readers after a broker
	// error, so consumption resumes about this soon after a broker returns.
	RetryBackoffMax time.Duration
	// HealthInterval is how often the brokers are probed for high watermarks (true lag) and
	// reachability.
	HealthInterval time.Duration
}

// kafka returns the ingest.Config both streams share, for topic.
func (c IngestConfig) kafka(brokers []string, topic string) ingest.Config {
	return ingest.Config{Brokers: brokers, Topic: topic, MaxRetryBackoff: c.RetryBackoffMax, HealthInterval: c.HealthInterval}
}

func (c *IngestConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Brokers, "kafka-brokers", c.Brokers, "Kafka bootstrap brokers (host:port, comma-separated) for load reports and KV events; empty disables ingestion")
	fs.StringVar(&c.LoadTopic, "load-topic", c.LoadTopic, "engine load report topic")
	fs.StringVar(&c.KVTopic, "kv-topic", c.KVTopic, "KV-cache event topic")
	fs.StringVar(&c.KVDefaultFormat, "kv-default-format", c.KVDefaultFormat, "payload format of KV records without a sluice-format header: sluice.kv.v1+proto, vllm.msgpack or sglang.msgpack")
	fs.StringVar(&c.SnapshotDir, "snapshot-dir", c.SnapshotDir, "directory for warm-restart snapshots of the load table and KV index; empty disables them")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "time between warm-restart snapshots")
	fs.IntVar(&c.KVMaxNodes, "kv-max-nodes", c.KVMaxNodes, "prefix index capacity in blocks (least recently used beyond it are evicted)")
	fs.DurationVar(&c.RetryBackoffMax, "kafka-retry-backoff-max", c.RetryBackoffMax, "cap of the jittered back-off after a Kafka error; consumption resumes about this soon after a broker returns")
	fs.DurationVar(&c.HealthInterval, "kafka-health-interval", c.HealthInterval, "how often the brokers are probed for reachability and high watermarks (sluice_ingest_broker_reachable, sluice_ingest_lag_records)")
}

// forShard returns c with both topics suffixed for shard ("" leaves them).
func (c IngestConfig) forShard(shard string) IngestConfig {
	c.LoadTopic, c.KVTopic = config.ShardTopic(c.LoadTopic, shard), config.ShardTopic(c.KVTopic, shard)
	return c
}

func (c IngestConfig) brokers() []string { return flagenv.List(c.Brokers) }

// ingestion is the running Kafka ingestion: the two consumers (built by deciderstate, as a
// replay builds them) and the snapshotter.
type ingestion struct {
	shared *deciderstate.Ingestion
	load   *ingest.LoadIngester
	kv     *ingest.KVIngester
	snaps  *ingest.Snapshotter
}

// newIngestion builds the consumers and restores the newest valid snapshot, so the prefix index
// the policies read is the restored one. It returns nil when no brokers are configured.
func newIngestion(logger *slog.Logger, cfg IngestConfig, state *deciderstate.State, promReg prometheus.Registerer) (*ingestion, error) {
	brokers := cfg.brokers()
	if len(brokers) == 0 {
		return nil, nil
	}
	shared, err := state.NewIngestion(logger, deciderstate.IngestConfig{Load: cfg.kafka(brokers, cfg.LoadTopic),
		KV: cfg.kafka(brokers, cfg.KVTopic), KVDefaultFormat: cfg.KVDefaultFormat, KVMaxNodes: cfg.KVMaxNodes}, promReg)
	if err != nil {
		return nil, err
	}
	in := &ingestion{shared: shared, load: shared.Load, kv: shared.KV}
	if cfg.SnapshotDir != "" {
		in.snaps, err = ingest.NewSnapshotter(logger, ingest.SnapshotConfig{Dir: cfg.SnapshotDir, Interval: cfg.SnapshotInterval},
			in.load, in.kv, ingest.KVIndexReader(shared.IndexConfig, state.Slots), promReg)
		if err != nil {
			return nil, err
		}
		info, err := in.snaps.Restore()
		if err != nil {
			return nil, fmt.Errorf("restore snapshot from -snapshot-dir %s: %w", cfg.SnapshotDir, err)
		}
		if info.Path != "" {
			if err := shared.SyncIndex(); err != nil {
				return nil, err
			}
		}
	}
	return in, nil
}

// degraded lists, one line each, the streams that cannot reach the brokers.
func (in *ingestion) degraded() []string {
	var out []string
	for _, err := range []error{in.load.Healthy(), in.kv.Healthy()} {
		if err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}

func (in *ingestion) run(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return ignoreCancel(in.load.Run(ctx)) })
	g.Go(func() error { return ignoreCancel(in.kv.Run(ctx)) })
	if in.snaps != nil {
		g.Go(func() error { return ignoreCancel(in.snaps.Run(ctx)) })
	}
}
