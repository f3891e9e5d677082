package deciderserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
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

	"github.com/sluicehq/sluice/components/limits"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/loadtable"
)

// echoDecider answers Decide with an empty response: the floor any gRPC Decide can reach with
// the same messages, client, transport and interceptor chain.
type echoDecider struct {
	sluicev1.UnimplementedDeciderServiceServer
}

func (echoDecider) Decide(context.Context, *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	return &sluicev1.DecideResponse{}, nil
}

// startEcho serves echoDecider on the decider's own RPC stack (newRPCStack: the tap, the
// interceptor chain and the server options Decide has) with the default configuration.
func startEcho(b *testing.B) string {
	b.Helper()
	cfg := DefaultConfig()
	auth, err := newAuthenticator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	stack, err := newRPCStack(rpcDeps{logger: slog.New(slog.DiscardHandler), auth: auth, reg: reg,
		shed: newShedder(cfg.MaxConcurrentDecides, cfg.ShedRetryAfter, reg), sizes: limits.For(cfg.MaxTokenIDs)},
		echoDecider{}, sluicev1.UnimplementedAdminServiceServer{})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = stack.grpc.Serve(lis) }()
	b.Cleanup(func() {
		stack.grpc.Stop()
		_ = stack.rest.Close()
	})
	return lis.Addr().String()
}

// processCPU is the process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startBenchDecider runs a real decider with 64 plain engines reporting native load.
func startBenchDecider(b *testing.B) string { return startBenchDeciderWith(b, func(*Config) {}) }

// startBenchDeciderWith is startBenchDecider with its configuration changed by mutate.
func startBenchDeciderWith(b *testing.B, mutate func(*Config)) string {
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
	mutate(&cfg)
	srv := runServer(b, cfg)
	for i := range 64 {
		err := srv.LoadTable().Apply(loadtable.Report{EngineID: fmt.Sprintf("e%02d", i), Epoch: 1, Seq: 1,
			CapturedAt: time.Now(), Running: int64(i % 7), Waiting: int64(i % 3), KVUsedTokens: 100, KVCapacityTokens: 1000,
			Native: &loadtable.Native{WaitingUncachedTokens: int64(i * 10), TotalTokens: 100, MaxRunningRequests: 64}})
		if err != nil {
			b.Fatal(err)
		}
	}
	return srv.GRPCAddr()
}

// BenchmarkGRPC compares Decide over native gRPC with an empty echo of the same service served
// by the same RPC stack, using the same client, connection setup and concurrency. Compare ns/op of the two sub-benchmarks from one run;
// p50/p99 are per-call latencies under that concurrency.
func BenchmarkGRPC(b *testing.B) {
	targets := []struct {
		name  string
		start func(*testing.B) string
	}{{"echo", startEcho}, {"decide", startBenchDecider}}
	for _, tgt := range targets {
		b.Run(tgt.name, func(b *testing.B) {
			addr := tgt.start(b)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := sluicev1.NewDeciderServiceClient(conn)
			req := &sluicev1.DecideRequest{Model: "m", InputTokens: 1000, RequestId: "bench"}
			if _, err := c.Decide(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				local := make([]time.Duration, 0, 1024)
				for pb.Next() {
					start := time.Now()
					if _, err := c.Decide(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
					local = append(local, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
			b.StopTimer()
			// CPU time of the process (client and server) per call: on a shared machine it
			// moves far less than ns/op, which also counts the time other work held the cores.
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}
