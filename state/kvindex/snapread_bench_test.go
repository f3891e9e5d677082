package kvindex

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// BenchmarkReadSnapshot restores a 2M-block index (4096 prompts x 512 blocks over 64 engines)
// from its snapshot; cold start is bound by this.
func BenchmarkReadSnapshot(b *testing.B) {
	st := slots.NewTable()
	ix, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	for e := range 64 {
		st.Intern(string(rune('A'+e%26)) + string(rune('a'+e/26)))
	}
	const prompts, blocks = 4096, 512
	for p := range prompts {
		toks := seqTokens(p, blocks)
		hashes := make([]uint64, blocks)
		for i := range hashes {
			hashes[i] = uint64(p)<<20 | uint64(i)
		}
		if err := ix.Store(Holder{Engine: slots.Slot(p % 64)}, nsA, &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: toks, BlockSize: benchBS}); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := ix.WriteSnapshot(&buf, st); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(buf.Len())/(1<<20), "snapshot-MiB")
	b.ResetTimer()
	for b.Loop() {
		if _, err := ReadSnapshot(bytes.NewReader(buf.Bytes()), Config{}, st); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(prompts*blocks)/(float64(b.Elapsed().Seconds())/float64(b.N))/1e6, "Mblocks/s")
}
