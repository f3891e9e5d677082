// Command honesty replays one trace window through the live sluice dev stack and through sluice
// simulate with the same settings and writes the side-by-side markdown table (`make
// sim-honesty`; tests/honesty, BENCHMARKS.md "Simulator honesty").
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/trace"
	"github.com/sluicehq/sluice/tests/honesty"
)

func main() {
	tracePath := flag.String("trace", "testdata/traces/conversation_trace.jsonl", "trace file: Mooncake .jsonl or Azure .csv")
	from := flag.Duration("from", 0, "start of the window in trace time")
	window := flag.Duration("window", 5*time.Minute, "length of the window (trace time)")
	speed := flag.Float64("speed", 2, "arrival speed-up of the trace on both sides (2 = twice as dense); the live side runs in real time")
	engines := flag.Int("engines", 8, "simulated engines")
	policies := flag.String("policies", "cache_aware,ttft_aware", "comma-separated policies, each on a fresh stack and a fresh simulated fleet")
	maxTokens := flag.Int("max-tokens-cap", 128, "cap on each request's output length (both sides)")
	report := flag.Duration("report-interval", 500*time.Millisecond, "enginelink's scrape interval and the simulated report interval")
	kvLag := flag.Duration("kv-lag", 100*time.Millisecond, "simulated KV-event lag (the live path's is what ZMQ → enginelink → Kafka → decider takes)")
	out := flag.String("out", "", "markdown output file (also printed); empty = stdout only")
	workDir := flag.String("work-dir", "", "logs of the live stacks (default: a new temp dir, kept)")
	diagnose := flag.String("diagnose", "", "markdown file for the request-by-request comparison of each policy (honesty.Diagnose); empty = none")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (live stacks and simulation) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "honesty: -cpuprofile:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *tracePath, *from, *window, *speed, *engines, *policies, *maxTokens, *report, *kvLag, *out, *workDir, *diagnose); err != nil {
		fmt.Fprintln(os.Stderr, "honesty:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[honesty %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run(ctx context.Context, tracePath string, from, window time.Duration, speed float64, engines int, policies string, maxTokens int,
	report, kvLag time.Duration, out, workDir, diagnose string) error {
	all, err := trace.Read(tracePath)
	if err != nil {
		return err
	}
	reqs := trace.Window(all, from, window)
	if len(reqs) == 0 {
		return fmt.Errorf("-window: no request in [%v, %v) of %s", from, from+window, tracePath)
	}
	if !(speed > 0) {
		return fmt.Errorf("-speed %v: must be > 0", speed)
	}
	reqs = honesty.Capped(trace.Scale(reqs, speed), maxTokens)
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "sluice-honesty-"); err != nil {
			return err
		}
	}
	s := honesty.Settings{Engines: engines, MaxTokensCap: maxTokens, ReportInterval: report, KVLag: kvLag, Timeout: 5 * time.Minute}
	var rows []honesty.Row
	var diag bytes.Buffer
	for p := range strings.SplitSeq(policies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		s.Policy = p
		logf("%s: live stack, %d requests over %v (logs in %s)", p, len(reqs), reqs[len(reqs)-1].Arrival.Round(time.Second), workDir)
		c0 := cpuTime()
		live, err := honesty.Live(ctx, s, reqs, filepath.Join(workDir, p))
		if err != nil {
			return fmt.Errorf("%s live: %w", p, err)
		}
		logf("  live stack CPU %v over %v (setup and replay; the load average was %s)", (cpuTime() - c0).Round(time.Millisecond),
			(live.SetupTime + live.WallTime).Round(time.Millisecond), loadAvg())
		logf("  live: %d errors (first: %s), block hit rate %.4f, TTFT p50 %v p90 %v (engine-side %v, %v); send lag mean %v max %v; setup %v",
			live.Errors, live.FirstErr, live.BlockHitRate, live.TTFT50.Round(time.Millisecond), live.TTFT90.Round(time.Millisecond),
			live.EngineTTFT50.Round(time.Millisecond), live.EngineTTFT90.Round(time.Millisecond),
			live.MeanLag.Round(time.Microsecond), live.MaxSendLag.Round(time.Millisecond), live.SetupTime.Round(time.Millisecond))
		sim, err := honesty.Simulated(ctx, s, reqs)
		if err != nil {
			return fmt.Errorf("%s simulate: %w", p, err)
		}
		logf("  simulate: block hit rate %.4f, TTFT p50 %v p90 %v (took %v)", sim.BlockHitRate, sim.TTFT50.Round(time.Millisecond),
			sim.TTFT90.Round(time.Millisecond), sim.WallTime.Round(time.Millisecond))
		rows = append(rows, honesty.Compare(p, live, sim))
		if diagnose != "" {
			honesty.Diagnose(&diag, p, live, sim)
			if err := writeRuns(filepath.Join(workDir, p), live, sim); err != nil {
				return err
			}
		}
	}
	if diagnose != "" {
		if err := os.WriteFile(diagnose, diag.Bytes(), 0o644); err != nil {
			return err
		}
		logf("wrote %s (and runs-*.json in %s)", diagnose, workDir)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Trace `%s`, window [%v, %v), speed %g: %d requests over %v, outputs capped at %d tokens; %d engines (simengine defaults); "+
		"load reports every %v (live: enginelink's scrape), simulated KV lag %v. "+
		"TTFT is the client's (live: to the first streamed chunk through the gateway; simulate: arrival to first token); "+
		"engine-side TTFT is the live engines' own queue + prefill time of each run, without the transport.\n\n",
		filepath.Base(tracePath), from, from+window, speed, len(reqs), reqs[len(reqs)-1].Arrival.Round(time.Second), maxTokens, engines, report, kvLag)
	if err := honesty.Table(&b, rows); err != nil {
		return err
	}
	if _, err := os.Stdout.Write(b.Bytes()); err != nil {
		return err
	}
	if out != "" {
		if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
			return err
		}
		logf("wrote %s", out)
	}
	if err := honesty.Check(rows); err != nil {
		logf("%v", err)
	}
	return nil
}

// writeRuns keeps both sides' requests as JSON (without the prompts) in dir.
func writeRuns(dir string, live, sim honesty.Outcome) error {
	for _, side := range []struct {
		name string
		o    honesty.Outcome
	}{{"live", live}, {"sim", sim}} {
		runs := slices.Clone(side.o.Runs)
		for i := range runs {
			runs[i].Tokens = nil
		}
		b, err := json.Marshal(runs)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "runs-"+side.name+".json"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the machine's 1-minute load average (/proc/loadavg), "?" where it cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
