package kvwire

import (
	"testing"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// BenchmarkDecodeKVRecord decodes one KV-event record (framing and payload)
// of 16 BlockStored events of 4 blocks × 16 tokens, as protobuf and as a
// vLLM map-form msgpack batch.
func BenchmarkDecodeKVRecord(b *testing.B) {
	pb := &sluicev1.KvEventBatch{EngineId: "e", Epoch: 1, Seq: 1, Model: "m"}
	var events []map[string]any
	for i := range 16 {
		hashes := []uint64{uint64(i)<<32 | 1<<63, uint64(i)<<32 | 2, uint64(i)<<32 | 3, uint64(i)<<32 | 4}
		toks := seq(uint32(i*64), 64)
		pb.Events = append(pb.Events, &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
			BlockHashes: hashes, TokenIds: toks, BlockSize: 16, Medium: sluicev1.Medium_MEDIUM_GPU}}})
		ev := vllmStored(hashes, nil, toks, 0)
		events = append(events, ev)
	}
	pv, err := proto.Marshal(pb)
	if err != nil {
		b.Fatal(err)
	}
	// Sorted keys, so that every run decodes the same bytes ("type" is not
	// first, which the decoder handles with a second pass over the map).
	mp := mpBatch(b, events...)
	hdr := func(kv ...string) []kafka.Header {
		var h []kafka.Header
		for i := 0; i < len(kv); i += 2 {
			h = append(h, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return h
	}
	for _, tc := range []struct {
		name string
		msg  kafka.Message
	}{
		{"proto", kafka.Message{Key: []byte("e"), Value: pv}},
		{"vllm-msgpack", kafka.Message{Key: []byte("e"), Value: mp, Headers: hdr(HeaderFormat, FormatVLLMMsgpack,
			HeaderEpoch, "1", HeaderSeq, "0", HeaderModel, "m")}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.msg.Value)))
			b.ReportAllocs()
			for b.Loop() {
				rec, rerr := DecodeRecord(&tc.msg, FormatProto)
				if rerr != nil || len(rec.Batch.Events) != 16 || len(rec.Batch.Skipped) != 0 {
					b.Fatalf("decode: %v, %d events, skipped %v", rerr, len(rec.Batch.Events), rec.Batch.Skipped)
				}
			}
			b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
