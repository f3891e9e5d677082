package kvindex

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkHashChain hashes a 512-block query alone: "cold" picks one of
// 2048 sequences (64 MiB of token ids, out of cache, as BenchmarkLookup's
// cold case), "hot" one of 8.
func BenchmarkHashChain(b *testing.B) {
	seqs := make([][]uint32, 2048)
	for s := range seqs {
		seqs[s] = seqTokens(s, 512)
	}
	var dst [512]uint64
	for _, c := range []struct {
		name string
		n    int
	}{{"cold", 2048}, {"hot", 8}} {
		b.Run(c.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			c0 := cpuTime()
			for b.Loop() {
				hashBlocks(dst[:], 1, seqs[r.IntN(c.n)], benchBS)
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
