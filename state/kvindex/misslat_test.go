package kvindex

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkMissLatency measures the latency of one dependent load at a
// random place in an array of the given size: a chase through a random
// cyclic permutation of 64-byte lines, so that each load's address comes
// from the previous load (as a lookup's probe levels do: a table slot
// names a node, a node names its holders). 32 MiB is the lookup
// benchmark's index (1M blocks: ~20 MiB of nodes, ~6 MiB of block table,
// the holders' spills); 1 GiB is beyond the last-level cache. It reports
// ns per load, wall and CPU time; it bounds what a cold lookup can cost
// (BENCHMARKS.md, "KV prefix index").
func BenchmarkMissLatency(b *testing.B) {
	for _, mb := range []int{32, 1024} {
		b.Run("MiB="+itoa(mb), func(b *testing.B) {
			const line = 8 // uint64s per 64-byte line
			n := mb << 20 / 64
			next := make([]uint64, n*line)
			perm := rand.New(rand.NewPCG(5, 6)).Perm(n)
			for i := range n {
				next[perm[i]*line] = uint64(perm[(i+1)%n] * line)
			}
			p := uint64(perm[0] * line)
			for range n { // one lap to map the pages and warm what can be warm
				p = next[p]
			}
			b.ResetTimer()
			c0, t0 := cpuTime(), time.Now()
			for range b.N {
				p = next[p]
			}
			cpu, wall := cpuTime()-c0, time.Since(t0)
			lookupSink.Store(p)
			b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N), "wall-ns/load")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/load")
		})
	}
}
