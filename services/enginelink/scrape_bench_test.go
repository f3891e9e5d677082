package enginelink

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/internal/kafkadev"
	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/services/simengine"
)

// The scrape benchmarks measure the link's side only: the simulated SGLang engine (a real
// services/simengine server) and the in-process Kafka broker (kfake) run in a child process,
// this test binary re-executed with envBenchPeer set, so the benchmark process's CPU time
// (getrusage) and its B/op and allocs/op are the link's alone.
const envBenchPeer = "SLUICE_ENGINELINK_BENCH_PEER"

func TestMain(m *testing.M) {
	if dp := os.Getenv(envBenchPeer); dp != "" {
		os.Exit(runBenchPeer(dp))
	}
	os.Exit(m.Run())
}

// runBenchPeer serves a simengine (SGLang naming, dp ranks) and a kfake broker, prints
// "<engine base URL> <broker address>" and serves until its stdin closes.
func runBenchPeer(dp string) int {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ranks, err := strconv.Atoi(dp)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := simengine.DefaultConfig()
	cfg.Addr, cfg.ID, cfg.Model, cfg.DPSize = "127.0.0.1:0", "bench", "m", ranks
	srv, err := simengine.New(logger, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	broker, err := kafkadev.Start(context.Background(), logger, "bench.load")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer broker.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	fmt.Printf("http://%s %s\n", srv.Addr(), broker.Addr()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

type benchPeer struct{ base, broker string }

// startBenchPeer starts the child process of runBenchPeer; it ends with the benchmark.
func startBenchPeer(b *testing.B, dp int) benchPeer {
	b.Helper()
	child := proctest.StartChild(b, false, envBenchPeer+"="+strconv.Itoa(dp))
	line, err := bufio.NewReader(child.Stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("bench peer: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		b.Fatalf("bench peer said %q", line)
	}
	return benchPeer{base: f[0], broker: f[1]}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchLink(b *testing.B, peer benchPeer, interval time.Duration, specs ...EngineSpec) *Link {
	b.Helper()
	cfg := DefaultConfig()
	cfg.KafkaBrokers, cfg.LoadTopic, cfg.HTTPAddr = peer.broker, "bench.load", ""
	cfg.ScrapeInterval = interval
	cfg.ScrapeTimeout = 10 * time.Second // a loaded machine's slow GET is a slow scrape, not a failed benchmark
	cfg.Engines = specs
	l, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkScrape is one scrape of a simulated SGLang engine as scrapeLoop does it, GET and
// parse, and the load record of every rank (loadMessage), without the produce
// (BenchmarkLoadProduce). source=loads is /v1/loads (what the link reads when loads_url is
// set, as in the peer benchmark), source=metrics the Prometheus page.
func BenchmarkScrape(b *testing.B) {
	for _, dp := range []int{1, 4} {
		peer := startBenchPeer(b, dp)
		for _, src := range []string{"loads", "metrics"} {
			b.Run(fmt.Sprintf("source=%s/dp=%d", src, dp), func(b *testing.B) {
				spec := EngineSpec{ID: "bench", Model: "m", DPSize: dp}
				if src == "loads" {
					spec.LoadsURL = peer.base + "/v1/loads"
				} else {
					spec.MetricsURL = peer.base + "/metrics"
				}
				l := benchLink(b, peer, 50*time.Millisecond, spec)
				ctx := context.Background()
				var seqs loadSeqs
				sc := newScraper(spec)
				scrapeOnce := func() {
					loads, err := l.scrape(ctx, sc)
					if err != nil {
						b.Fatal(err)
					}
					if len(loads) != dp {
						b.Fatalf("%d ranks scraped, want %d", len(loads), dp)
					}
					now := time.Now()
					for rank, ld := range loads {
						if _, err := l.loadMessage(spec, rank, int32(dp), 1, seqs.next(1, rank), now, ld); err != nil {
							b.Fatal(err)
						}
					}
				}
				scrapeOnce() // the connection is open
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU(b)
				for range b.N {
					scrapeOnce()
				}
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/scrape")
			})
		}
	}
}

// BenchmarkLoadProduce is the producer's cost of one load record at the scrape rate: one
// record every 2 ms, so each goes to the broker (kfake in the child process) alone, as a
// scrape's records do, with the writer's settings of the link. It waits for every ack.
func BenchmarkLoadProduce(b *testing.B) {
	peer := startBenchPeer(b, 1)
	spec := EngineSpec{ID: "bench", Model: "m"}
	l := benchLink(b, peer, 50*time.Millisecond, spec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.prod.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
	}()
	acked := l.m.kafkaAcked.WithLabelValues("bench.load")
	ld := &rankLoad{Running: 3, Waiting: 1, KVUsed: 1000, KVCapacity: 100000,
		Native: &nativeLoad{TotalTokens: 5000, MaxRunningRequests: 64}}
	var seq uint64
	produce := func() {
		seq++
		msg, err := l.loadMessage(spec, 0, 1, 1, seq, time.Now(), ld)
		if err != nil {
			b.Fatal(err)
		}
		if l.prod.enqueueLoads([]kafka.Message{msg}) != 1 {
			b.Fatal("enqueue refused")
		}
	}
	waitAcked := func(n float64) {
		deadline := time.Now().Add(time.Minute)
		for counterValue(b, acked) < n {
			if time.Now().After(deadline) {
				b.Fatalf("%v of %v records acked after a minute", counterValue(b, acked), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	produce() // metadata, connection
	waitAcked(1)
	// pace is the loop alone, for the floor of the process's CPU at 500 wake-ups a second.
	for _, pace := range []bool{false, true} {
		name := "produce"
		if pace {
			name = "pace-only"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			base := counterValue(b, acked)
			t0 := time.Now()
			for i := range b.N {
				if ahead := time.Duration(i)*2*time.Millisecond - time.Since(t0); ahead > 0 {
					time.Sleep(ahead)
				}
				if !pace {
					produce()
				}
			}
			if !pace {
				waitAcked(base + float64(b.N))
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/record")
		})
	}
}

// BenchmarkScrapeLoop is the whole public path: a running Link scraping four engines' /v1/loads
// every 10 ms and producing their load reports; an op is one scrape (and its acked record).
func BenchmarkScrapeLoop(b *testing.B) {
	peer := startBenchPeer(b, 1)
	var specs []EngineSpec
	for i := range 4 {
		specs = append(specs, EngineSpec{ID: "e" + strconv.Itoa(i), Model: "m", Engine: KindSGLang, LoadsURL: peer.base + "/v1/loads"})
	}
	l := benchLink(b, peer, 10*time.Millisecond, specs...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	acked := l.m.kafkaAcked.WithLabelValues("bench.load")
	wait := func(n float64) {
		deadline := time.Now().Add(2 * time.Minute)
		for counterValue(b, acked) < n {
			if time.Now().After(deadline) {
				b.Fatalf("%v of %v load records acked", counterValue(b, acked), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait(4)
	b.ReportAllocs()
	b.ResetTimer()
	base := counterValue(b, acked)
	cpu0 := processCPU(b)
	wait(base + float64(b.N))
	n := counterValue(b, acked) - base
	b.ReportMetric(float64(processCPU(b)-cpu0)/n, "cpu-ns/scrape")
}

func counterValue(b *testing.B, c prometheus.Counter) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		b.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// BenchmarkParseMetrics compares parseMetrics (the load families' lines only) with a parse of the
// whole page, on the vLLM fixture and on the fixture with 20 histograms of 2 engines × 20
// buckets added, about the size of a real vLLM page.
func BenchmarkParseMetrics(b *testing.B) {
	fixture, err := os.ReadFile("testdata/vllm_dp2.metrics")
	if err != nil {
		b.Fatal(err)
	}
	big := append([]byte(nil), fixture...)
	for h := range 20 {
		name := fmt.Sprintf("vllm:bench_hist_%d_seconds", h)
		big = fmt.Appendf(big, "# HELP %s A histogram the link does not read.\n# TYPE %s histogram\n", name, name)
		for e := range 2 {
			for le := range 20 {
				big = fmt.Appendf(big, "%s_bucket{engine=\"%d\",le=\"%d.0\",model_name=\"Qwen/Qwen3-8B\"} %d.0\n", name, e, le, le*7)
			}
			big = fmt.Appendf(big, "%s_bucket{engine=\"%d\",le=\"+Inf\",model_name=\"Qwen/Qwen3-8B\"} 140.0\n", name, e)
			big = fmt.Appendf(big, "%s_count{engine=\"%d\",model_name=\"Qwen/Qwen3-8B\"} 140.0\n%s_sum{engine=\"%d\",model_name=\"Qwen/Qwen3-8B\"} 12.5\n", name, e, name, e)
		}
	}
	for _, page := range []struct {
		name string
		b    []byte
	}{{"fixture", fixture}, {"histograms", big}} {
		for _, whole := range []bool{true, false} {
			mode := "load-lines"
			if whole {
				mode = "whole-page"
			}
			b.Run(fmt.Sprintf("page=%s/%dKB/%s", page.name, len(page.b)>>10, mode), func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					var loads map[int]*rankLoad
					if whole {
						fams, err := parseFamilies(page.b)
						if err != nil {
							b.Fatal(err)
						}
						loads, err = loadsOf(fams)
						if err != nil {
							b.Fatal(err)
						}
					} else if loads, err = parseMetrics(page.b); err != nil {
						b.Fatal(err)
					}
					if len(loads) != 2 {
						b.Fatalf("%d ranks", len(loads))
					}
				}
			})
		}
	}
}
