package enginelink

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/flagenv"

	"github.com/segmentio/kafka-go"
)

// Config is the link's configuration, bound to flags by RegisterFlags (each with a SLUICE_*
// environment fallback through the sluice main).
type Config struct {
	// KafkaBrokers is the comma-separated bootstrap list.
	KafkaBrokers string
	// KVTopic receives the engines' KV-event batches.
	KVTopic string
	// LoadTopic receives LoadReports.
	LoadTopic string

	// ShardsConfig is the deciders' configuration file whose shards list maps each engine's
	// model to its shard's topics (shards.go), checked for changes every ShardsPoll.
	// ShardsPostgresDSN reads the list from the deciders' Postgres store instead, following
	// its changes as they are stored. With neither, every engine publishes on KVTopic and
	// LoadTopic.
	ShardsConfig      string
	ShardsPostgresDSN string
	ShardsPoll        time.Duration

	// EnginesFile is a YAML or JSON list of engines (static/sidecar mode).
	EnginesFile string
	// Engines are one-line engine specs (-engine, repeatable); see ParseEngineFlag.
	Engines []EngineSpec
	// KVBind, when set, is the endpoint of the one SUB socket the link binds and engines with
	// a connecting publisher connect to, telling themselves apart by the topic kv@<id>@<model>.
	KVBind string
	// KVBindPorts binds that many consecutive tcp ports from KVBind's (one per DP rank of
	// vLLM's connecting publishers, which offset their port by the rank).
	KVBindPorts int

	// FleetAdminURL, when set, is the decider's HTTP address: the link follows its engine
	// registry (GET /v1/admin/engines) instead of (or in addition to) the static engines.
	FleetAdminURL string
	// AdminToken is sent as a bearer token to the admin API.
	AdminToken string
	// FleetPoll is how often the engine registry is read.
	FleetPoll time.Duration

	// ScrapeInterval is how often each engine's load is scraped; keep it well under the
	// decider's -load-freshness (5 s by default).
	ScrapeInterval time.Duration
	// ScrapeTimeout bounds one scrape; 0 means ScrapeInterval.
	ScrapeTimeout time.Duration

	// ReplayTimeout bounds one replay request to an engine's replay socket.
	ReplayTimeout time.Duration
	// MaxBufferedRecords bounds the records waiting for Kafka (queued plus in flight); beyond,
	// new records are dropped and counted, which the decider sees as seq gaps.
	MaxBufferedRecords int
	// StreamBuffer bounds the batches waiting per (engine, rank) stream on the bound socket;
	// beyond, batches are dropped (and recovered by replay when possible).
	StreamBuffer int
	// KafkaBatchTimeout is how long the producer waits to fill a batch. Load reports wait at
	// most loadLinger (1 µs): a scrape's ranks arrive together (producer.go).
	KafkaBatchTimeout time.Duration
	// KafkaBatchSize is the most records per produce request and partition; at most
	// loadBatchSize (64) for load reports (producer.go).
	KafkaBatchSize int
	// KafkaMaxBatchBytes bounds one produce request per partition, and so the largest record:
	// keep it at or below the KV topic's max.message.bytes (the brokers' default is 1 MiB).
	// A record above it (an SGLang page-size-1 prompt of more than ~80k tokens is one ~1.3 MB
	// batch) is dropped and counted as too_large, which the decider sees as a seq gap; raise
	// both together to carry such prompts.
	KafkaMaxBatchBytes int
	// KafkaCompression is the record compression: none, gzip, snappy, lz4 or zstd. Compression
	// multiplies what fits in one produce request (1 MiB by the brokers' default), and one
	// engine's records share one partition, whose requests go one at a time.
	KafkaCompression string

	// HTTPAddr serves /metrics, /healthz and /readyz; empty disables it.
	HTTPAddr string
	// ShutdownTimeout bounds draining the producer at shutdown.
	ShutdownTimeout time.Duration
}

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		KafkaBrokers:       "127.0.0.1:9092",
		KVTopic:            "sluice.kv-events.v1",
		LoadTopic:          "sluice.engine-load.v1",
		KVBindPorts:        1,
		FleetPoll:          5 * time.Second,
		ShardsPoll:         defaultShardsPoll,
		ScrapeInterval:     500 * time.Millisecond,
		ReplayTimeout:      2 * time.Second,
		MaxBufferedRecords: 100_000,
		StreamBuffer:       4096,
		KafkaBatchTimeout:  time.Millisecond,
		KafkaBatchSize:     2000,
		KafkaMaxBatchBytes: 1 << 20,
		KafkaCompression:   "lz4",
		HTTPAddr:           ":7090",
		ShutdownTimeout:    5 * time.Second,
	}
}

// engineFlag collects repeated -engine values.
type engineFlag struct{ c *Config }

func (f engineFlag) String() string {
	if f.c == nil {
		return ""
	}
	ids := make([]string, len(f.c.Engines))
	for i, e := range f.c.Engines {
		ids[i] = e.ID
	}
	return strings.Join(ids, ";")
}

// Set parses one engine; ';' separates several (so SLUICE_ENGINE can hold a list).
func (f engineFlag) Set(v string) error {
	for _, one := range strings.Split(v, ";") {
		if strings.TrimSpace(one) == "" {
			continue
		}
		s, err := ParseEngineFlag(one)
		if err != nil {
			return err
		}
		f.c.Engines = append(f.c.Engines, s)
	}
	return nil
}

// RegisterFlags binds c's fields to fs; the values already in c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", c.KafkaBrokers, "Kafka bootstrap brokers, host:port,...")
	fs.StringVar(&c.KVTopic, "kv-topic", c.KVTopic, "topic of the KV-event records")
	fs.StringVar(&c.LoadTopic, "load-topic", c.LoadTopic, "topic of the load reports")
	fs.StringVar(&c.ShardsConfig, "shards-config", c.ShardsConfig, "configuration file (the deciders' -config) whose shards list sends each engine's records to <topic>.<shard> of its model's shard, followed as it changes; empty = unsharded topics")
	fs.StringVar(&c.ShardsPostgresDSN, "shards-postgres-dsn", c.ShardsPostgresDSN, "the deciders' Postgres configuration store (their -postgres-dsn), instead of -shards-config: its shards list, followed as it changes")
	fs.DurationVar(&c.ShardsPoll, "shards-poll", c.ShardsPoll, "how often -shards-config is checked for changes")
	fs.StringVar(&c.EnginesFile, "engines", c.EnginesFile, "YAML/JSON list of engines to follow (static or sidecar mode)")
	fs.Var(engineFlag{c}, "engine", "one engine, repeatable (';' separates several): id=e1,model=m,engine=vllm,kv=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,metrics=http://127.0.0.1:8000/metrics,loads=URL,dp=2,lora=NAME,salt=SALT")
	fs.StringVar(&c.KVBind, "kv-bind", c.KVBind, "bind one SUB socket here (tcp://127.0.0.1:5600) for engines that connect; they publish with topic kv@<id>@<model>")
	fs.IntVar(&c.KVBindPorts, "kv-bind-ports", c.KVBindPorts, "bind this many consecutive ports from -kv-bind's (vLLM DP rank r connects to port + r)")
	fs.StringVar(&c.FleetAdminURL, "fleet-admin-url", c.FleetAdminURL, "decider HTTP address (http://decider:7080): follow its engine registry")
	fs.StringVar(&c.AdminToken, "admin-token", c.AdminToken, "bearer token for the decider's admin API")
	fs.DurationVar(&c.FleetPoll, "fleet-poll", c.FleetPoll, "how often the decider's engine registry is read")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", c.ScrapeInterval, "engine load scrape interval (keep well under the decider's -load-freshness)")
	fs.DurationVar(&c.ScrapeTimeout, "scrape-timeout", c.ScrapeTimeout, "bound of one scrape (0 = the scrape interval)")
	fs.DurationVar(&c.ReplayTimeout, "replay-timeout", c.ReplayTimeout, "bound of one replay request to an engine's replay socket")
	fs.IntVar(&c.MaxBufferedRecords, "max-buffered-records", c.MaxBufferedRecords, "records waiting for Kafka before new ones are dropped (visible seq gaps)")
	fs.IntVar(&c.StreamBuffer, "stream-buffer", c.StreamBuffer, "batches waiting per engine rank on the bound socket before they are dropped")
	fs.DurationVar(&c.KafkaBatchTimeout, "kafka-batch-timeout", c.KafkaBatchTimeout, "how long the producer waits to fill a batch")
	fs.IntVar(&c.KafkaBatchSize, "kafka-batch-size", c.KafkaBatchSize, "most records per produce request and partition")
	fs.IntVar(&c.KafkaMaxBatchBytes, "kafka-max-batch-bytes", c.KafkaMaxBatchBytes, "bytes per produce request and partition, and so the largest record; at most the KV topic's max.message.bytes")
	fs.StringVar(&c.KafkaCompression, "kafka-compression", c.KafkaCompression, "record compression: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "listen address of /metrics, /healthz, /readyz (empty: off)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound of draining Kafka at shutdown")
}

// brokers splits KafkaBrokers.
func (c Config) brokers() []string { return flagenv.List(c.KafkaBrokers) }

// Validate reports every invalid setting, each naming the flag and the fix.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.brokers()) == 0 {
		bad("-kafka-brokers is empty: give host:port of at least one Kafka broker")
	}
	if c.KVTopic == "" || c.LoadTopic == "" {
		bad("-kv-topic and -load-topic must not be empty (defaults sluice.kv-events.v1, sluice.engine-load.v1)")
	}
	if c.EnginesFile == "" && len(c.Engines) == 0 && c.FleetAdminURL == "" {
		bad("no engines: give -engines FILE, -engine id=...,model=..., or -fleet-admin-url http://decider:7080")
	}
	if c.KVBind != "" {
		if _, err := rankEndpoint(c.KVBind, max(c.KVBindPorts, 1)-1); err != nil {
			bad("-kv-bind: %v", err)
		}
	}
	if c.KVBindPorts < 1 || c.KVBindPorts > 1024 {
		bad("-kv-bind-ports %d: use 1..1024", c.KVBindPorts)
	}
	if c.FleetAdminURL != "" {
		if u, err := url.Parse(c.FleetAdminURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("-fleet-admin-url %q: use the decider's http(s) address, e.g. http://decider:7080", c.FleetAdminURL)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"fleet-poll", c.FleetPoll}, {"shards-poll", c.ShardsPoll}, {"scrape-interval", c.ScrapeInterval}, {"replay-timeout", c.ReplayTimeout},
		{"kafka-batch-timeout", c.KafkaBatchTimeout}, {"shutdown-timeout", c.ShutdownTimeout}} {
		if d.v <= 0 {
			bad("-%s %v: must be positive", d.name, d.v)
		}
	}
	if c.ShardsConfig != "" && c.ShardsPostgresDSN != "" {
		bad("-shards-config and -shards-postgres-dsn are both set: give the one store the deciders use")
	}
	if c.ScrapeTimeout < 0 {
		bad("-scrape-timeout %v: must not be negative (0 = the scrape interval)", c.ScrapeTimeout)
	}
	if c.MaxBufferedRecords < 1 {
		bad("-max-buffered-records %d: must be at least 1 (default 100000)", c.MaxBufferedRecords)
	}
	if c.StreamBuffer < 1 {
		bad("-stream-buffer %d: must be at least 1 (default 4096)", c.StreamBuffer)
	}
	if _, err := compression(c.KafkaCompression); err != nil {
		bad("-kafka-compression: %v", err)
	}
	if c.KafkaBatchSize < 1 {
		bad("-kafka-batch-size %d: must be at least 1", c.KafkaBatchSize)
	}
	if c.KafkaMaxBatchBytes < 64<<10 {
		bad("-kafka-max-batch-bytes %d: must be at least 65536 (default 1048576, the brokers' default max.message.bytes)", c.KafkaMaxBatchBytes)
	}
	return errors.Join(errs...)
}

// compression maps a -kafka-compression name to kafka-go's codec (0 = none).
func compression(name string) (kafka.Compression, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("%q: use none, gzip, snappy, lz4 or zstd", name)
}

func (c Config) scrapeTimeout() time.Duration {
	if c.ScrapeTimeout > 0 {
		return c.ScrapeTimeout
	}
	return c.ScrapeInterval
}
