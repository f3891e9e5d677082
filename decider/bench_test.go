package decider

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// benchFixture has 64 plain engines of model "m" with fresh native reports, and the given
// policy attached to the default plain bucket.
func benchFixture(b *testing.B, policyType string) *fixture {
	b.Helper()
	var ws []registry.Engine
	for i := range 64 {
		ws = append(ws, engine(fmt.Sprintf("e%02d", i), registry.RolePlain))
	}
	f := newFixture(b, ws)
	f.apply(fmt.Sprintf(`
default_policy:
  plain: {type: %s, admission: {max_running_requests: 1000000, max_inflight_requests: 1000000}}
`, policyType))
	for i, w := range ws {
		err := f.load.Apply(loadtable.Report{EngineID: w.ID, Epoch: 1, Seq: 1, CapturedAt: time.Now(),
			Running: int64(i % 7), Waiting: int64(i % 3), KVUsedTokens: 100, KVCapacityTokens: 1000,
			Native: &loadtable.Native{WaitingUncachedTokens: int64(i * 10), TotalTokens: 100, MaxRunningRequests: 64}})
		if err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// BenchmarkDecide measures the in-process pick path (dry run: no lease) for each policy over
// 64 engines.
func BenchmarkDecide(b *testing.B) {
	for _, p := range []string{"round_robin", "random", "power_of_two", "load_based", "ttft_aware"} {
		b.Run(p, func(b *testing.B) {
			f := benchFixture(b, p)
			req := policy.Request{Model: "m", InputTokens: 1000, ExpectedPeakTokens: 1200, HasPeak: true, DryRun: true}
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, err := f.d.Decide(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// BenchmarkDecideWithLease adds lease acquisition and release to the pick path.
func BenchmarkDecideWithLease(b *testing.B) {
	f := benchFixture(b, "power_of_two")
	req := policy.Request{Model: "m", InputTokens: 1000}
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		dec, err := f.d.Decide(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		f.d.Release(dec.Lease.ID)
	}
	reportCPU(b, cpu0)
}

// processCPU is the process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per iteration since cpu0: on a shared machine it
// moves far less than ns/op, which also counts the time other work held the cores.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
