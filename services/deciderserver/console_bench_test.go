package deciderserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/decider/policy"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/deciderserver/console"
	"github.com/sluicehq/sluice/state/loadtable"
)

// consoleBenchServer is a decider over 64 plain engines with fresh load, the console on or off.
func consoleBenchServer(b *testing.B, on bool) *Server {
	b.Helper()
	var sb strings.Builder
	sb.WriteString("workers:\n")
	for i := range 64 {
		fmt.Fprintf(&sb, "  - {id: e%02d, url: \"http://e%02d.test:8000\", models: [m], role: plain}\n", i, i)
	}
	sb.WriteString("default_policy:\n  plain: {type: power_of_two, admission: {max_running_requests: 100000}}\n")
	path := filepath.Join(b.TempDir(), "bench.yaml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", path
	cfg.Health.ProbeInterval = 0
	cfg.LoadFreshness = time.Hour
	cfg.Console = on
	srv := runServer(b, cfg)
	for i := range 64 {
		err := srv.LoadTable().Apply(loadtable.Report{EngineID: fmt.Sprintf("e%02d", i), Epoch: 1, Seq: 1,
			CapturedAt: time.Now(), Running: int64(i % 7), Waiting: int64(i % 3), KVUsedTokens: 100, KVCapacityTokens: 1000,
			Native: &loadtable.Native{WaitingUncachedTokens: int64(i * 10), TotalTokens: 100, MaxRunningRequests: 64}})
		if err != nil {
			b.Fatal(err)
		}
	}
	return srv
}

// BenchmarkRecordDecision is the Decide hook alone: one record into the tail (and the sample
// gate) for a plain pick of a 1,000-token prompt.
func BenchmarkRecordDecision(b *testing.B) {
	srv := consoleBenchServer(b, true)
	tail := console.NewTail()
	ids := make([]uint32, 1000)
	req := policy.Request{Model: "m", InputTokens: 1000, TokenIDs: ids, RequestID: "bench"}
	dec, err := srv.decider.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 1000, DryRun: true})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	before := cpuTime()
	for range b.N {
		recordDecision(tail, &req, &dec, nil, start, 3*time.Microsecond)
	}
	// CPU time, unlike ns/op, leaves out the time the machine's other work held the CPU.
	b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkDecideServiceConsole calls the decider service's Decide in process (no transport)
// with the hook off and on, interleaved over rounds; it reports the median process CPU time per
// Decide of each and the median (and quartiles) of the per-round ratios.
func BenchmarkDecideServiceConsole(b *testing.B) {
	srv := consoleBenchServer(b, false)
	mk := func(tail *console.Tail) *deciderService {
		return &deciderService{logger: srv.logger, d: srv.decider, metrics: newMetrics(prometheus.NewRegistry(), srv.leases, srv.decider.ConfigVersion), console: tail, shards: srv.shards}
	}
	svcs := map[string]*deciderService{"off": mk(nil), "on": mk(console.NewTail())}
	in := &sluicev1.DecideRequest{Model: "m", InputTokens: 1000, RequestId: "bench", DryRun: true}
	// Many short paired rounds, the order alternating: the ratio of each pair cancels the
	// machine's drift, and the median of the ratios is what is reported (with its quartiles).
	const rounds, calls = 101, 20000
	res := map[string][]float64{}
	var ratios []float64
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			order := []string{"off", "on"}
			if r%2 == 1 {
				order = []string{"on", "off"}
			}
			took := map[string]float64{}
			for _, mode := range order {
				svc := svcs[mode]
				before := cpuTime()
				for range calls {
					if _, err := svc.Decide(context.Background(), in); err != nil {
						b.Fatal(err)
					}
				}
				took[mode] = float64((cpuTime() - before).Nanoseconds()) / calls
				res[mode] = append(res[mode], took[mode])
			}
			ratios = append(ratios, took["on"]/took["off"])
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(median(res["off"]), "off-cpu-ns/decide")
	b.ReportMetric(median(res["on"]), "on-cpu-ns/decide")
	b.ReportMetric(median(ratios), "on/off")
	b.ReportMetric(ratios[len(ratios)/4], "on/off-q1")
	b.ReportMetric(ratios[len(ratios)*3/4], "on/off-q3")
}

// BenchmarkConsoleOverhead drives Decide over gRPC at 2,000 calls/s (8 callers, 250/s each)
// against three deciders — console off, on with nobody watching, on with a browser's decision
// stream attached (an SSE reader consuming every event) — one after the other, the order
// rotating, in each of 12 rounds of 1 s. It reports the medians of process CPU time per Decide
// (client, server and the stream reader: all in this process) and of per-call latency, and the
// median and quartiles of the per-round CPU ratios to "off".
func BenchmarkConsoleOverhead(b *testing.B) {
	modes := []string{"off", "on", "stream"}
	servers := map[string]*Server{"off": consoleBenchServer(b, false), "on": consoleBenchServer(b, true), "stream": consoleBenchServer(b, true)}
	// The stream: a client reading /ui/api/decisions/stream for the whole benchmark.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+servers["stream"].HTTPAddr()+"/ui/api/decisions/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("stream: %v %v", resp, err)
	}
	var streamed sync.WaitGroup
	var streamBytes int64
	streamed.Go(func() {
		n, _ := io.Copy(io.Discard, resp.Body)
		streamBytes = n
	})
	clients := map[string]sluicev1.DeciderServiceClient{}
	for _, m := range modes {
		conn, err := grpc.NewClient(servers[m].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients[m] = sluicev1.NewDeciderServiceClient(conn)
	}
	const (
		rate    = 2000
		callers = 8
		window  = time.Second
		rounds  = 12
	)
	in := &sluicev1.DecideRequest{Model: "m", InputTokens: 1000, RequestId: "bench", DryRun: true}
	cpu := map[string][]float64{}
	p50 := map[string][]float64{}
	p99 := map[string][]float64{}
	b.ResetTimer()
	ratios := map[string][]float64{}
	for range b.N {
		for r := range rounds {
			// Rotate the order each round; compare within the round (the machine drifts).
			order := append(slices.Clone(modes[r%len(modes):]), modes[:r%len(modes)]...)
			round := map[string]float64{}
			for _, m := range order {
				c := clients[m]
				var mu sync.Mutex
				var lat []time.Duration
				var wg sync.WaitGroup
				before := cpuTime()
				start := time.Now()
				for range callers {
					wg.Go(func() {
						every := time.Second * callers / rate
						var local []time.Duration
						for next := start; time.Since(start) < window; next = next.Add(every) {
							time.Sleep(time.Until(next))
							t0 := time.Now()
							if _, err := c.Decide(context.Background(), in); err != nil {
								b.Error(err)
								return
							}
							local = append(local, time.Since(t0))
						}
						mu.Lock()
						lat = append(lat, local...)
						mu.Unlock()
					})
				}
				wg.Wait()
				used := cpuTime() - before
				slices.Sort(lat)
				round[m] = float64(used.Microseconds()) / float64(len(lat))
				cpu[m] = append(cpu[m], round[m])
				p50[m] = append(p50[m], float64(lat[len(lat)/2].Microseconds()))
				p99[m] = append(p99[m], float64(lat[len(lat)*99/100].Microseconds()))
			}
			ratios["on"] = append(ratios["on"], round["on"]/round["off"])
			ratios["stream"] = append(ratios["stream"], round["stream"]/round["off"])
		}
	}
	b.StopTimer()
	for _, m := range modes {
		b.ReportMetric(median(cpu[m]), m+"-cpu-µs/decide")
		b.ReportMetric(spread(cpu[m]), m+"-cpu-spread-%")
		b.ReportMetric(median(p50[m]), m+"-p50-µs")
		b.ReportMetric(median(p99[m]), m+"-p99-µs")
	}
	for _, m := range []string{"on", "stream"} {
		q := slices.Sorted(slices.Values(ratios[m]))
		b.ReportMetric(median(q), m+"/off-cpu")
		b.ReportMetric(q[len(q)/4], m+"/off-cpu-q1")
		b.ReportMetric(q[len(q)*3/4], m+"/off-cpu-q3")
	}
	cancel()
	streamed.Wait()
	b.ReportMetric(float64(streamBytes)/1e6, "streamed-MB")
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// spread is (max - min) / median in percent.
func spread(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 || s[len(s)/2] == 0 {
		return 0
	}
	return 100 * (s[len(s)-1] - s[0]) / s[len(s)/2]
}
