package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/tests/peer"
)

// closedFlags configure -mode closed: throughput at a fixed number of clients, each sending
// its next small chat completion as soon as the last one answered.
type closedFlags struct {
	mode             string
	clients          string
	duration, warmup time.Duration
	speed            float64
	maxTokens        int
	stream           bool
	prefixes         int
	prefixW, suffixW int
	closedTimeout    time.Duration
	brokerWarmup     int
	// baseline is a second sluice binary (e.g. main's) run as system "sluice-base" beside
	// "sluice", for before/after figures from one run.
	baseline string
}

func (c *closedFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.mode, "mode", "open", "open: replay the trace at its arrivals; closed: closed-loop throughput at -clients")
	fs.StringVar(&c.clients, "clients", "1,16,64", "closed mode: concurrent clients, one run per value")
	fs.DurationVar(&c.duration, "duration", 8*time.Second, "closed mode: measured time per run")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Second, "closed mode: unmeasured time before each run")
	fs.Float64Var(&c.speed, "closed-speed", 1000, "closed mode: engine speed (1000 = a thousand times faster than real), so the routers are the bottleneck")
	fs.IntVar(&c.maxTokens, "closed-max-tokens", 16, "closed mode: max_tokens of every request")
	fs.BoolVar(&c.stream, "closed-stream", false, "closed mode: ask for SSE streams")
	fs.IntVar(&c.prefixes, "closed-prefixes", 32, "closed mode: distinct shared system prompts")
	fs.IntVar(&c.prefixW, "closed-prefix-words", 96, "closed mode: words (tokens) of each system prompt")
	fs.IntVar(&c.suffixW, "closed-suffix-words", 24, "closed mode: words (tokens) of each user message")
	fs.DurationVar(&c.closedTimeout, "closed-timeout", 10*time.Second, "closed mode: bound on one request")
	fs.IntVar(&c.brokerWarmup, "closed-broker-warmup-rounds", 4, "closed mode: uncounted rounds of every sluice configuration at the most clients before the counted rounds, "+
		"so the Kafka broker, started fresh by scripts/peer-bench.sh, has compiled its hot paths (after 2 the first counted rounds still paid 2-4 times its steady CPU per request)")
	fs.StringVar(&c.baseline, "baseline-sluice", "", "a second sluice binary (e.g. built from main) to run as system sluice-base beside sluice, interleaved, for before/after figures")
}

// closedRun is one system × policy × clients measurement.
type closedRun struct {
	round                  int
	system, policy         string
	clients                int
	res                    peer.ClosedResult
	cpu                    map[string]time.Duration // by process name
	routerCPU, otherCPU    time.Duration            // counted in the table's CPU / reported apart
	brokerCPU              time.Duration
	enginesCPU, clientCPU  time.Duration // the simulated engines' and this load generator's, apart
	reqPerSec, cpuPerReq   float64
	p50, p99               time.Duration
	gatewayMs, deciderMs   float64
	enginelinkMs, brokerMs float64
	enginesMs, clientMs    float64
}

// selfCPU is this process's CPU time (every thread, no children): the load generator's.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sluiceCounted are the processes whose CPU is sluice's per-request cost in closed mode (the
// issue's "gateway + decider"); enginelink's is shown apart, as is the broker's.
var sluiceCounted = map[string]bool{"gateway": true, "decider": true}

func runClosedMode(ctx context.Context, f flags) error {
	var levels []int
	for _, s := range split(f.closed.clients) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-clients %q: want a comma-separated list of positive counts", f.closed.clients)
		}
		levels = append(levels, n)
	}
	var cfgs []config
	baseEmbeds := f.closed.baseline != "" && binaryHasFlag(f.closed.baseline, "gateway", "-embed-decider")
	for _, p := range split(f.sglangPolicies) {
		cfgs = append(cfgs, config{"sglang-router", p})
	}
	for _, p := range split(f.sluicePolicies) {
		cfgs = append(cfgs, config{"sluice", p})
		if f.closed.baseline != "" && (baseEmbeds || !strings.Contains(p, "+embedded")) { // a build from before -embed-decider has none
			cfgs = append(cfgs, config{"sluice-base", p})
		}
	}
	if len(cfgs) == 0 || len(levels) == 0 {
		return fmt.Errorf("nothing to run: no policy or no -clients")
	}
	if len(split(f.sglangPolicies)) > 0 && f.routerPython == "" {
		return fmt.Errorf("-router-python: the venv python with sglang-router is needed (scripts/peer-bench.sh makes it)")
	}
	if len(split(f.sluicePolicies)) > 0 && f.brokers == "" {
		return fmt.Errorf("-kafka-brokers: sluice's cache_aware needs KV events through Kafka (scripts/peer-bench.sh starts a broker)")
	}
	var err error
	if f.workDir == "" {
		if f.workDir, err = os.MkdirTemp("", "sluice-peerbench-"); err != nil {
			return err
		}
	}
	if f.sluiceBin, err = filepath.Abs(f.sluiceBin); err != nil {
		return err
	}
	if f.closed.baseline != "" {
		if f.closed.baseline, err = filepath.Abs(f.closed.baseline); err != nil {
			return err
		}
	}
	logf("closed loop: %d configurations × clients %v × %d rounds, %d engines at speed %g; %v measured after %v warm-up per run; logs in %s",
		len(cfgs), levels, f.rounds, f.engines, f.closed.speed, f.closed.duration, f.closed.warmup, f.workDir)
	started := time.Now()
	if err := warmBrokerClosed(ctx, f, cfgs, levels); err != nil {
		return err
	}
	var runs []closedRun
	for round := range f.rounds {
		for j := range cfgs {
			c := cfgs[(j+round)%len(cfgs)]
			if err := ctx.Err(); err != nil {
				return err
			}
			logf("round %d/%d: %s %s", round+1, f.rounds, c.system, c.policy)
			rs, err := closedOne(ctx, f, c, levels, round, filepath.Join(f.workDir, fmt.Sprintf("r%d-%s-%s", round+1, c.system, c.policy)))
			if err != nil {
				return fmt.Errorf("round %d %s %s: %w", round+1, c.system, c.policy, err)
			}
			runs = append(runs, rs...)
		}
	}
	var b bytes.Buffer
	writeClosedReport(&b, f, levels, runs, time.Since(started))
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

// warmBrokerClosed is warmBroker for closed mode: f.closed.brokerWarmup uncounted rounds of every
// sluice configuration at the most clients of levels. Without them the JVM compiled its
// produce and fetch paths during the counted rounds: the broker's CPU per request fell from
// 0.141 to 0.086 to 0.047 ms over the three rounds of one run, and after two warm-up runs of
// power_of_two alone, or two rounds of every configuration, the first two counted rounds still
// paid 0.03–0.09 against 0.01–0.03 from the third on (BENCHMARKS.md, "A warm broker in the
// closed loop").
func warmBrokerClosed(ctx context.Context, f flags, cfgs []config, levels []int) error {
	if f.closed.brokerWarmup <= 0 {
		return nil
	}
	for w := range f.closed.brokerWarmup {
		for _, c := range cfgs {
			if !isSluice(c.system) {
				continue
			}
			logf("broker warm-up %d/%d (not counted): %s %s", w+1, f.closed.brokerWarmup, c.system, c.policy)
			if _, err := closedOne(ctx, f, c, []int{slices.Max(levels)}, -1, filepath.Join(f.workDir, fmt.Sprintf("warmup%d-%s-%s", w+1, c.system, c.policy))); err != nil {
				return fmt.Errorf("broker warm-up %d: %w", w+1, err)
			}
		}
	}
	return nil
}

// closedOne starts one system and runs every clients level against it.
func closedOne(ctx context.Context, f flags, c config, levels []int, round int, dir string) ([]closedRun, error) {
	sys, err := startSystem(ctx, f, c, dir, f.closed.speed)
	defer sys.stop()
	if err != nil {
		return nil, err
	}
	// The broker's CPU is read in every system's runs: in sglang-router's, which uses no
	// Kafka, it is the idle broker's, the control for what sluice's records add.
	var brokerPIDs []int
	if f.kafkaPID > 0 {
		brokerPIDs = []int{f.kafkaPID}
	}
	var out []closedRun
	for _, n := range levels {
		var cpu0 map[string]time.Duration
		var broker0, engines0, client0 time.Duration
		enginePIDs := func() []int {
			var pids []int
			for _, p := range sys.procs {
				if strings.HasPrefix(p.name, "engine-") {
					pids = append(pids, p.pid())
				}
			}
			return pids
		}
		read := func() map[string]time.Duration {
			m := map[string]time.Duration{}
			for _, p := range sys.counted {
				m[p.name], _ = peer.ProcCPU(p.pid())
			}
			return m
		}
		r := closedRun{round: round, system: c.system, policy: c.policy, clients: n, cpu: map[string]time.Duration{}}
		r.res = peer.Closed(ctx, peer.ClosedOptions{URL: sys.url, Model: model, Clients: n, Warmup: f.closed.warmup, Duration: f.closed.duration,
			MaxTokens: f.closed.maxTokens, Stream: f.closed.stream, Prefixes: f.closed.prefixes, PrefixWords: f.closed.prefixW,
			SuffixWords: f.closed.suffixW, Timeout: f.closed.closedTimeout, Seed: uint64(round + 1),
			Measured: func(start bool) {
				if start {
					cpu0 = read()
					broker0, _ = peer.ProcCPU(brokerPIDs...)
					engines0, _ = peer.ProcCPU(enginePIDs()...)
					client0 = selfCPU()
					return
				}
				r.clientCPU = selfCPU() - client0
				e1, _ := peer.ProcCPU(enginePIDs()...)
				r.enginesCPU = e1 - engines0
				for name, v := range read() {
					r.cpu[name] = v - cpu0[name]
				}
				b1, _ := peer.ProcCPU(brokerPIDs...)
				r.brokerCPU = b1 - broker0
			}})
		for name, v := range r.cpu {
			if !isSluice(c.system) || sluiceCounted[name] {
				r.routerCPU += v
			} else {
				r.otherCPU += v
			}
		}
		ok := len(r.res.Latencies)
		if ok > 0 {
			r.reqPerSec = float64(ok) / r.res.Elapsed.Seconds()
			per := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(ok) }
			r.cpuPerReq = per(r.routerCPU)
			r.gatewayMs, r.deciderMs, r.enginelinkMs, r.brokerMs = per(r.cpu["gateway"]), per(r.cpu["decider"]), per(r.cpu["enginelink"]), per(r.brokerCPU)
			r.enginesMs, r.clientMs = per(r.enginesCPU), per(r.clientCPU)
		}
		r.p50, r.p99 = peer.Quantile(r.res.Latencies, 0.5), peer.Quantile(r.res.Latencies, 0.99)
		detail := fmt.Sprintf(" (idle broker %.3f, engines %.3f, client %.3f not counted)", r.brokerMs, r.enginesMs, r.clientMs)
		if isSluice(c.system) {
			detail = fmt.Sprintf(" (gateway %.3f, decider %.3f; enginelink %.3f, broker %.3f, engines %.3f, client %.3f not counted)",
				r.gatewayMs, r.deciderMs, r.enginelinkMs, r.brokerMs, r.enginesMs, r.clientMs)
		}
		errNote := ""
		if r.res.Errors > 0 {
			errNote = "; first error: " + r.res.FirstErr
		}
		logf("  %d clients: %d ok, %d errors, %.0f req/s, p50 %v p99 %v, CPU %.3f ms/req%s%s", n, ok, r.res.Errors, r.reqPerSec,
			r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.cpuPerReq, detail, errNote)
		out = append(out, r)
		for _, p := range sys.counted {
			if !p.running() {
				return out, fmt.Errorf("%s exited during the run (log %s)", p.name, p.log)
			}
		}
	}
	for name, u := range sys.metricsURLs {
		saveURL(u, filepath.Join(dir, name+".metrics.txt"))
	}
	return out, nil
}

func writeClosedReport(w io.Writer, f flags, levels []int, runs []closedRun, took time.Duration) {
	fmt.Fprintf(w, "Closed loop: %s clients, each sending its next chat completion when the last one answered (max_tokens %d, stream %v; "+
		"a system prompt from %d shared ones of %d words and a user message of %d words, the same requests for every system). "+
		"%d simulated SGLang engines (sluice simengine) at speed %g, fresh for every configuration. %v measured after %v of warm-up per run; "+
		"%d rounds, configurations interleaved (rotated each round); %s in all. sluice's gateway uses -tokenizer %s (auto: engine for cache_aware, which needs the engine's token ids, else the default estimate).\n\n",
		f.closed.clients, f.closed.maxTokens, f.closed.stream, f.closed.prefixes, f.closed.prefixW, f.closed.suffixW, f.engines, f.closed.speed,
		f.closed.duration, f.closed.warmup, f.rounds, took.Round(time.Second), f.sluiceTokenizer)
	if f.cacheAwareSettings != "" {
		fmt.Fprintf(w, "sluice's cache_aware policy: {type: cache_aware, %s}.\n\n", f.cacheAwareSettings)
	}
	if f.closed.brokerWarmup > 0 && len(split(f.sluicePolicies)) > 0 {
		fmt.Fprintf(w, "Before the counted rounds, %d uncounted rounds of every sluice configuration at %d clients warmed the broker's JVM (-closed-broker-warmup-rounds).\n\n",
			f.closed.brokerWarmup, slices.Max(levels))
	}
	type key struct {
		sys, pol string
		n        int
	}
	var order []key
	by := map[key][]closedRun{}
	for _, r := range runs {
		k := key{r.system, r.policy, r.clients}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if a.n != b.n {
			return a.n - b.n
		}
		return strings.Compare(a.sys+a.pol, b.sys+b.pol)
	})
	col := func(rs []closedRun, v func(closedRun) float64) spreadCell {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = v(r)
		}
		return spreadOf(vs)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintln(w, "| clients | system | policy | rounds | req/s | p50 ms | p99 ms | CPU ms/req | gateway | decider | enginelink (apart) | broker (apart) | engines (apart) | client (apart) | errors |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range order {
		rs := by[k]
		n := len(rs)
		dash := func(c spreadCell, prec int) string {
			if !isSluice(k.sys) {
				return "–"
			}
			return c.cell(prec, n)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k.n, k.sys, k.pol, n,
			col(rs, func(r closedRun) float64 { return r.reqPerSec }).cell(0, n),
			col(rs, func(r closedRun) float64 { return ms(r.p50) }).cell(2, n),
			col(rs, func(r closedRun) float64 { return ms(r.p99) }).cell(2, n),
			col(rs, func(r closedRun) float64 { return r.cpuPerReq }).cell(3, n),
			dash(col(rs, func(r closedRun) float64 { return r.gatewayMs }), 3),
			dash(col(rs, func(r closedRun) float64 { return r.deciderMs }), 3),
			dash(col(rs, func(r closedRun) float64 { return r.enginelinkMs }), 3),
			col(rs, func(r closedRun) float64 { return r.brokerMs }).cell(3, n), // sglang-router's: the idle broker
			col(rs, func(r closedRun) float64 { return r.enginesMs }).cell(3, n),
			col(rs, func(r closedRun) float64 { return r.clientMs }).cell(3, n),
			col(rs, func(r closedRun) float64 { return float64(r.res.Errors) }).cell(0, n))
	}
	// Ratios within a round (the two systems ran minutes apart, not hours), then over rounds.
	fmt.Fprintln(w, "\nsluice against sglang-router with the same policy, ratio per round, median (min–max):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| clients | system | policy | CPU per request (goal ≤ 0.8) | throughput (goal ≥ 1.2 at 16) | throughput bound on shared cores |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|")
	for _, n := range levels {
		for _, sysName := range []string{"sluice-base", "sluice"} {
			for _, pol := range split(f.sluicePolicies) {
				var cpu, thr, bound []float64
				for round := range f.rounds {
					var s, g *closedRun
					for i := range runs {
						r := &runs[i]
						if r.round != round || r.clients != n {
							continue
						}
						switch {
						case r.system == sysName && r.policy == pol:
							s = r
						case r.system == "sglang-router" && r.policy == basePolicy(pol):
							g = r
						}
					}
					if s == nil || g == nil || g.cpuPerReq == 0 || g.reqPerSec == 0 {
						continue
					}
					cpu = append(cpu, s.cpuPerReq/g.cpuPerReq)
					thr = append(thr, s.reqPerSec/g.reqPerSec)
					bound = append(bound, sharedBound(*s, *g))
				}
				if len(cpu) == 0 {
					continue
				}
				fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s |\n", n, sysName, pol, spreadOf(cpu).cell(2, len(cpu)), spreadOf(thr).cell(2, len(thr)),
					spreadOf(bound).cell(2, len(bound)))
			}
		}
	}
	fmt.Fprintln(w, "\nCPU is utime+stime from /proc of each router's process tree over the measured part, divided by the requests "+
		"answered in it: sglang-router's Python launcher with its Rust router; sluice's gateway + decider (enginelink, which turns the "+
		"engines' ZMQ KV events and load into Kafka records, and the broker are shown apart; with +embedded the decider runs inside the gateway's process, "+
		"so its CPU is in the gateway column). sglang-router uses no Kafka: its broker column is the idle broker's CPU over its runs, "+
		"the control for what sluice's records add. p50/p99 are request latencies at the client. "+
		"engines and client are the simulated engines' CPU and this load generator's (its own process), per request. "+
		"Throughput bound on shared cores: when every process shares the same cores and they are the limit, req/s is at most cores ÷ the CPU "+
		"all processes spend per request, so sluice's req/s ÷ sglang-router's cannot exceed (router + engines + client) ÷ (gateway + decider + "+
		"enginelink + broker + engines + client), each system's own figures of the round.")
}

// sharedBound is the throughput ratio s ÷ g that the CPU per request allows when both ran on
// the same saturated cores: g's whole-machine CPU per request over s's.
func sharedBound(s, g closedRun) float64 {
	total := func(r closedRun) float64 {
		t := r.cpuPerReq + r.enginesMs + r.clientMs
		if isSluice(r.system) {
			t += r.enginelinkMs + r.brokerMs
		}
		return t
	}
	if total(s) == 0 {
		return 0
	}
	return total(g) / total(s)
}

// spreadCell is a median with its min–max range over rounds.
type spreadCell struct{ med, lo, hi float64 }

func spreadOf(vs []float64) spreadCell {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return spreadCell{}
	}
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spreadCell{med, s[0], s[n-1]}
}

func (s spreadCell) cell(prec, n int) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	if n < 2 {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

// isSluice tells sluice's systems (this build, and the -baseline-sluice one) from the router.
func isSluice(system string) bool { return system == "sluice" || system == "sluice-base" }

// basePolicy is a sluice policy without its variant suffixes (+embedded, +ids): the router
// policy it is compared with.
func basePolicy(p string) string {
	p, _, _ = strings.Cut(p, "+")
	return p
}

// binaryHasFlag reports whether "bin sub -h" lists flag.
func binaryHasFlag(bin, sub, flag string) bool {
	out, _ := exec.Command(bin, sub, "-h").CombinedOutput()
	return bytes.Contains(out, []byte(flag+" ")) || bytes.Contains(out, []byte(flag+"\n"))
}
