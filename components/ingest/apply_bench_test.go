package ingest

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/components/kvwire"
	"github.com/sluicehq/sluice/components/kvwire/engineenc"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// Shape of the long-prompt apply benchmark: each record is one request's
// store as a simulated engine publishes it (services/simengine/engine's
// prefix cache: the LRU blocks it evicted, then the new chain), 32 blocks of
// 16 tokens removed and 32 stored, on 4 engines each keeping 256 requests'
// blocks resident; conversations of 4 turns, each turn continuing the last.
const (
	applyEngines   = 4
	applyBlocks    = 32
	applyBlockSize = 16
	applyResident  = 256 // records per engine whose blocks are in the index
	applyCycle     = 2 * applyResident
	applyTurns     = 4
)

// applyHash is engine e's hash of block b of chunk c: 64 random-looking bits
// (SGLang's are int64 and so often negative, nine bytes on the wire).
func applyHash(e, c, b int) uint64 {
	x := uint64(e)<<48 ^ uint64(c)<<16 ^ uint64(b) + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func applyChunkHashes(e, c int) []uint64 {
	hs := make([]uint64, applyBlocks)
	for b := range hs {
		hs[b] = applyHash(e, c, b)
	}
	return hs
}

// applyRecords builds one cycle of records per engine, interleaved, with
// the headers enginelink forwards (format, model, dp rank, epoch, seq); seq
// is rewritten per use.
func applyRecords(tb testing.TB, format, kvFormat string) []kafka.Message {
	var msgs []kafka.Message
	ts := float64(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()) / 1e9
	for c := range applyCycle {
		for e := range applyEngines {
			rm := engineenc.Event{Kind: engineenc.BlockRemoved,
				BlockHashes: applyChunkHashes(e, (c-applyResident+applyCycle)%applyCycle)}
			st := engineenc.Event{Kind: engineenc.BlockStored, BlockSize: applyBlockSize,
				BlockHashes: applyChunkHashes(e, c), TokenIDs: make([]uint32, applyBlocks*applyBlockSize)}
			for i := range st.TokenIDs {
				st.TokenIDs[i] = uint32(applyHash(e, c, 1000+i) % 151_000) // a 151k vocabulary
			}
			if c%applyTurns != 0 {
				st.ParentHash, st.HasParent = applyHash(e, c-1, applyBlocks-1), true
			}
			v, err := engineenc.Batch(format, ts+float64(c), 0, []engineenc.Event{rm, st}, nil)
			if err != nil {
				tb.Fatal(err)
			}
			msgs = append(msgs, kafka.Message{Key: []byte("engine-" + strconv.Itoa(e)), Value: v, Headers: []kafka.Header{
				{Key: kvwire.HeaderFormat, Value: []byte(kvFormat)},
				{Key: kvwire.HeaderModel, Value: []byte("Qwen/Qwen3-8B")},
				{Key: kvwire.HeaderDPRank, Value: []byte("0")},
				{Key: kvwire.HeaderEpoch, Value: []byte("1")},
				{Key: kvwire.HeaderSeq, Value: nil},
			}})
		}
	}
	return msgs
}

// BenchmarkApplyLongPrompts measures what ingesting one KV record costs the
// decider (or a gateway with -embed-decider): kvwire decoding, the
// epoch/seq rules and the real index's Store and Remove, through the public
// KVIngester.Apply path, at steady state (the index holds 4 × 256 × 32
// blocks; every record evicts as many as it adds). ns/block is per block
// stored or removed (64 per record).
func BenchmarkApplyLongPrompts(b *testing.B) {
	for _, f := range []struct{ name, wire, header string }{
		{"sglang", "sglang", kvwire.FormatSGLangMsgpack},
		{"vllm", "vllm", kvwire.FormatVLLMMsgpack},
	} {
		b.Run(f.name, func(b *testing.B) {
			msgs := applyRecords(b, f.wire, f.header)
			ix, err := kvindex.New(kvindex.Config{})
			if err != nil {
				b.Fatal(err)
			}
			k, err := NewKVIngester(testLogger(b), KVConfig{Config: Config{Brokers: []string{"unused:9092"}}},
				ix, slots.NewTable(), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			var seq [applyEngines]uint64
			var seqBuf [applyEngines][20]byte
			apply := func(i int) {
				m := &msgs[i%len(msgs)]
				e := i % applyEngines
				m.Headers[4].Value = strconv.AppendUint(seqBuf[e][:0], seq[e], 10)
				seq[e]++
				k.Apply(*m)
			}
			// One cycle first, so that the timed records meet a full index.
			n := 0
			for ; n < len(msgs); n++ {
				apply(n)
			}
			before := k.Stats()
			b.SetBytes(int64(len(msgs[0].Value)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				apply(n)
				n++
			}
			b.StopTimer()
			st := k.Stats()
			if st.RejectedEvents != before.RejectedEvents || st.Gaps != 0 || st.Duplicates != 0 ||
				st.BlocksStored-before.BlocksStored != int64(b.N*applyBlocks) {
				b.Fatalf("stats %+v, before the timed records %+v", st, before)
			}
			// A removed turn's blocks stay while the conversation's later turns
			// hang from them (no holder left, pruned with the leaves).
			if live, most := ix.Stats().Nodes, applyEngines*(applyResident+applyTurns)*applyBlocks; live > most {
				b.Fatalf("index holds %d blocks, want at most %d: removals did not apply", live, most)
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns/(2*applyBlocks), "ns/block")
		})
	}
}
