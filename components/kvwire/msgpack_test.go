package kvwire

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/kvevents"
)

// qwenTokens are the token ids of the real vLLM 0.26 batch in docs/wire-formats.md.
var qwenTokens = []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}

const tsFloat = 1789095808.8378847

var tsTime = time.Unix(1789095808, 837885000).UTC()

func TestDecodeGolden(t *testing.T) {
	tokens32 := seq(1000, 32)
	tests := []struct {
		name  string
		build any
		want  kvevents.Batch
	}{
		{
			name: "vllm_026_map_events",
			build: []any{tsFloat, []any{omap{
				{"type", "BlockStored"},
				{"block_hashes", []uint64{15760518052499183552}},
				{"parent_block_hash", nil},
				{"token_ids", qwenTokens},
				{"block_size", 16},
				{"lora_id", nil},
				{"medium", "GPU"},
				{"lora_name", nil},
				{"extra_keys", []any{nil}},
				{"group_idx", 0},
				{"kv_cache_spec_kind", "full_attention"},
			}}, 0},
			want: kvevents.Batch{Time: tsTime, DPRank: 0, HasRank: true, Events: []kvevents.Event{{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{
				BlockHashes: []uint64{15760518052499183552}, TokenIDs: qwenTokens, BlockSize: 16, Medium: kvevents.MediumGPU,
				GroupKind: kvevents.GroupKindFull,
			}}}},
		},
		{
			name: "vllm_positional_full",
			build: []any{tsFloat, []any{
				[]any{"BlockStored", []uint64{1 << 63, 2}, uint64(99), tokens32, 16, 3, "CPU", "adapter-a",
					[]any{nil, []any{"mm-hash-1", 7}}, 0, "full_attention", nil},
				[]any{"BlockRemoved", []uint64{1 << 63}, "CPU", 0},
			}, 2},
			want: kvevents.Batch{Time: tsTime, DPRank: 2, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{
					BlockHashes: []uint64{1 << 63, 2}, ParentHash: 99, HasParent: true, TokenIDs: tokens32, BlockSize: 16,
					LoRAName: "adapter-a", Medium: kvevents.MediumCPU, ExtraKeys: []string{"", "\x92\xa9mm-hash-1\x07"},
					GroupKind: kvevents.GroupKindFull,
				}},
				{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{1 << 63}, Medium: kvevents.MediumCPU}},
			}},
		},
		{
			name: "vllm_positional_trailing_omitted",
			build: []any{tsFloat, []any{
				[]any{"BlockStored", []uint64{5}, nil, seq(0, 16), 16},
				[]any{"BlockStored", []uint64{6}, uint64(5), seq(16, 16), 16, 4},
				[]any{"BlockRemoved", []uint64{5, 6}},
				[]any{"AllBlocksCleared"},
			}},
			want: kvevents.Batch{Time: tsTime, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{5}, TokenIDs: seq(0, 16), BlockSize: 16}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{6}, ParentHash: 5, HasParent: true, TokenIDs: seq(16, 16), BlockSize: 16, LoRAName: "#4"}},
				{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{5, 6}, AllTiers: true}},
				{Kind: kvevents.KindAllBlocksCleared},
			}},
		},
		{
			name: "vllm_map_batch",
			build: omap{
				{"ts", tsFloat},
				{"events", []any{
					omap{{"type", "BlockRemoved"}, {"block_hashes", []uint64{7}}, {"medium", nil}},
					omap{{"type", "AllBlocksCleared"}},
				}},
				{"data_parallel_rank", 3},
			},
			want: kvevents.Batch{Time: tsTime, DPRank: 3, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{7}, AllTiers: true}},
				{Kind: kvevents.KindAllBlocksCleared},
			}},
		},
		{
			name: "map_event_type_not_first",
			build: []any{tsFloat, []any{omap{
				{"block_hashes", []int64{-1}}, {"token_ids", seq(0, 4)}, {"block_size", 4}, {"type", "BlockStored"},
			}}, nil},
			want: kvevents.Batch{Time: tsTime, Events: []kvevents.Event{{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{
				BlockHashes: []uint64{^uint64(0)}, TokenIDs: seq(0, 4), BlockSize: 4,
			}}}},
		},
		{
			name: "sglang_positional_metadata",
			build: []any{tsFloat, []any{
				[]any{"BlockStored", []int64{-42, 42}, int64(-7), seq(0, 8), 4, nil, "CPU_PINNED",
					omap{{"cache_salt", "tenant-1"}, {"session_id", "s-9"}}},
				[]any{"BlockRemoved", []int64{-42}, "CPU_PINNED"},
				[]any{"BlockStored", []int64{43}, int64(42), seq(8, 3), 3, nil, nil}, // short last page
			}, 1},
			want: kvevents.Batch{Time: tsTime, DPRank: 1, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{
					BlockHashes: []uint64{uint64(1<<64 - 42), 42}, ParentHash: uint64(1<<64 - 7), HasParent: true,
					TokenIDs: seq(0, 8), BlockSize: 4, Medium: kvevents.MediumCPU, CacheSalt: "tenant-1",
				}},
				{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(1<<64 - 42)}, Medium: kvevents.MediumCPU}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{43}, ParentHash: 42, HasParent: true, TokenIDs: seq(8, 3), BlockSize: 3}},
			}},
		},
		{
			name: "sglang_eagle_pairs",
			build: []any{tsFloat, []any{
				[]any{"BlockStored", []int64{11}, nil, [][]uint32{{1, 2}, {2, 3}, {3, 4}, {4, 5}}, 4},
			}, 0},
			want: kvevents.Batch{Time: tsTime, HasRank: true, Events: []kvevents.Event{{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{
				BlockHashes: []uint64{11}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Lookahead: true,
			}}}},
		},
		{
			name: "vllm_bin_hashes",
			build: []any{tsFloat, []any{
				[]any{"BlockStored", [][]byte{bin32(0x0102030405060708)}, bin32(0xFFFFFFFFFFFFFFFF), seq(0, 2), 2},
			}, 0},
			want: kvevents.Batch{Time: tsTime, HasRank: true, Events: []kvevents.Event{{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{
				BlockHashes: []uint64{0x0102030405060708}, ParentHash: ^uint64(0), HasParent: true, TokenIDs: seq(0, 2), BlockSize: 2,
			}}}},
		},
		{
			name: "hybrid_model_groups",
			build: []any{tsFloat, []any{
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{1}}, {"token_ids", seq(0, 16)}, {"block_size", 16},
					{"group_idx", 1}, {"kv_cache_spec_kind", "sliding_window"}, {"kv_cache_spec_sliding_window", 128}},
				[]any{"BlockStored", []uint64{2}, nil, seq(0, 16), 16, nil, nil, nil, nil, 2, "mamba", nil},
				[]any{"BlockStored", []uint64{3}, nil, seq(0, 16), 16, nil, "GPU", nil, nil, 0, "full_attention", nil},
			}, 0},
			// Every group's events are returned; the index decides which it keeps.
			want: kvevents.Batch{Time: tsTime, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{1}, TokenIDs: seq(0, 16), BlockSize: 16, Group: 1, GroupKind: kvevents.GroupKindWindowed}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{2}, TokenIDs: seq(0, 16), BlockSize: 16, Group: 2, GroupKind: kvevents.GroupKindState}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{3}, TokenIDs: seq(0, 16), BlockSize: 16, GroupKind: kvevents.GroupKindFull}},
			}},
		},
		{
			// vLLM 0.33 GPU block pool, hybrid model: every group sends the same
			// hashes and tokens without kv_cache_spec_kind; the sliding-window
			// group skips null blocks, so its token count does not line up.
			name: "vllm_033_hybrid_gpu_pool",
			build: []any{tsFloat, []any{
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{10, 11}}, {"parent_block_hash", nil},
					{"token_ids", seq(0, 32)}, {"block_size", 16}, {"lora_id", nil}, {"medium", "GPU"}, {"lora_name", nil},
					{"extra_keys", nil}, {"group_idx", 0}, {"kv_cache_spec_kind", nil}, {"kv_cache_spec_sliding_window", nil},
					{"locality", "LOCAL"}, {"ownership", nil}, {"session_id", nil}, {"lookahead_token_ids", nil}},
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{10, 11}}, {"parent_block_hash", nil},
					{"token_ids", seq(0, 32)}, {"block_size", 16}, {"medium", "GPU"}, {"group_idx", 1}},
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{13}}, {"parent_block_hash", uint64(11)},
					{"token_ids", seq(32, 32)}, {"block_size", 16}, {"medium", "GPU"}, {"group_idx", 1}},
				omap{{"type", "BlockRemoved"}, {"block_hashes", []uint64{10}}, {"medium", "GPU"}, {"group_idx", 1},
					{"locality", "LOCAL"}, {"ownership", nil}},
			}, 0},
			want: kvevents.Batch{Time: tsTime, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{10, 11}, TokenIDs: seq(0, 32), BlockSize: 16}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{10, 11}, TokenIDs: seq(0, 32), BlockSize: 16, Group: 1}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{13}, ParentHash: 11, HasParent: true,
					BlockSize: 16, Group: 1, Sparse: true}},
				{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{10}, Group: 1}},
			}},
		},
		{
			// vLLM 0.33 with a LoRA adapter, a cache salt (both folded into
			// extra_keys), EAGLE lookahead tokens and offloading to storage.
			name: "vllm_033_lora_salt_eagle",
			build: []any{tsFloat, []any{
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{20, 21}}, {"parent_block_hash", nil},
					{"token_ids", seq(100, 32)}, {"block_size", 16}, {"lora_id", 1}, {"medium", "STORAGE"}, {"lora_name", "sql-lora"},
					{"extra_keys", []any{[]any{"sql-lora", "salt-A"}, []any{"sql-lora"}}}, {"group_idx", 0},
					{"kv_cache_spec_kind", "full_attention"}, {"session_id", "s-1"}, {"lookahead_token_ids", []uint32{7, 8}}},
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{22}}, {"parent_block_hash", uint64(21)},
					{"token_ids", seq(132, 16)}, {"block_size", 16}, {"lora_name", "sql-lora"},
					{"extra_keys", []any{[]any{"sql-lora", "mm-abc"}}}},
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{30}}, {"parent_block_hash", nil},
					{"token_ids", seq(0, 16)}, {"block_size", 16}, {"medium", "CPU"},
					{"extra_keys", []any{[]any{"mm-img", 3}}}},
				omap{{"type", "BlockStored"}, {"block_hashes", []uint64{31}}, {"parent_block_hash", nil},
					{"token_ids", seq(0, 16)}, {"block_size", 16}, {"medium", "HBM_NEXT"}},
			}, 0},
			want: kvevents.Batch{Time: tsTime, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{20, 21}, TokenIDs: seq(100, 32), BlockSize: 16,
					LoRAName: "sql-lora", Medium: kvevents.MediumDisk, CacheSalt: "salt-A", GroupKind: kvevents.GroupKindFull, Lookahead: true}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{22}, ParentHash: 21, HasParent: true,
					TokenIDs: seq(132, 16), BlockSize: 16, LoRAName: "sql-lora", ExtraKeys: []string{"\x91\xa6mm-abc"}}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{30}, TokenIDs: seq(0, 16), BlockSize: 16,
					Medium: kvevents.MediumCPU, ExtraKeys: []string{"\x92\xa6mm-img\x03"}}},
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{31}, TokenIDs: seq(0, 16), BlockSize: 16,
					Medium: kvevents.MediumUnknown}},
			}},
		},
		{
			// SGLang 0.5.23 map events: cache_salt and lora_name as keys, the
			// HiCache host tier.
			name: "sglang_0523_map",
			build: []any{tsFloat, []any{
				omap{{"type", "BlockStored"}, {"block_hashes", []int64{-5, 6}}, {"parent_block_hash", nil},
					{"token_ids", seq(0, 2)}, {"block_size", 1}, {"lora_id", nil}, {"medium", "CPU_PINNED"},
					{"cache_salt", "t1"}, {"session_id", nil}, {"lora_name", "ad"}},
				omap{{"type", "BlockRemoved"}, {"block_hashes", []int64{-5}}, {"medium", "CPU_PINNED"}},
			}, 0},
			want: kvevents.Batch{Time: tsTime, HasRank: true, Events: []kvevents.Event{
				{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{uint64(1<<64 - 5), 6}, TokenIDs: seq(0, 2), BlockSize: 1,
					LoRAName: "ad", Medium: kvevents.MediumCPU, CacheSalt: "t1"}},
				{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(1<<64 - 5)}, Medium: kvevents.MediumCPU}},
			}},
		},
		{
			name: "bad_events_skipped",
			build: []any{tsFloat, []any{
				[]any{"BlockStored", []uint64{1}, nil, seq(0, 16), 16},
				[]any{"BlockMoved", []uint64{1}},                               // unknown tag
				[]any{"BlockStored", []uint64{2}, nil, seq(0, 15), 16, nil},    // a lone short page: BlockSize becomes its length
				[]any{"BlockStored", []uint64{3, 4}, nil, seq(0, 31), 16},      // token count mismatch
				[]any{"BlockStored", []any{"nope"}, nil, seq(0, 16), 16},       // bad hash
				[]any{"BlockStored", []any{[]byte{1, 2}}, nil, seq(0, 16), 16}, // bin too short
				[]any{"BlockStored", []uint64{5}, nil, []int64{-1}, 1},         // bad token
				omap{{"block_hashes", []uint64{9}}},                            // map without type
				[]any{"BlockRemoved", []uint64{1}, "NVME"},                     // unknown medium is kept, index ignores it
			}, 0},
			want: kvevents.Batch{Time: tsTime, HasRank: true,
				Events: []kvevents.Event{
					{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{1}, TokenIDs: seq(0, 16), BlockSize: 16}},
					{Kind: kvevents.KindBlockStored, Stored: &kvevents.BlockStored{BlockHashes: []uint64{2}, TokenIDs: seq(0, 15), BlockSize: 15}},
					{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{1}, Medium: kvevents.MediumUnknown}},
				},
				Skipped: []*kvevents.Error{
					{Kind: kvevents.KindUnknownEventTag, Event: 1},
					{Kind: kvevents.KindTokenCountMismatch, Event: 3},
					{Kind: kvevents.KindBadHash, Event: 4},
					{Kind: kvevents.KindBadHash, Event: 5},
					{Kind: kvevents.KindBadToken, Event: 6},
					{Kind: kvevents.KindUnknownEventTag, Event: 7},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			payload := golden(t, tc.name, encode(t, tc.build))
			got, err := DecodeMsgpack(payload)
			if err != nil {
				t.Fatalf("DecodeMsgpack(%s) error: %v", tc.name, err)
			}
			opts := cmp.Options{cmp.Comparer(func(a, b *kvevents.Error) bool {
				return a.Kind == b.Kind && a.Event == b.Event
			})}
			if diff := cmp.Diff(tc.want, got, opts); diff != "" {
				t.Errorf("DecodeMsgpack(%s) mismatch (-want +got):\n%s", tc.name, diff)
			}
		})
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	small := &decoder{lim: kvevents.Limits{MaxPayloadBytes: 1 << 20, MaxEventsPerBatch: 2, MaxHashesPerEvent: 2, MaxTokensPerEvent: 32}}
	good := encode(t, []any{tsFloat, []any{[]any{"AllBlocksCleared"}}, 0})
	tests := []struct {
		name    string
		payload []byte
		dec     *decoder
		want    kvevents.ErrorKind
	}{
		{name: "empty", payload: nil, want: kvevents.KindMalformed},
		{name: "reserved type byte", payload: []byte{0xc1}, want: kvevents.KindMalformed},
		{name: "truncated", payload: good[:len(good)-1], want: kvevents.KindMalformed},
		{name: "trailing bytes", payload: append(append([]byte{}, good...), 0x01), want: kvevents.KindMalformed},
		{name: "integer batch", payload: encode(t, 7), want: kvevents.KindMalformed},
		{name: "array of one", payload: encode(t, []any{tsFloat}), want: kvevents.KindMalformed},
		{name: "events not an array", payload: encode(t, []any{tsFloat, "x"}), want: kvevents.KindMalformed},
		{name: "map without events", payload: encode(t, omap{{"ts", tsFloat}}), want: kvevents.KindMalformed},
		{name: "huge array length", payload: []byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}, want: kvevents.KindMalformed},
		{name: "negative rank", payload: encode(t, []any{tsFloat, []any{}, -1}), want: kvevents.KindBadField},
		{name: "nan ts", payload: encode(t, []any{"x", []any{}}), want: kvevents.KindMalformed},
		{name: "too many events", dec: small, payload: encode(t, []any{tsFloat, []any{[]any{"AllBlocksCleared"}, []any{"AllBlocksCleared"}, []any{"AllBlocksCleared"}}}), want: kvevents.KindAbsurdSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dec := tc.dec
			if dec == nil {
				dec = defaultDecoder
			}
			b, de := dec.msgpack(tc.payload, nil)
			if de == nil {
				t.Fatalf("Decode() = %+v, nil; want a *kvevents.Error of kind %s", b, tc.want)
			}
			if de.Kind != tc.want || de.Event != -1 {
				t.Errorf("Decode() error kind %s event %d, want %s event -1 (%v)", de.Kind, de.Event, tc.want, de)
			}
			if len(b.Events) != 0 {
				t.Errorf("Decode() returned %d events with a batch error", len(b.Events))
			}
		})
	}
}

func TestDecodeEventLimits(t *testing.T) {
	dec := &decoder{lim: kvevents.Limits{MaxPayloadBytes: 1 << 20, MaxEventsPerBatch: 10, MaxHashesPerEvent: 2, MaxTokensPerEvent: 32}}
	payload := encode(t, []any{tsFloat, []any{
		[]any{"BlockStored", []uint64{1, 2, 3}, nil, seq(0, 3), 1},
		[]any{"BlockStored", []uint64{1}, nil, seq(0, 33), 33},
		[]any{"BlockStored", []uint64{1, 2}, nil, seq(0, 32), 16},
	}})
	b, err := dec.msgpack(payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []kvevents.ErrorKind
	for _, e := range b.Skipped {
		kinds = append(kinds, e.Kind)
	}
	if diff := cmp.Diff([]kvevents.ErrorKind{kvevents.KindAbsurdSize, kvevents.KindAbsurdSize}, kinds); diff != "" {
		t.Errorf("Decode() skipped kinds mismatch (-want +got):\n%s", diff)
	}
	if len(b.Events) != 1 {
		t.Errorf("Decode() kept %d events, want 1", len(b.Events))
	}
}

func FuzzDecodeMsgpack(f *testing.F) {
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := DecodeMsgpack(payload)
		if err != nil {
			if len(b.Events) != 0 {
				t.Fatalf("events returned with batch error %v", err)
			}
			return
		}
		for i, ev := range b.Events {
			switch ev.Kind {
			case kvevents.KindBlockStored:
				s := ev.Stored
				if s == nil || len(s.BlockHashes) == 0 || s.BlockSize <= 0 {
					t.Fatalf("event %d: invalid kvevents.BlockStored %+v", i, s)
				}
				if s.Sparse {
					if len(s.TokenIDs) != 0 {
						t.Fatalf("event %d: sparse kvevents.BlockStored with %d tokens", i, len(s.TokenIDs))
					}
				} else if len(s.TokenIDs) != s.BlockSize*len(s.BlockHashes) {
					t.Fatalf("event %d: invalid kvevents.BlockStored %+v", i, s)
				}
				if s.ExtraKeys != nil && len(s.ExtraKeys) != len(s.BlockHashes) {
					t.Fatalf("event %d: %d extra keys for %d hashes", i, len(s.ExtraKeys), len(s.BlockHashes))
				}
				if !s.Canonical() {
					t.Fatalf("event %d: not Canonical: %+v", i, s)
				}
			case kvevents.KindBlockRemoved:
				if ev.Removed == nil {
					t.Fatalf("event %d: nil Removed", i)
				}
			case kvevents.KindAllBlocksCleared:
			default:
				t.Fatalf("event %d: kind %v", i, ev.Kind)
			}
		}
	})
}

// fuzzSeeds returns the golden fixtures, so fuzzing starts from every layout.
func fuzzSeeds(tb testing.TB) [][]byte {
	var out [][]byte
	for _, name := range []string{"vllm_026_map_events", "vllm_positional_full", "vllm_positional_trailing_omitted",
		"vllm_map_batch", "sglang_positional_metadata", "sglang_eagle_pairs", "vllm_bin_hashes", "hybrid_model_groups", "bad_events_skipped",
		"vllm_033_hybrid_gpu_pool", "vllm_033_lora_salt_eagle", "sglang_0523_map"} {
		b, err := readFixture(name)
		if err != nil {
			tb.Fatalf("seed %s: %v", name, err)
		}
		out = append(out, b)
	}
	return out
}

// TestDecodePageSizeOneLongPrompt: SGLang with page size 1 merges a long
// prompt into one event with one hash per token; 100k tokens must decode
// (they were dropped as absurd_size above 65,536).
func TestDecodePageSizeOneLongPrompt(t *testing.T) {
	const n = 100_000
	hashes := make([]int64, n)
	for i := range hashes {
		hashes[i] = -int64(i) - 1
	}
	payload := encode(t, []any{tsFloat, []any{
		[]any{"BlockStored", hashes, nil, seq(0, n), 1, nil, "GPU", omap{{"cache_salt", nil}}},
	}, 0})
	b, err := DecodeMsgpack(payload)
	if err != nil {
		t.Fatalf("DecodeMsgpack(%d-hash event) error: %v", n, err)
	}
	if len(b.Skipped) != 0 || len(b.Events) != 1 {
		t.Fatalf("DecodeMsgpack(%d-hash event) = %d events, skipped %v; want 1 event", n, len(b.Events), b.Skipped)
	}
	s := b.Events[0].Stored
	if len(s.BlockHashes) != n || len(s.TokenIDs) != n || s.BlockSize != 1 || s.TokenIDs[n-1] != n-1 {
		t.Errorf("stored %d hashes, %d tokens, block size %d; want %d, %d, 1", len(s.BlockHashes), len(s.TokenIDs), s.BlockSize, n, n)
	}
}

// TestDecodeSparseNeedsAGroup: a token count that does not line up is a
// sliding-window group's skipped null blocks only when the event names its
// group; otherwise it stays a bad event.
func TestDecodeSparseNeedsAGroup(t *testing.T) {
	payload := encode(t, []any{tsFloat, []any{
		omap{{"type", "BlockStored"}, {"block_hashes", []uint64{1, 2}}, {"token_ids", seq(0, 20)}, {"block_size", 16}, {"group_idx", 3}},
		omap{{"type", "BlockStored"}, {"block_hashes", []uint64{1, 2}}, {"token_ids", seq(0, 20)}, {"block_size", 16},
			{"kv_cache_spec_kind", "sliding_window"}},
		omap{{"type", "BlockStored"}, {"block_hashes", []uint64{1, 2}}, {"token_ids", seq(0, 20)}, {"block_size", 16}},
		omap{{"type", "BlockStored"}, {"block_hashes", []uint64{1}}, {"token_ids", seq(0, 20)}, {"block_size", 16}, {"group_idx", -1}},
	}, 0})
	b, err := DecodeMsgpack(payload)
	if err != nil {
		t.Fatal(err)
	}
	var sparse []bool
	for _, ev := range b.Events {
		sparse = append(sparse, ev.Stored.Sparse)
	}
	var kinds []kvevents.ErrorKind
	for _, e := range b.Skipped {
		kinds = append(kinds, e.Kind)
	}
	if diff := cmp.Diff([]bool{true, true}, sparse); diff != "" {
		t.Errorf("Decode() sparse flags mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]kvevents.ErrorKind{kvevents.KindTokenCountMismatch, kvevents.KindBadField}, kinds); diff != "" {
		t.Errorf("Decode() skipped kinds mismatch (-want +got):\n%s", diff)
	}
}
