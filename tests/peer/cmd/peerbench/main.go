// Command peerbench runs the real SGLang router (sglang-router from PyPI) and sluice's gateway +
// decider + enginelink side by side against the same simulated SGLang engines (sluice
// simengine processes), replaying the same trace with the same client (tests/peer) in
// interleaved rounds, and writes one markdown table. `make peer-bench` (scripts/peer-bench.sh)
// installs the router, starts a Kafka broker and builds sluice first; see BENCHMARKS.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/tests/peer"
)

type flags struct {
	tracePath                      string
	from, window                   time.Duration
	speed, load                    float64
	engines, rounds                int
	maxTokens                      int
	timeout                        time.Duration
	out, workDir                   string
	sluiceBin, routerPython        string
	brokers                        string
	kafkaPID                       int
	kafkaKind                      string
	cacheBlocks, maxRunning        int
	prefillTokPerSec, decodeMs     float64
	sglangPolicies, sluicePolicies string
	sluiceTokenizer                string
	gatewayArgs, deciderArgs       string
	linkArgs                       string
	cacheAwareSettings             string
	scrapeInterval                 time.Duration
	kvInterval                     time.Duration
	brokerWarmup                   int
	closed                         closedFlags
}

func main() {
	var f flags
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.CommandLine
	fs.StringVar(&f.tracePath, "trace", env("PEER_TRACE", "testdata/traces/conversation_trace.jsonl"), "trace file: Mooncake .jsonl or Azure .csv (env PEER_TRACE)")
	fs.DurationVar(&f.from, "from", 0, "start of the window in trace time")
	fs.DurationVar(&f.window, "window", 10*time.Minute, "length of the trace window replayed (trace time)")
	fs.Float64Var(&f.speed, "speed", 0, "time compression of the trace: arrivals are divided by it, and the engines' simulated durations too (0 = the window in 2 minutes)")
	fs.Float64Var(&f.load, "load", 4, "load factor: the engines run speed/load times faster than real, so the default offers four times the trace's real rate (4 engines then queue at its bursts)")
	fs.IntVar(&f.engines, "engines", 4, "simulated engines")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds; each runs every system × policy once, in a rotated order")
	fs.IntVar(&f.maxTokens, "max-tokens-cap", 128, "cap on each request's max_tokens (the trace's output length); every output token is a stream chunk the routers relay and the client parses, on the same cores")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Minute, "bound on one request")
	fs.StringVar(&f.out, "out", "BENCHMARKS-peer.md", "markdown output file (also printed to stdout); empty = stdout only")
	fs.StringVar(&f.workDir, "work-dir", "", "logs and configuration (default: a new temp dir, kept)")
	fs.StringVar(&f.sluiceBin, "sluice", env("PEER_SLUICE", "bin/sluice"), "sluice binary (env PEER_SLUICE)")
	fs.StringVar(&f.routerPython, "router-python", env("PEER_ROUTER_PYTHON", ""), "python of the venv with sglang-router (env PEER_ROUTER_PYTHON)")
	fs.StringVar(&f.brokers, "kafka-brokers", env("SLUICE_TEST_KAFKA_BROKERS", ""), "Kafka brokers for sluice's KV events and load (env SLUICE_TEST_KAFKA_BROKERS)")
	fs.IntVar(&f.kafkaPID, "kafka-pid", 0, "the broker's pid, to report its CPU apart")
	fs.StringVar(&f.kafkaKind, "kafka-kind", env("PEER_KAFKA_KIND", "Apache Kafka broker"), "how the broker is described in the output")
	fs.StringVar(&f.sglangPolicies, "sglang-policies", "cache_aware,round_robin,power_of_two", "sglang-router policies (empty = skip the router)")
	fs.StringVar(&f.sluicePolicies, "sluice-policies", "cache_aware,power_of_two,load_based", "sluice policies (empty = skip sluice); POLICY+ids sends that policy's prompts as token ids (no /tokenize in the gateway)")
	fs.IntVar(&f.cacheBlocks, "cache-blocks", 32768, "engine prefix cache, blocks of 16 tokens (32768 = 512k tokens)")
	fs.IntVar(&f.maxRunning, "max-running", 32, "engine running slots")
	fs.Float64Var(&f.prefillTokPerSec, "prefill-tokens-per-sec", 20000, "engine prefill speed: uncached tokens/s of each engine's one FCFS prefill server (real time)")
	fs.Float64Var(&f.decodeMs, "decode-ms-per-token", 20, "engine time per output token (real time)")
	fs.StringVar(&f.sluiceTokenizer, "sluice-tokenizer", "engine", "the gateway's -tokenizer (engine: the engine's /tokenize, as a cache_aware deployment on SGLang engines would); "+
		"auto: engine for cache_aware, estimate (the gateway's default) for policies that read no token ids")
	fs.DurationVar(&f.scrapeInterval, "scrape-interval", 0, "sluice enginelink's -scrape-interval, the engines' load report interval (real time); "+
		"0 = its default 500ms divided by how much faster than real the engines run (speed ÷ load in trace replays), so sluice hears its engines as often, "+
		"measured in their own time, as it would at real speed (sglang-router keeps no such interval: it counts its own requests)")
	fs.DurationVar(&f.kvInterval, "kv-interval", 0, "the simulated engines' -kv-interval, how often they publish KV events (real time); "+
		"0 = simengine's default 50ms divided by how much faster than real the engines run, at least 5ms, so sluice's index lags the engines, "+
		"measured in their own time, as at real speed (a real engine publishes every scheduler step; sglang-router reads no KV events)")
	fs.IntVar(&f.brokerWarmup, "broker-warmup-rounds", 2, "open mode: uncounted replays of the window through sluice's first configuration before the counted rounds, "+
		"so the Kafka broker, started fresh by scripts/peer-bench.sh, has compiled its hot paths (a production broker has long been warm; "+
		"a cold JVM spent 15 ms of CPU per request in the first round, 4 in the third, on the 2 cores every system shares)")
	fs.StringVar(&f.gatewayArgs, "gateway-args", "", "extra flags for sluice's gateway, space-separated (e.g. -pprof-addr :6060)")
	fs.StringVar(&f.deciderArgs, "decider-args", "", "extra flags for sluice's decider, space-separated")
	fs.StringVar(&f.linkArgs, "enginelink-args", "", "extra flags for sluice's enginelink, space-separated (e.g. -pprof-addr :6062)")
	fs.StringVar(&f.cacheAwareSettings, "cache-aware-settings", "", "more settings of sluice's cache_aware policy, as entries of a YAML flow mapping, "+
		"e.g. \"min_match_tokens: 64\" (closed mode's default is \"min_match_tokens: 16\": the policy's own default of 1024 tokens exceeds "+
		"that mode's ~130-token prompts, so no request would be routed by its prefix, while sglang-router's cache_aware has no such floor)")
	f.closed.register(fs)
	flag.Parse()
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.closed.mode == "closed" {
		if !set["sglang-policies"] {
			f.sglangPolicies = "round_robin,power_of_two,cache_aware"
		}
		if !set["sluice-policies"] {
			f.sluicePolicies = "power_of_two,cache_aware"
		}
		if !set["rounds"] {
			f.rounds = 3
		}
		if !set["sluice-tokenizer"] {
			f.sluiceTokenizer = "auto"
		}
		if !set["cache-aware-settings"] {
			f.cacheAwareSettings = "min_match_tokens: 16"
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[peerbench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

type config struct{ system, policy string }

func run(ctx context.Context, f flags) error {
	switch f.closed.mode {
	case "closed":
		return runClosedMode(ctx, f)
	case "open":
	default:
		return fmt.Errorf("-mode %q: use open (trace replay) or closed (closed-loop throughput)", f.closed.mode)
	}
	all, err := trace.Read(f.tracePath)
	if err != nil {
		return err
	}
	reqs := trace.Window(all, f.from, f.window)
	if len(reqs) == 0 {
		return fmt.Errorf("no request in [%v, %v) of %s", f.from, f.from+f.window, f.tracePath)
	}
	if f.speed <= 0 {
		f.speed = max(1, f.window.Seconds()/120)
	}
	reqs = trace.Scale(reqs, f.speed)
	if f.scrapeInterval <= 0 {
		f.scrapeInterval = scaledScrape(f.speed / f.load)
	}
	if f.kvInterval <= 0 {
		f.kvInterval = scaledKVInterval(f.speed / f.load)
	}
	span := reqs[len(reqs)-1].Arrival
	var cfgs []config
	for _, p := range split(f.sglangPolicies) {
		cfgs = append(cfgs, config{"sglang-router", p})
	}
	for _, p := range split(f.sluicePolicies) {
		cfgs = append(cfgs, config{"sluice", p})
		if f.closed.baseline != "" {
			cfgs = append(cfgs, config{"sluice-base", p})
		}
	}
	if f.closed.baseline != "" {
		if f.closed.baseline, err = filepath.Abs(f.closed.baseline); err != nil {
			return err
		}
	}
	if len(cfgs) == 0 {
		return errors.New("nothing to run: -sglang-policies and -sluice-policies are both empty")
	}
	if len(split(f.sglangPolicies)) > 0 && f.routerPython == "" {
		return errors.New("-router-python: the venv python with sglang-router is needed (scripts/peer-bench.sh makes it)")
	}
	if len(split(f.sluicePolicies)) > 0 && f.brokers == "" {
		return errors.New("-kafka-brokers: sluice's cache_aware needs KV events through Kafka (scripts/peer-bench.sh starts a broker)")
	}
	if f.workDir == "" {
		if f.workDir, err = os.MkdirTemp("", "sluice-peerbench-"); err != nil {
			return err
		}
	}
	if f.sluiceBin, err = filepath.Abs(f.sluiceBin); err != nil {
		return err
	}
	var in, out int
	for _, r := range reqs {
		in += r.InputTokens
		out += peer.MaxTokens(r, f.maxTokens)
	}
	logf("trace %s: %d requests in [%v, %v), %d input and %d output tokens (cap %d); speed %.2g: a round offers them in %v (%.1f req/s)",
		f.tracePath, len(reqs), f.from, f.from+f.window, in, out, f.maxTokens, f.speed, span.Round(time.Second), float64(len(reqs))/max(span.Seconds(), 1e-9))
	logf("%d configurations × %d rounds, %d engines; logs in %s", len(cfgs), f.rounds, f.engines, f.workDir)

	var rounds []peer.Round
	started := time.Now()
	if err := warmBroker(ctx, f, cfgs, reqs); err != nil {
		return err
	}
	for round := range f.rounds {
		for j := range cfgs {
			c := cfgs[(j+round)%len(cfgs)] // rotate so no configuration always runs first
			if err := ctx.Err(); err != nil {
				return err
			}
			logf("round %d/%d: %s %s", round+1, f.rounds, c.system, c.policy)
			r, err := runOne(ctx, f, c, reqs, filepath.Join(f.workDir, fmt.Sprintf("r%d-%s-%s", round+1, c.system, c.policy)))
			if err != nil {
				return fmt.Errorf("round %d %s %s: %w", round+1, c.system, c.policy, err)
			}
			s := peer.Summarize(r)
			logf("  %d requests, %d errors, hit %.2f%%, TTFT p50 %v p90 %v p99 %v, e2e p50 %v, %.2f req/s, router CPU %.2f ms/req%s",
				s.Requests, s.Errors, 100*s.HitRate, s.TTFT50.Round(time.Millisecond), s.TTFT90.Round(time.Millisecond), s.TTFT99.Round(time.Millisecond), s.E2E50.Round(time.Millisecond),
				s.ReqPerSec, s.CPUPerReq, firstErr(s))
			rounds = append(rounds, r)
		}
	}
	var b bytes.Buffer
	writeReport(&b, f, reqs, span, in, out, rounds, time.Since(started))
	if _, err := os.Stdout.Write(b.Bytes()); err != nil {
		return err
	}
	if f.out != "" {
		if err := os.WriteFile(f.out, b.Bytes(), 0o644); err != nil {
			return err
		}
		logf("wrote %s", f.out)
	}
	return nil
}

// warmBroker replays the window f.brokerWarmup times through sluice's first configuration and
// discards the results: the broker serves only sluice, and a JVM fresh from its start runs its
// produce and fetch paths interpreted until they are compiled, which costs the shared cores
// during the first counted rounds (not the broker's steady state, which is what a deployment
// sees). sglang-router and the engines keep no state between rounds, so they need no warm-up.
func warmBroker(ctx context.Context, f flags, cfgs []config, reqs []trace.Request) error {
	i := slices.IndexFunc(cfgs, func(c config) bool { return c.system == "sluice" })
	if i < 0 || f.brokerWarmup <= 0 {
		return nil
	}
	c := cfgs[i]
	for w := range f.brokerWarmup {
		logf("broker warm-up %d/%d (not counted): %s %s", w+1, f.brokerWarmup, c.system, c.policy)
		r, err := runOne(ctx, f, c, reqs, filepath.Join(f.workDir, fmt.Sprintf("warmup%d-%s-%s", w+1, c.system, c.policy)))
		if err != nil {
			return fmt.Errorf("broker warm-up %d: %w", w+1, err)
		}
		logf("  broker CPU %.2f ms/req", float64(r.Extra)/float64(time.Millisecond)/float64(max(len(r.Results), 1)))
	}
	return nil
}

func firstErr(s peer.Summary) string {
	if s.FirstErr == "" {
		return ""
	}
	return "; first error: " + s.FirstErr
}

func split(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func writeReport(w io.Writer, f flags, reqs []trace.Request, span time.Duration, in, out int, rounds []peer.Round, took time.Duration) {
	fmt.Fprintf(w, "Trace `%s`, window [%v, %v): %d requests, %d input tokens, %d output tokens (max_tokens = output length capped at %d). "+
		"Speed %.3g: arrivals compressed into %v (%.1f req/s offered), engines %.3g× faster than real (load factor %.3g). "+
		"%d simulated SGLang engines (sluice simengine: %d slots, prefix cache %d blocks × 16 tokens, prefill %.0f tok/s, decode %.0f ms/token, real-time figures). "+
		"sluice's enginelink scrapes each engine's load every %v (real time; %v of the engines' time); the engines publish KV events every %v (%v of their time). "+
		"%d rounds, configurations interleaved (rotated each round); %s in all. "+
		"An infinite prefix cache shared by all engines would hit %.1f%% of the prompt tokens.\n\n",
		f.tracePath, f.from, f.from+f.window, len(reqs), in, out, f.maxTokens, f.speed, span.Round(time.Second), float64(len(reqs))/max(span.Seconds(), 1e-9),
		f.speed/f.load, f.load, f.engines, f.maxRunning, f.cacheBlocks, f.prefillTokPerSec, f.decodeMs,
		f.scrapeInterval, time.Duration(float64(f.scrapeInterval)*f.speed/f.load).Round(time.Millisecond),
		f.kvInterval, time.Duration(float64(f.kvInterval)*f.speed/f.load).Round(time.Millisecond), f.rounds, took.Round(time.Second),
		100*peer.IdealHitRate(reqs))
	_ = peer.Table(w, rounds)
	var paired bytes.Buffer
	if peer.PairedTable(&paired, rounds, "sglang-router") == nil && paired.Len() > 0 {
		fmt.Fprintf(w, "\n%s", paired.Bytes())
	}
	var kafkaCPU time.Duration
	var kafkaReqs int
	for _, r := range rounds {
		if r.System == "sluice" {
			kafkaCPU += r.Extra
			kafkaReqs += len(r.Results)
		}
	}
	fmt.Fprintf(w, "\nCells are the median over rounds with the (min–max) range. Prefix hit rate is cached ÷ prompt tokens as the engines "+
		"reported them in each stream's usage chunk; TTFT is the time to the first chunk with text at the client; req/s is completed "+
		"requests ÷ (last end − first send). Router CPU is utime+stime from /proc of the router's process tree during the replay: "+
		"sglang-router's Python launcher with its Rust router; sluice's gateway + decider + enginelink. sluice runs as in production: "+
		"engine ZMQ KV events and /v1/loads → enginelink → Kafka (%s) → decider; the gateway counts tokens with the engine's /tokenize. ",
		f.kafkaKind)
	if strings.Contains(f.sluicePolicies, "+ids") {
		fmt.Fprint(w, "Policies marked +ids get the same prompts as token ids (the engine's tokens of the text), so the gateway skips /tokenize; "+
			"sglang-router 0.3.2 refuses an id-array prompt on /v1/completions. ")
	}
	if kafkaReqs > 0 && f.kafkaPID > 0 {
		fmt.Fprintf(w, "The Kafka broker's own CPU, not counted above, was %.2f ms/req over sluice's rounds.", float64(kafkaCPU)/float64(time.Millisecond)/float64(kafkaReqs))
	}
	if kafkaReqs > 0 && f.brokerWarmup > 0 {
		fmt.Fprintf(w, " Before the counted rounds, %d uncounted replays through sluice warmed the broker's JVM (-broker-warmup-rounds).", f.brokerWarmup)
	}
	fmt.Fprintln(w)
}

// defaultKVInterval is simengine's default -kv-interval.
const defaultKVInterval = 50 * time.Millisecond

// scaledKVInterval is the KV-event period that keeps simengine's default in the engines' own
// time when they run engineSpeed times faster than real, at least 5ms.
func scaledKVInterval(engineSpeed float64) time.Duration {
	if engineSpeed <= 1 {
		return defaultKVInterval
	}
	return max(5*time.Millisecond, time.Duration(float64(defaultKVInterval)/engineSpeed).Round(time.Millisecond))
}

// defaultScrape is enginelink's default -scrape-interval.
const defaultScrape = 500 * time.Millisecond

// scaledScrape is the scrape interval that keeps enginelink's default in the engines' own time
// when they run engineSpeed times faster than real, bounded below by 10ms so a very high speed
// does not turn the scrapes into the benchmark's load.
func scaledScrape(engineSpeed float64) time.Duration {
	if engineSpeed <= 1 {
		return defaultScrape
	}
	return max(10*time.Millisecond, time.Duration(float64(defaultScrape)/engineSpeed).Round(time.Millisecond))
}
