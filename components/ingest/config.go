package ingest

import (
	"errors"
	"fmt"
	"time"
)

// Default topics, and the defaults other components reuse. Config's field
// docs give every default.
const (
	DefaultLoadTopic       = "sluice.engine-load.v1"
	DefaultKVTopic         = "sluice.kv-events.v1"
	DefaultMaxRetryBackoff = time.Second
	DefaultHealthInterval  = 2 * time.Second
)

// Defaults of the other Config fields, applied by Config.withDefaults.
const (
	defaultClientID = "sluice-ingest"
	defaultMinBytes = 1
	// defaultMaxBytes leaves room for one batch holding a record of defaultMaxRecordBytes
	// plus its framing, so the largest record accepted always fits in one fetch.
	defaultMaxBytes          = 17 << 20
	defaultMaxWait           = 100 * time.Millisecond
	defaultDialTimeout       = 5 * time.Second
	defaultPartitionRefresh  = 30 * time.Second
	defaultMaxUnknownEngines = 10_000
	defaultMaxRecordBytes    = 16 << 20 // the KV wire decoders' payload bound (kvevents.DefaultLimits)
	defaultBadLogInterval    = 30 * time.Second
	defaultRetryBackoff      = 200 * time.Millisecond
	defaultUnhealthyAfter    = 5 * time.Second
)

// Config holds one ingestion component's Kafka settings. The zero value of
// every field but Brokers selects the default its doc gives; Topic defaults
// per component (DefaultLoadTopic or DefaultKVTopic).
type Config struct {
	// Brokers are the bootstrap brokers (host:port); required.
	Brokers []string
	// Topic is the topic to consume.
	Topic string
	// ClientID identifies this consumer to the brokers. Default
	// "sluice-ingest".
	ClientID string
	// MinBytes and MaxBytes bound one fetch response (kafka-go
	// ReaderConfig). Defaults 1 byte and 16 MiB.
	MinBytes, MaxBytes int
	// MaxWait is how long the broker holds a fetch of a partition with
	// fewer than MinBytes new bytes before answering; a partition with
	// records is answered at once. The reader waits a further second for
	// that answer before it drops the connection (readerAnswerAllowance).
	// Default 100ms.
	MaxWait time.Duration
	// DialTimeout bounds one connection attempt to a broker. Default 5s.
	DialTimeout time.Duration
	// PartitionRefresh is how often the topic's partitions are listed again
	// to pick up added partitions. Default 30s.
	PartitionRefresh time.Duration
	// MaxRecordBytes is the largest record value accepted; larger records
	// are counted as absurd_size and skipped. Default 16 MiB, the KV decoders'
	// payload bound, so every record the broker's topic takes up to 16 MiB is used.
	MaxRecordBytes int
	// MaxUnknownEngines bounds how many distinct engine ids the load stream
	// keeps state for (load is kept for engines not yet registered so it is
	// ready when they register). Reports of further new ids are counted as
	// unknown_engine_cap and skipped. Load stream only. Default 10,000.
	MaxUnknownEngines int
	// BadLogInterval is the minimum time between two log lines about bad
	// records of the same kind; the line carries the count since the last.
	// Default 30s.
	BadLogInterval time.Duration
	// RetryBackoff and MaxRetryBackoff bound the pause before a failed
	// partition reader or metadata call is retried (doubling each time,
	// jittered down by up to half). The reader's own reconnect back-off is
	// capped by MaxRetryBackoff too, so consumption resumes within about
	// MaxRetryBackoff of a broker's return. Defaults 200ms and
	// DefaultMaxRetryBackoff.
	RetryBackoff, MaxRetryBackoff time.Duration
	// UnhealthyAfter is how long a component may fail to reach the brokers
	// before Healthy reports an error. Default 5s.
	UnhealthyAfter time.Duration
	// HealthInterval is how often the brokers are asked for every consumed
	// partition's high watermark: the lag gauges then move even when no
	// record arrives, and a lost broker is noticed within HealthInterval +
	// DialTimeout + MaxWait. Default DefaultHealthInterval.
	HealthInterval time.Duration
}

// Validate reports every invalid field with the fix, or nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("ingest: "+format, args...)) }
	if len(c.Brokers) == 0 {
		bad("Brokers: empty; set at least one host:port bootstrap broker")
	}
	for i, b := range c.Brokers {
		if b == "" {
			bad("Brokers[%d]: empty address; give host:port", i)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MinBytes", int64(c.MinBytes)}, {"MaxBytes", int64(c.MaxBytes)}, {"MaxWait", int64(c.MaxWait)},
		{"DialTimeout", int64(c.DialTimeout)}, {"PartitionRefresh", int64(c.PartitionRefresh)},
		{"MaxRecordBytes", int64(c.MaxRecordBytes)}, {"MaxUnknownEngines", int64(c.MaxUnknownEngines)},
		{"BadLogInterval", int64(c.BadLogInterval)}, {"RetryBackoff", int64(c.RetryBackoff)},
		{"MaxRetryBackoff", int64(c.MaxRetryBackoff)}, {"UnhealthyAfter", int64(c.UnhealthyAfter)},
		{"HealthInterval", int64(c.HealthInterval)},
	} {
		if f.v < 0 {
			bad("%s %d: must be >= 0 (0 selects the default)", f.name, f.v)
		}
	}
	if c.MinBytes > 0 && c.MaxBytes > 0 && c.MinBytes > c.MaxBytes {
		bad("MinBytes %d > MaxBytes %d: lower MinBytes or raise MaxBytes", c.MinBytes, c.MaxBytes)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields replaced by defaults; topic is the
// component's default topic.
func (c Config) withDefaults(topic string) Config {
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	defi := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	if c.Topic == "" {
		c.Topic = topic
	}
	if c.ClientID == "" {
		c.ClientID = defaultClientID
	}
	defi(&c.MinBytes, defaultMinBytes)
	defi(&c.MaxBytes, defaultMaxBytes)
	defi(&c.MaxRecordBytes, defaultMaxRecordBytes)
	defi(&c.MaxUnknownEngines, defaultMaxUnknownEngines)
	def(&c.MaxWait, defaultMaxWait)
	def(&c.DialTimeout, defaultDialTimeout)
	def(&c.PartitionRefresh, defaultPartitionRefresh)
	def(&c.BadLogInterval, defaultBadLogInterval)
	def(&c.RetryBackoff, defaultRetryBackoff)
	def(&c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	def(&c.UnhealthyAfter, defaultUnhealthyAfter)
	def(&c.HealthInterval, DefaultHealthInterval)
	c.RetryBackoff = min(c.RetryBackoff, c.MaxRetryBackoff)
	return c
}
