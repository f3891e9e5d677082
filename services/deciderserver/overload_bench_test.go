package deciderserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// BenchmarkOverload512 drives Decide from 512 concurrent callers over 8 gRPC connections, with
// the default -max-concurrent-decides and without a bound. Shed callers retry after 5 ms (an
// impatient client; a polite one waits the 1 s hint and offers less load). It reports the p50
// and p99 of admitted calls, the p99 of shed answers, the shed fraction and any other error.
func BenchmarkOverload512(b *testing.B) {
	for _, limit := range []int{16, DefaultConfig().MaxConcurrentDecides, 0} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			addr := startBenchDeciderWith(b, func(c *Config) { c.MaxConcurrentDecides = limit })
			conns := make([]sluicev1.DeciderServiceClient, 8)
			for i := range conns {
				conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { conn.Close() })
				conns[i] = sluicev1.NewDeciderServiceClient(conn)
			}
			req := &sluicev1.DecideRequest{Model: "m", InputTokens: 1000, DryRun: true}
			const callers = 512
			var (
				mu             sync.Mutex
				admitted, shed []time.Duration
				others         atomic.Int64
				left           atomic.Int64
			)
			left.Store(int64(b.N))
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := conns[i%len(conns)]
					var a, s []time.Duration
					for left.Add(-1) >= 0 {
						start := time.Now()
						_, err := c.Decide(context.Background(), req)
						d := time.Since(start)
						switch status.Code(err) {
						case codes.OK:
							a = append(a, d)
						case codes.ResourceExhausted:
							s = append(s, d)
							left.Add(1) // retried: does not count as served
							time.Sleep(5 * time.Millisecond)
						default:
							others.Add(1)
						}
					}
					mu.Lock()
					admitted, shed = append(admitted, a...), append(shed, s...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			pct := func(xs []time.Duration, p int) float64 {
				if len(xs) == 0 {
					return 0
				}
				slices.Sort(xs)
				return float64(xs[len(xs)*p/100].Microseconds()) / 1000
			}
			b.ReportMetric(pct(admitted, 50), "admitted-p50-ms")
			b.ReportMetric(pct(admitted, 99), "admitted-p99-ms")
			b.ReportMetric(pct(shed, 99), "shed-p99-ms")
			b.ReportMetric(float64(len(shed))/float64(max(1, len(shed)+len(admitted))), "shed-fraction")
			b.ReportMetric(float64(others.Load()), "other-errors")
		})
	}
}
