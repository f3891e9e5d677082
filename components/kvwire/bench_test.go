package kvwire

import "testing"

// BenchmarkDecodeMsgpack decodes a vLLM-shaped batch of 16 BlockStored
// events of 4 blocks × 16 tokens each, positional and map form.
//
// Its time includes garbage collection, whose cost per cycle grows with what
// else the test binary holds: this package links protobuf and kafka-go, so
// it reads about 20% slower than the same decoder did in state/kvevents' test
// binary (identical with GOGC=off, or with those imports added there).
// Compare runs of this package with each other.
func BenchmarkDecodeMsgpack(b *testing.B) {
	for _, form := range []string{"positional", "map"} {
		b.Run(form, func(b *testing.B) {
			var events []any
			for i := range 16 {
				hashes := []uint64{uint64(i)<<32 | 1<<63, uint64(i)<<32 | 2, uint64(i)<<32 | 3, uint64(i)<<32 | 4}
				toks := seq(uint32(i*64), 64)
				if form == "map" {
					events = append(events, omap{{"type", "BlockStored"}, {"block_hashes", hashes}, {"parent_block_hash", nil},
						{"token_ids", toks}, {"block_size", 16}, {"lora_id", nil}, {"medium", "GPU"}, {"lora_name", nil},
						{"extra_keys", nil}, {"group_idx", 0}, {"kv_cache_spec_kind", "full_attention"}})
				} else {
					events = append(events, []any{"BlockStored", hashes, nil, toks, 16, nil, "GPU"})
				}
			}
			payload := encode(b, []any{tsFloat, events, 0})
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeMsgpack(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
