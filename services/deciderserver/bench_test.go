package deciderserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/components/limits"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/deciderserver/console"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
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
	addr, stop := serveEcho(b)
	b.Cleanup(stop)
	return addr
}

// serveEcho is startEcho returning its stop instead of registering it.
func serveEcho(b *testing.B) (string, func()) {
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
	return lis.Addr().String(), func() {
		stack.grpc.Stop()
		_ = stack.rest.Close()
	}
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
	srv := runServer(b, benchDeciderConfig(b, mutate))
	reportBenchLoad(b, srv)
	return srv.GRPCAddr()
}

// benchDeciderConfig is the configuration of startBenchDecider's decider: 64 plain engines of
// model m under power_of_two with admission caps, changed by mutate.
func benchDeciderConfig(b *testing.B, mutate func(*Config)) Config {
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
	return cfg
}

// reportBenchLoad gives each of the 64 engines a fresh native load report.
func reportBenchLoad(b *testing.B, srv *Server) {
	b.Helper()
	for i := range 64 {
		err := srv.LoadTable().Apply(loadtable.Report{EngineID: fmt.Sprintf("e%02d", i), Epoch: 1, Seq: 1,
			CapturedAt: time.Now(), Running: int64(i % 7), Waiting: int64(i % 3), KVUsedTokens: 100, KVCapacityTokens: 1000,
			Native: &loadtable.Native{WaitingUncachedTokens: int64(i * 10), TotalTokens: 100, MaxRunningRequests: 64}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// serveBenchDecider is startBenchDecider returning its stop instead of registering it.
func serveBenchDecider(b *testing.B) (string, func()) {
	b.Helper()
	srv, err := New(slog.New(slog.DiscardHandler), benchDeciderConfig(b, func(*Config) {}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		hc, err := srv.rpc.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil && hc.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("decider not serving 10s after Run: %v, %v", hc, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	reportBenchLoad(b, srv)
	return srv.GRPCAddr(), func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}
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

// BenchmarkEchoDecidePaired is BenchmarkGRPC's comparison in many short rounds, echo and Decide
// alternating (the order swapping each round), each round on fresh servers warmed up by 2,000
// untimed calls: the ratio of each pair cancels most of a shared machine's drift, which moves
// single runs of BenchmarkGRPC by tens of percent. 31 rounds per iteration (-benchtime 2x runs
// 62). It reports, over the rounds, the median and quartiles of the ratio echo ÷ Decide of
// process CPU time per call (client and server; ≥ 1 would mean Decide costs no more than the
// echo) and of wall time per call (the throughput ratio), and the median and quartiles of
// each side's CPU time per call.
//
// The client is grpc-go's stock client (protobuf-go decodes the answers), as a Go caller has by
// default. BenchmarkEchoDecidePairedGeneratedClient is the same with a client that decodes them
// by the generated methods, which shows the client's part of the difference.
func BenchmarkEchoDecidePaired(b *testing.B) { benchEchoDecidePaired(b) }

// BenchmarkEchoDecidePairedGeneratedClient is BenchmarkEchoDecidePaired with both sides' client
// decoding answers by their generated UnmarshalVT (generatedClientCodec).
func BenchmarkEchoDecidePairedGeneratedClient(b *testing.B) {
	benchEchoDecidePaired(b, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(generatedClientCodec{})))
}

// generatedClientCodec is a client codec that encodes and decodes the DeciderService's messages
// by their generated methods (no UTF-8 check on decoding, unlike protobuf-go).
type generatedClientCodec struct{}

func (generatedClientCodec) Name() string { return "proto" }

func (generatedClientCodec) Marshal(v any) (mem.BufferSlice, error) {
	return newServerCodec().Marshal(v)
}

func (generatedClientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(interface{ UnmarshalVT([]byte) error })
	if !ok {
		return newServerCodec().Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.UnmarshalVT(buf.ReadOnlyData())
}

func benchEchoDecidePaired(b *testing.B, dial ...grpc.DialOption) {
	const rounds, calls, callers = 31, 10000, 16
	targets := map[string]func(*testing.B) (string, func()){"echo": serveEcho, "decide": serveBenchDecider}
	req := &sluicev1.DecideRequest{Model: "m", InputTokens: 1000, RequestId: "bench"}
	run := func(name string) (cpu, wall float64) {
		addr, stop := targets[name](b)
		defer stop()
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		c := sluicev1.NewDeciderServiceClient(conn)
		if _, err := c.Decide(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		call := func(n int) {
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range n / callers {
						if _, err := c.Decide(context.Background(), req); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		// Untimed warm-up on the fresh server: its workers' stacks grow, its tables and
		// metric children are made.
		call(calls / 5)
		runtime.GC() // the previous round's garbage is not this round's cost
		start, cpu0 := time.Now(), processCPU(b)
		call(calls)
		n := float64(calls / callers * callers)
		return float64((processCPU(b) - cpu0).Nanoseconds()) / n, float64(time.Since(start).Nanoseconds()) / n
	}
	var cpuRatios, wallRatios, echoCPU, decideCPU []float64
	b.ResetTimer()
	for range b.N {
		for r := range rounds {
			order := []string{"echo", "decide"}
			if r%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			cpu, wall := map[string]float64{}, map[string]float64{}
			for _, name := range order {
				cpu[name], wall[name] = run(name)
			}
			echoCPU, decideCPU = append(echoCPU, cpu["echo"]), append(decideCPU, cpu["decide"])
			cpuRatios = append(cpuRatios, cpu["echo"]/cpu["decide"])
			wallRatios = append(wallRatios, wall["echo"]/wall["decide"])
		}
	}
	report := func(v []float64, unit string) {
		slices.Sort(v)
		q := func(f float64) float64 { return v[int(f*float64(len(v)-1)+0.5)] }
		b.ReportMetric(q(0.5), unit)
		b.ReportMetric(q(0.25), unit+"-q1")
		b.ReportMetric(q(0.75), unit+"-q3")
	}
	report(echoCPU, "echo-cpu-ns/call")
	report(decideCPU, "decide-cpu-ns/call")
	report(cpuRatios, "cpu-ratio")
	b.ReportMetric(cpuRatios[0], "cpu-ratio-min")
	b.ReportMetric(cpuRatios[len(cpuRatios)-1], "cpu-ratio-max")
	report(wallRatios, "wall-ratio")
}

// BenchmarkDecideService is the server side of BenchmarkGRPC's Decide without the transport:
// the decider service's Decide (translation, decision, lease, metrics, console hook and the
// response messages) on the same decider, console on as by default, one caller.
func BenchmarkDecideService(b *testing.B) {
	srv := runServer(b, benchDeciderConfig(b, func(*Config) {}))
	reportBenchLoad(b, srv)
	svc := &deciderService{logger: srv.logger, d: srv.decider, metrics: newMetrics(prometheus.NewRegistry(), srv.leases, srv.decider.ConfigVersion),
		console: console.NewTail(), shards: srv.shards}
	for _, dry := range []bool{false, true} {
		name := "lease"
		if dry {
			name = "dry_run"
		}
		b.Run(name, func(b *testing.B) {
			in := &sluicev1.DecideRequest{Model: "m", InputTokens: 1000, RequestId: "bench", DryRun: dry}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, err := svc.Decide(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkDecideAnswerWire is the answer's share of a Decide over gRPC, in process: building
// the answer of a plain decision with a lease (decisionToProto) and encoding it as the server
// does (the codec in use before, grpc's protobuf codec, and serverCodec), against an echo's
// empty answer; and decoding it as a client does (protobuf-go, as grpc-go's stock client, and
// the generated UnmarshalVT).
func BenchmarkDecideAnswerWire(b *testing.B) {
	dec := &decider.Decision{BucketID: "plain", ConfigVersion: 3,
		Plain: policy.Pick{Engine: &registry.Engine{ID: "e17", URL: "http://e17.test:8000", Role: registry.RolePlain}, Reason: "power_of_two"},
		Lease: inflight.Lease{ID: "0123456789abcdef0123456789abcdef", Expires: time.Now()}}
	stock := encoding.GetCodecV2(grpcproto.Name)
	codecs := []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpc_proto", stock}, {"server_codec", newServerCodec()}}
	for _, c := range codecs {
		b.Run("encode/decide/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				out, err := c.codec.Marshal(decisionToProto(dec))
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
			reportCPU(b, cpu0)
		})
		b.Run("encode/echo/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				out, err := c.codec.Marshal(&sluicev1.DecideResponse{})
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
			reportCPU(b, cpu0)
		})
	}
	wire, err := proto.Marshal(decisionToProto(dec))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("a plain answer with a lease is %d bytes", len(wire))
	decoders := []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpc_proto", stock}, {"generated", generatedClientCodec{}}}
	for _, c := range decoders {
		for _, side := range []struct {
			name string
			data []byte
		}{{"decide", wire}, {"echo", nil}} {
			b.Run("decode/"+side.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				data := mem.BufferSlice{mem.SliceBuffer(side.data)}
				cpu0 := processCPU(b)
				for b.Loop() {
					var r sluicev1.DecideResponse
					if err := c.codec.Unmarshal(data, &r); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu0)
			})
		}
	}
}

// reportCPU reports the process's CPU time per iteration since cpu0 as cpu-ns/op.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
