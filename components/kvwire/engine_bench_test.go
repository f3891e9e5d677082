package kvwire

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/components/kvwire/engineenc"
)

// BenchmarkDecodeEngineRecord decodes the record of one long prompt as the
// simulated engines publish it and enginelink forwards it (the shape of
// components/ingest's BenchmarkApplyLongPrompts, without the index): a
// BlockRemoved of 32 blocks and a BlockStored of 32 blocks of 16 tokens,
// with DecodeRecord and with a Decoder reusing its buffers.
func BenchmarkDecodeEngineRecord(b *testing.B) {
	toks := make([]uint32, 32*16)
	stored, removed := make([]uint64, 32), make([]uint64, 32)
	for i := range toks {
		toks[i] = uint32(uint64(i) * 0x9e3779b97f4a7c15 >> 40 % 151_000)
	}
	for i := range stored {
		stored[i], removed[i] = uint64(i+1)*0x9e3779b97f4a7c15, uint64(i+1)*0xbf58476d1ce4e5b9
	}
	for _, f := range []struct{ wire, header string }{{"sglang", FormatSGLangMsgpack}, {"vllm", FormatVLLMMsgpack}} {
		v, err := engineenc.Batch(f.wire, tsFloat, 0, []engineenc.Event{
			{Kind: engineenc.BlockRemoved, BlockHashes: removed},
			{Kind: engineenc.BlockStored, BlockHashes: stored, TokenIDs: toks, BlockSize: 16, ParentHash: 7, HasParent: true}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		msg := &kafka.Message{Key: []byte("engine-0"), Value: v, Headers: []kafka.Header{
			{Key: HeaderFormat, Value: []byte(f.header)}, {Key: HeaderModel, Value: []byte("Qwen/Qwen3-8B")},
			{Key: HeaderDPRank, Value: []byte("0")}, {Key: HeaderEpoch, Value: []byte("1")}, {Key: HeaderSeq, Value: []byte("12345")}}}
		var d Decoder
		for _, way := range []struct {
			name   string
			decode func() (Record, *RecordError)
		}{
			{"DecodeRecord", func() (Record, *RecordError) { return DecodeRecord(msg, FormatProto) }},
			{"Decoder", func() (Record, *RecordError) { return d.DecodeRecord(msg, FormatProto) }},
		} {
			b.Run(f.wire+"/"+way.name, func(b *testing.B) {
				b.SetBytes(int64(len(v)))
				b.ReportAllocs()
				for b.Loop() {
					if rec, err := way.decode(); err != nil || len(rec.Batch.Events) != 2 {
						b.Fatalf("decode: %v, %d events", err, len(rec.Batch.Events))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/block")
			})
		}
	}
}
