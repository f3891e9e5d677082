package kvwire

import (
	"testing"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// FuzzDecodeKVProto checks that no KvEventBatch payload panics the decoder
// and that accepted events satisfy the invariants the index relies on.
func FuzzDecodeKVProto(f *testing.F) {
	for _, b := range []*sluicev1.KvEventBatch{pbStored("e", 0, 1, 1, 5, 3), pbRemoved("e", 1, 2, 3, 4), pbCleared("e", 0, 1, 1)} {
		v, _ := proto.Marshal(b)
		f.Add([]byte("e"), v)
	}
	f.Add([]byte(""), []byte{0x4a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		rec, err := defaultDecoder.protoRecord(key, value)
		if err != nil {
			return
		}
		if rec.Engine == "" || rec.Rank < 0 {
			t.Fatalf("accepted record without engine or with rank %d", rec.Rank)
		}
		for _, ev := range rec.Batch.Events {
			if s := ev.Stored; s != nil && (!s.Canonical() || len(s.TokenIDs) != s.BlockSize*len(s.BlockHashes)) {
				t.Fatalf("accepted BlockStored with %d tokens for %d blocks of %d", len(s.TokenIDs), len(s.BlockHashes), s.BlockSize)
			}
		}
	})
}

// FuzzDecodeKVRecord drives the header dispatch, including msgpack payloads.
func FuzzDecodeKVRecord(f *testing.F) {
	f.Add("vllm.msgpack", "1", "2", []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x00})
	f.Add("", "", "", []byte{})
	// Engine shapes: hybrid groups (a sparse sliding-window event), LoRA +
	// salt in extra_keys with EAGLE lookahead, SGLang map form with
	// cache_salt, an unknown medium, seq 0.
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
		_, _ = DecodeRecord(msg, FormatProto)
	})
}
