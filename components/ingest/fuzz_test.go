package ingest

import (
	"testing"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// FuzzDecodeKVProto checks that no KvEventBatch payload panics the decoder
// and that accepted events satisfy the invariants the index relies on.
func FuzzDecodeKVProto(f *testing.F) {
	for _, b := range []*sluicev1.KvEventBatch{stored("e", 0, 1, 1, 5, 3), removed("e", 1, 2, 3, 4), cleared("e", 0, 1, 1)} {
		v, _ := proto.Marshal(b)
		f.Add([]byte("e"), v)
	}
	f.Add([]byte(""), []byte{0x4a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		rec, err := decodeKVProto(key, value)
		if err != nil {
			return
		}
		if rec.engine == "" || rec.rank < 0 {
			t.Fatalf("accepted record without engine or with rank %d", rec.rank)
		}
		for _, ev := range rec.batch.Events {
			if s := ev.Stored; s != nil && len(s.TokenIDs) != s.BlockSize*len(s.BlockHashes) {
				t.Fatalf("accepted BlockStored with %d tokens for %d blocks of %d", len(s.TokenIDs), len(s.BlockHashes), s.BlockSize)
			}
		}
	})
}

// FuzzDecodeKVRecord drives the header dispatch, including msgpack payloads.
func FuzzDecodeKVRecord(f *testing.F) {
	f.Add("vllm.msgpack", "1", "2", []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x00})
	f.Add("", "", "", []byte{})
	// The engine shapes of TestBrokerKVEngineShapes: hybrid groups (a sparse
	// sliding-window event), LoRA + salt in extra_keys with EAGLE lookahead,
	// SGLang map form with cache_salt, an unknown medium, seq 0.
	hybrid := vllmStored([]uint64{1 << 63}, nil, make([]uint32, 16), 1)
	sparse := vllmStored([]uint64{2}, uint64(1<<63), make([]uint32, 32), 1)
	lora := vllmStored([]uint64{3, 4}, nil, make([]uint32, 32), 0)
	lora["lora_name"], lora["medium"], lora["extra_keys"] = "a", "STORAGE", []any{[]any{"a", "salt"}, []any{"a"}}
	lora["lookahead_token_ids"] = []uint32{1}
	sg := map[string]any{"type": "BlockStored", "block_hashes": []int64{-1, -2}, "token_ids": []uint32{1, 2}, "block_size": 1,
		"medium": "CPU_PINNED", "cache_salt": "t", "lora_name": "x"}
	unknown := vllmStored([]uint64{5}, nil, make([]uint32, 16), 0)
	unknown["medium"] = "CXL"
	f.Add(FormatVLLMMsgpack, "1", "0", mpBatch(f, hybrid, sparse, lora, unknown))
	f.Add(FormatSGLangMsgpack, "1", "0", mpBatch(f, sg))
	f.Fuzz(func(t *testing.T, format, epoch, seq string, value []byte) {
		msg := &kafka.Message{Key: []byte("e"), Value: value, Headers: []kafka.Header{
			{Key: HeaderFormat, Value: []byte(format)}, {Key: HeaderEpoch, Value: []byte(epoch)},
			{Key: HeaderSeq, Value: []byte(seq)}, {Key: HeaderModel, Value: []byte("m")}}}
		_, _ = decodeKVRecord(msg, FormatProto)
	})
}

// FuzzDecodeLoadReport checks the load-report translation never panics.
func FuzzDecodeLoadReport(f *testing.F) {
	v, _ := proto.Marshal(&sluicev1.LoadReport{EngineId: "e", Epoch: 1, Seq: 1, CapturedAt: timestamppb.Now(),
		Native: &sluicev1.NativeLoad{MaxRunningRequests: 3}})
	f.Add([]byte("e"), v)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := decodeLoadReport(key, value)
		if err == nil && r.EngineID == "" && len(key) > 0 {
			t.Fatalf("accepted report lost its key")
		}
	})
}
