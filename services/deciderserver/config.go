package deciderserver

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sluicehq/sluice/components/enginehealth"
	"github.com/sluicehq/sluice/components/ingest"
	"github.com/sluicehq/sluice/components/limits"
	"github.com/sluicehq/sluice/state/pgstore"
)

// Config is the decider service's configuration, bound to flags with SLUICE_* environment
// fallbacks in main and validated at start-up.
type Config struct {
	// GRPCAddr is the native gRPC listener (the hot path has its own port).
	GRPCAddr string
	// HTTPAddr serves Connect, gRPC-Web, REST (grpc-gateway), /metrics and /healthz.
	HTTPAddr string
	// ConfigPath is a YAML or JSON configuration file; empty runs on the default buckets.
	ConfigPath string
	// ConfigPoll is how often the file is checked for changes.
	ConfigPoll time.Duration
	// LeaseTTL expires leases a caller never released.
	LeaseTTL time.Duration
	// LoadFreshness is how long an engine's load report counts as current.
	LoadFreshness time.Duration
	// ClockSkew is how far in the future a report's capture time may be.
	ClockSkew time.Duration
	// MaxTokenIDs caps token_ids per request.
	MaxTokenIDs int
	// MaxConcurrentDecides bounds the Decide calls in progress on this replica, all protocols
	// together; the excess is answered RESOURCE_EXHAUSTED (REST: 503) at once with a retry
	// hint of ShedRetryAfter. 0 means no bound.
	MaxConcurrentDecides int
	// ShedRetryAfter is the retry hint of a shed call (RetryInfo, Retry-After).
	ShedRetryAfter time.Duration
	// ShutdownTimeout bounds the graceful drain.
	ShutdownTimeout time.Duration

	// PostgresDSN selects the Postgres configuration store (DATABASE_URL when the flag and
	// SLUICE_POSTGRES_DSN are unset); empty keeps the file store. With Postgres, ConfigPath
	// only seeds an empty version log.
	PostgresDSN string
	// ConfigSnapshot is the last-known configuration file the Postgres store rewrites after
	// each load and serves when the database is down at start-up. Empty means
	// ConfigPath + ".last-known.json", or sluice-config.last-known.json in the working
	// directory without a ConfigPath; "-" disables it.
	ConfigSnapshot string
	// PostgresConnectTimeout bounds each connection attempt to Postgres.
	PostgresConnectTimeout time.Duration
	// PostgresPingInterval, PostgresQueryTimeout, PostgresWriteTimeout and
	// PostgresReconnectMax are the Postgres store's deadlines (pgstore.Config): a hung
	// backend is noticed within ping interval + query timeout, an admin write never waits
	// longer than the write timeout, and the listener retries at most every reconnect max.
	PostgresPingInterval, PostgresQueryTimeout, PostgresWriteTimeout, PostgresReconnectMax time.Duration
	// AdminTokens are comma-separated bearer tokens with the admin (read-write) role.
	AdminTokens string
	// ViewerTokens are comma-separated bearer tokens with the viewer (read-only) role.
	ViewerTokens string
	// AdminTokensFile holds one role:token per line (role admin or viewer; # comments).
	AdminTokensFile string
	// DecideToken, when set, is required (or an admin token) on Decide and Release.
	DecideToken string

	// Health configures the active engine probe and the per-engine circuit breaker.
	Health enginehealth.Config
	// AffinitySweep is how often idle session and sticky bindings are dropped.
	AffinitySweep time.Duration
	// Ingest configures Kafka ingestion of load reports and KV events.
	Ingest IngestConfig
	// Shard is the model shard this replica serves (the configuration document's shards);
	// empty serves the models no shard lists, on the unsuffixed topics.
	Shard string
	// Console serves the web console at /ui/ on the HTTP port (docs/console.md).
	Console bool
}

// DefaultConfig returns the defaults every flag starts from.
func DefaultConfig() Config {
	return Config{
		Health:        enginehealth.DefaultConfig(),
		AffinitySweep: time.Minute,
		Ingest: IngestConfig{LoadTopic: "sluice.engine-load.v1", KVTopic: "sluice.kv-events.v1",
			SnapshotInterval: 30 * time.Second, RetryBackoffMax: ingest.DefaultMaxRetryBackoff, HealthInterval: ingest.DefaultHealthInterval},
		GRPCAddr:      ":7070",
		HTTPAddr:      ":7080",
		ConfigPoll:    2 * time.Second,
		LeaseTTL:      10 * time.Minute,
		LoadFreshness: 5 * time.Second,
		MaxTokenIDs:   limits.DefaultMaxTokenIDs,

		MaxConcurrentDecides: 128,
		ShedRetryAfter:       time.Second,
		ShutdownTimeout:      10 * time.Second,

		PostgresConnectTimeout: 5 * time.Second,
		PostgresPingInterval:   pgstore.DefaultPingInterval,
		PostgresQueryTimeout:   pgstore.DefaultQueryTimeout,
		PostgresWriteTimeout:   pgstore.DefaultWriteTimeout,
		PostgresReconnectMax:   pgstore.DefaultReconnectMax,
		Console:                true,
	}
}

// RegisterFlags binds c's fields to fs; values already in c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Health.ProbeInterval, "probe-interval", c.Health.ProbeInterval, "active health probe interval per engine; 0 disables probing")
	fs.DurationVar(&c.Health.ProbeTimeout, "probe-timeout", c.Health.ProbeTimeout, "timeout of one health probe")
	fs.StringVar(&c.Health.ProbePath, "probe-path", c.Health.ProbePath, "health endpoint path probed on each engine URL")
	fs.IntVar(&c.Health.ProbeFailures, "probe-failures", c.Health.ProbeFailures, "consecutive failed probes that make an engine unhealthy")
	fs.IntVar(&c.Health.ProbeSuccesses, "probe-successes", c.Health.ProbeSuccesses, "consecutive good probes that make it healthy again")
	fs.IntVar(&c.Health.BreakerFailures, "breaker-failures", c.Health.BreakerFailures, "consecutive dispatch failures (reported through Release) that open an engine's circuit breaker; 0 disables")
	fs.BoolVar(&c.Health.TrustNewEngines, "trust-new-engines", c.Health.TrustNewEngines, "make a newly registered engine a candidate before its first successful health probe (default: it waits for one)")
	fs.DurationVar(&c.Health.BreakerCoolDown, "breaker-cool-down", c.Health.BreakerCoolDown, "how long an open breaker keeps the engine out before one trial dispatch")
	c.Ingest.registerFlags(fs)
	fs.DurationVar(&c.AffinitySweep, "affinity-sweep", c.AffinitySweep, "how often idle session/sticky bindings are dropped")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "native gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address: Connect, gRPC-Web, REST, /metrics, /healthz")
	fs.StringVar(&c.ConfigPath, "config", c.ConfigPath, "bucket/engine configuration file (YAML or JSON); empty = default buckets plain and pd")
	fs.DurationVar(&c.ConfigPoll, "config-poll", c.ConfigPoll, "how often the configuration file is checked for changes")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "expire leases not released within this time")
	fs.DurationVar(&c.LoadFreshness, "load-freshness", c.LoadFreshness, "how long an engine load report stays current")
	fs.DurationVar(&c.ClockSkew, "clock-skew", c.ClockSkew, "tolerated clock skew of engine report capture times")
	fs.IntVar(&c.MaxTokenIDs, "max-token-ids", c.MaxTokenIDs, "largest token_ids list a Decide request may carry; every request size limit (gRPC, Connect, REST) is derived from it")
	fs.IntVar(&c.MaxConcurrentDecides, "max-concurrent-decides", c.MaxConcurrentDecides, "Decide calls in progress on this replica beyond which new ones are shed at once (RESOURCE_EXHAUSTED / 503 with a retry hint); 0 = no bound")
	fs.DurationVar(&c.ShedRetryAfter, "shed-retry-after", c.ShedRetryAfter, "retry hint given to shed Decide calls")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "graceful shutdown deadline")
	fs.StringVar(&c.PostgresDSN, "postgres-dsn", c.PostgresDSN, "Postgres configuration store (falls back to DATABASE_URL); empty = file store")
	fs.StringVar(&c.ConfigSnapshot, "config-snapshot", c.ConfigSnapshot, "last-known configuration file served when Postgres is down at start-up; empty = beside -config; - = none")
	fs.DurationVar(&c.PostgresConnectTimeout, "postgres-connect-timeout", c.PostgresConnectTimeout, "bound on each Postgres connection attempt")
	fs.DurationVar(&c.PostgresPingInterval, "postgres-ping-interval", c.PostgresPingInterval, "idle time after which the configuration listener checks its Postgres connection")
	fs.DurationVar(&c.PostgresQueryTimeout, "postgres-query-timeout", c.PostgresQueryTimeout, "deadline of each statement the configuration store runs itself (ping, reload, reads)")
	fs.DurationVar(&c.PostgresWriteTimeout, "postgres-write-timeout", c.PostgresWriteTimeout, "server-side deadline of one admin write transaction")
	fs.DurationVar(&c.PostgresReconnectMax, "postgres-reconnect-max", c.PostgresReconnectMax, "longest wait between configuration listener reconnection attempts (jittered)")
	fs.StringVar(&c.AdminTokens, "admin-token", c.AdminTokens, "admin (read-write) bearer tokens, comma-separated")
	fs.StringVar(&c.ViewerTokens, "viewer-token", c.ViewerTokens, "viewer (read-only) bearer tokens, comma-separated")
	fs.StringVar(&c.AdminTokensFile, "admin-tokens-file", c.AdminTokensFile, "file of role:token lines (role admin or viewer)")
	fs.StringVar(&c.DecideToken, "decide-token", c.DecideToken, "bearer token required on Decide/Release; empty = open")
	fs.StringVar(&c.Shard, "shard", c.Shard, "model shard this replica serves (an id under shards in the configuration): it reads <load-topic>.<shard> and <kv-topic>.<shard> and refuses other models with WRONG_SHARD; empty = unsharded")
	fs.BoolVar(&c.Console, "console", c.Console, "serve the web console at /ui/ on the HTTP port (viewer token to read, admin token to write); -console=false turns it off")
}

// FillFromEnvironment applies fallbacks that are not SLUICE_* variables: DATABASE_URL for
// PostgresDSN. Call it after parsing flags.
func (c *Config) FillFromEnvironment() {
	if c.PostgresDSN == "" {
		c.PostgresDSN = os.Getenv("DATABASE_URL")
	}
}

// snapshotPath resolves ConfigSnapshot's default; "" means none.
func (c *Config) snapshotPath() string {
	switch {
	case c.ConfigSnapshot == "-":
		return ""
	case c.ConfigSnapshot != "":
		return c.ConfigSnapshot
	case c.ConfigPath != "":
		return c.ConfigPath + ".last-known.json"
	}
	return "sluice-config.last-known.json"
}

// Validate checks every field and reports all problems, each naming the flag and the fix.
func (c *Config) Validate() error {
	var errs []error
	for _, a := range []struct{ flag, v string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("-%s %q: want host:port (e.g. :7070): %w", a.flag, a.v, err))
		}
	}
	positive := []struct {
		flag string
		v    time.Duration
	}{{"config-poll", c.ConfigPoll}, {"lease-ttl", c.LeaseTTL}, {"load-freshness", c.LoadFreshness}, {"shutdown-timeout", c.ShutdownTimeout},
		{"postgres-connect-timeout", c.PostgresConnectTimeout}, {"affinity-sweep", c.AffinitySweep},
		{"postgres-ping-interval", c.PostgresPingInterval}, {"postgres-query-timeout", c.PostgresQueryTimeout},
		{"postgres-write-timeout", c.PostgresWriteTimeout}, {"postgres-reconnect-max", c.PostgresReconnectMax}}
	for _, p := range positive {
		if p.v <= 0 {
			errs = append(errs, fmt.Errorf("-%s %v: must be positive", p.flag, p.v))
		}
	}
	if c.ClockSkew < 0 {
		errs = append(errs, fmt.Errorf("-clock-skew %v: must not be negative", c.ClockSkew))
	}
	if c.MaxConcurrentDecides < 0 {
		errs = append(errs, fmt.Errorf("-max-concurrent-decides %d: must not be negative (0 = no bound)", c.MaxConcurrentDecides))
	}
	if c.ShedRetryAfter <= 0 {
		errs = append(errs, fmt.Errorf("-shed-retry-after %v: must be positive", c.ShedRetryAfter))
	}
	if err := limits.Validate(c.MaxTokenIDs); err != nil {
		errs = append(errs, err)
	}
	if err := c.Health.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
