package kvindex

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkHashChain hashes a 512-block query alone: "cold" picks one of
// 2048 sequences (64 MiB of token ids, out of cache, as BenchmarkLookup's
// cold case), "hot" one of 8; "hot_go" is "hot" through the Go loop, for
// comparison with the assembly where the CPU runs that.
func BenchmarkHashChain(b *testing.B) {
	seqs := make([][]uint32, 2048)
	for s := range seqs {
		seqs[s] = seqTokens(s, 512)
	}
	var dst [512]uint64
	for _, c := range []struct {
		name string
		n    int
		hash func([]uint64, uint64, []uint32) uint64
	}{
		{"cold", 2048, hashBlocks16},
		{"hot", 8, hashBlocks16},
		{"hot_go", 8, hashBlocks16Go}, // the Go loop, where the CPU runs the assembly
	} {
		b.Run(c.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			c0 := cpuTime()
			for b.Loop() {
				c.hash(dst[:], 1, seqs[r.IntN(c.n)])
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
