// Package simulate is `sluice simulate`: it replays a workload trace (internal/trace) through
// the real decider — the same configuration parsing, buckets, groups, policies, admission,
// leases, load table, KV prefix index and affinity store a decider process builds
// (components/deciderstate) — against a fleet of simulated engines (the engine model of
// services/simengine/engine in its discrete-event form, engine.Sim), in virtual time: a
// discrete-event loop with no sleeping, whose clock (state/clock.Manual) is the one every state
// table reads. Engines feed the decider as in production: a load report per engine every
// report interval and KV-event batches after a lag, as the protobuf records simengine produces,
// through the ingesters' Apply (the same decode and apply code as a Kafka read). Each policy
// runs on a fresh, identical fleet; the report compares them.
package simulate

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/state/config"
)

// Config is one simulation.
type Config struct {
	// Trace is the trace file (.jsonl Mooncake, .csv Azure).
	Trace string
	// WindowStart and Window select the requests arriving in [start, start+window); Window 0
	// is to the end.
	WindowStart, Window time.Duration
	// Speed divides arrival times (2 = twice the request rate).
	Speed float64
	// Engines is the fleet size when the configuration lists no workers.
	Engines int
	// The engine model (engine.Config); zero fields take engine's defaults.
	CacheBlocks, BlockSize, MaxRunning    int
	PrefillTokensPerSec, DecodeMsPerToken float64
	// ReportInterval is the time between two load reports of an engine; KVLag is how long a
	// KV-event batch takes from the engine to the decider's index.
	ReportInterval, KVLag time.Duration
	// LoadFreshness is the decider's -load-freshness.
	LoadFreshness time.Duration
	// Seed seeds the engines' block hash chains and the sampling policies' random source
	// (random, power_of_two, cache_aware's miss fallback; policy.Deps.IntN): a run repeats
	// exactly for a seed.
	Seed uint64
	// ConfigPath is a decider configuration file; empty is one plain bucket over the engines.
	ConfigPath string
	// Policies are the policy types to compare (each the plain default_policy of a fresh run);
	// empty with ConfigPath runs the file's own policies once.
	Policies string
	// Out is a directory for report.md and report.json; empty prints the markdown only.
	Out string
	// Predictions, when set, is a directory for one CSV per decider policy with every decision's
	// predicted TTFT for the chosen engine (ttft_aware's estimate and its parts; explain output)
	// next to the TTFT the simulated engine produced. Off by default: explaining costs time.
	Predictions string
}

// DefaultConfig is the simulation the flags default to.
func DefaultConfig() Config {
	return Config{Speed: 1, Engines: 8, CacheBlocks: engine.DefaultCacheBlocks, BlockSize: engine.DefaultBlockSize,
		MaxRunning: engine.DefaultMaxRunning, PrefillTokensPerSec: engine.DefaultPrefillTokensPerSec,
		DecodeMsPerToken: engine.DefaultDecodeMsPerToken, ReportInterval: 500 * time.Millisecond, KVLag: 100 * time.Millisecond,
		LoadFreshness: 5 * time.Second, Seed: 1,
		Policies: strings.Join([]string{config.PolicyRoundRobin, config.PolicyPowerOfTwo, config.PolicyLoadBased, config.PolicyCacheAware}, ",")}
}

// RegisterFlags binds the flags; the values already in c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Trace, "trace", c.Trace, "trace file: Mooncake JSON Lines (.jsonl) or Azure CSV (.csv)")
	fs.DurationVar(&c.WindowStart, "window-start", c.WindowStart, "replay the requests arriving from this offset into the trace")
	fs.DurationVar(&c.Window, "window", c.Window, "length of the replayed window; 0 = to the end")
	fs.Float64Var(&c.Speed, "speed", c.Speed, "arrival speed-up (2 = arrivals twice as dense)")
	fs.IntVar(&c.Engines, "engines", c.Engines, "simulated engines (when -config lists no workers)")
	fs.IntVar(&c.CacheBlocks, "cache-blocks", c.CacheBlocks, "prefix cache per engine, in blocks")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per KV block")
	fs.Float64Var(&c.PrefillTokensPerSec, "prefill-tokens-per-sec", c.PrefillTokensPerSec, "each engine's prefill throughput for uncached prompt tokens (one request at a time, FCFS)")
	fs.Float64Var(&c.DecodeMsPerToken, "decode-ms-per-token", c.DecodeMsPerToken, "time per output token after the first, ms")
	fs.IntVar(&c.MaxRunning, "max-running", c.MaxRunning, "requests an engine runs at once; the rest queue (FIFO)")
	fs.DurationVar(&c.ReportInterval, "report-interval", c.ReportInterval, "time between two load reports of an engine")
	fs.DurationVar(&c.KVLag, "kv-lag", c.KVLag, "delay from an engine's KV event to the decider's prefix index")
	fs.DurationVar(&c.LoadFreshness, "load-freshness", c.LoadFreshness, "the decider's -load-freshness")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the engines' block hash chains and of the policies' sampling (random, power_of_two, cache_aware's miss fallback): a run repeats exactly for a seed")
	fs.StringVar(&c.ConfigPath, "config", c.ConfigPath, "decider configuration file (default: one plain bucket over the engines)")
	fs.StringVar(&c.Policies, "policies", c.Policies, "comma-separated policy types to compare, each on a fresh identical fleet (the plain default_policy; groups with their own policy keep it); peer:NAME is a harness-only reference router instead of the decider ("+peerPrefix+strings.Join(peerNames, ", "+peerPrefix)+"); empty with -config runs the file as is")
	fs.StringVar(&c.Out, "out", c.Out, "directory for report.md and report.json (default: print the markdown report)")
	fs.StringVar(&c.Predictions, "predictions", c.Predictions, "directory for predictions-POLICY.csv: per decision, the chosen engine's predicted TTFT and its parts (ttft_aware) next to the simulated TTFT; empty = off")
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Trace == "" {
		errs = append(errs, errors.New("-trace: required"))
	}
	if !(c.Speed > 0) {
		errs = append(errs, fmt.Errorf("-speed %v: must be > 0", c.Speed))
	}
	if c.Engines < 1 {
		errs = append(errs, fmt.Errorf("-engines %d: must be >= 1", c.Engines))
	}
	if c.WindowStart < 0 || c.Window < 0 {
		errs = append(errs, fmt.Errorf("-window-start %v, -window %v: must be >= 0", c.WindowStart, c.Window))
	}
	if c.ReportInterval <= 0 {
		errs = append(errs, fmt.Errorf("-report-interval %v: must be > 0", c.ReportInterval))
	}
	if c.KVLag < 0 {
		errs = append(errs, fmt.Errorf("-kv-lag %v: must be >= 0", c.KVLag))
	}
	if c.LoadFreshness <= 0 {
		errs = append(errs, fmt.Errorf("-load-freshness %v: must be > 0", c.LoadFreshness))
	}
	if c.Policies == "" && c.ConfigPath == "" {
		errs = append(errs, errors.New("-policies: empty; name at least one policy, or give -config"))
	}
	for _, p := range c.policies() {
		if isPeer(p) && !slices.Contains(peerNames, strings.TrimPrefix(p, peerPrefix)) {
			errs = append(errs, fmt.Errorf("-policies: unknown baseline %q (known: %s%s)", p, peerPrefix, strings.Join(peerNames, ", "+peerPrefix)))
		}
	}
	if c.Engines > maxPeerEngines && strings.Contains(c.Policies, peerPrefix) {
		errs = append(errs, fmt.Errorf("-engines %d: the peer baselines route at most %d engines", c.Engines, maxPeerEngines))
	}
	if err := c.engineConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) engineConfig() engine.Config {
	return engine.Config{Role: engine.RolePlain, BlockSize: c.BlockSize, CacheBlocks: c.CacheBlocks, MaxRunning: c.MaxRunning,
		PrefillTokensPerSec: c.PrefillTokensPerSec, DecodeMsPerToken: c.DecodeMsPerToken, HashSeed: c.Seed}
}

func (c Config) policies() []string { return flagenv.List(c.Policies) }
