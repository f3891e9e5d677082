package kvwire

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/components/kvwire/engineenc"
)

// The decoder reads a well-formed event in one pass and decodes anything
// else again the checked way (decodeState.checked: every event skipped, so
// checked for well-formed msgpack, before it is decoded). These tests hold
// the one-pass decoder to the checked one on valid, invalid and malformed
// payloads: same events, same skipped events, same batch errors.

// sameAsChecked fails t unless both ways decode payload alike.
func sameAsChecked(t *testing.T, payload []byte) {
	t.Helper()
	got, gerr := defaultDecoder.msgpackChecked(payload, false, nil)
	want, werr := defaultDecoder.msgpackChecked(payload, true, nil)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gerr, werr) {
		t.Fatalf("one pass differs from checked decode of %x:\nbatch (-checked +one pass):\n%s\nerror: checked %v, one pass %v",
			payload, cmp.Diff(want, got), werr, gerr)
	}
}

// nest is a value d containers deep.
func nest(d int) any {
	var v any = 1
	for i := range d {
		if i%2 == 0 {
			v = []any{v}
		} else {
			v = map[string]any{"k": v}
		}
	}
	return v
}

// onePassSeeds are payloads of every shape the one-pass path treats
// specially: the simulated engines' batches, token and hash widths, pairs,
// a second "type" key, "type" not first, nesting at the depth limit, extra
// keys, metadata and the golden fixtures.
func onePassSeeds(tb testing.TB) [][]byte {
	out := fuzzSeeds(tb)
	toks := []uint32{0, 1, 127, 128, 255, 256, 65535, 65536, 151643, 1<<32 - 1}
	for _, format := range []string{"sglang", "vllm"} {
		evs := []engineenc.Event{
			{Kind: engineenc.BlockRemoved, BlockHashes: []uint64{1, 1 << 63, 1<<64 - 1}},
			{Kind: engineenc.BlockStored, BlockHashes: []uint64{7, 1 << 40}, TokenIDs: append(toks, toks[:6]...), BlockSize: 8},
			{Kind: engineenc.BlockStored, BlockHashes: []uint64{9}, ParentHash: 1 << 40, HasParent: true, TokenIDs: toks[:8],
				BlockSize: 8, LoRAName: "ad", CacheSalt: "s"},
			{Kind: engineenc.BlockStored, BlockHashes: []uint64{10}, TokenIDs: toks[:8], BlockSize: 8, LoRAName: "ad", CacheSalt: "s"},
			{Kind: engineenc.AllBlocksCleared},
		}
		b, err := engineenc.Batch(format, tsFloat, 1, evs, map[string]int{"ad": 3})
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	stored := func(extra ...kv) omap {
		return append(omap{{"type", "BlockStored"}, {"block_hashes", []int64{-5, 6}}, {"token_ids", []any{1, []any{2, 3}, uint64(4), int8(5)}},
			{"block_size", 2}}, extra...)
	}
	for _, ev := range []any{
		stored(kv{"type", "BlockRemoved"}),
		stored(kv{"type", "BlockStored"}),
		stored(kv{"type", 7}),
		omap{{"block_hashes", []uint64{1}}, {"type", "BlockRemoved"}, {"medium", "CPU"}},
		omap{{"type", 1}, {"block_hashes", []uint64{1}}, {"type", "BlockRemoved"}},
		stored(kv{"metadata", map[string]any{"cache_salt": "x", "y": nest(2)}}),
		stored(kv{"extra_keys", []any{nil, []any{"a", []any{1, 2}}}}),
		stored(kv{"lookahead_token_ids", []any{1, nest(3)}}),
		stored(kv{"kv_cache_spec_kind", "sliding_window"}, kv{"group_idx", 1}),
		[]any{"BlockStored", []uint64{1}, nil, []uint32{1, 2}, 2, nil, "GPU", map[string]any{"cache_salt": "z", "n": nest(3)}},
		[]any{"BlockRemoved", []any{int64(-1), bin32(5)}, "DISK", 0, nest(4)},
		[]any{"AllBlocksCleared", nest(2)},
	} {
		out = append(out, encode(tb, []any{tsFloat, []any{ev, omap{{"type", "AllBlocksCleared"}}}, 0}))
	}
	for d := 28; d <= 34; d++ { // around maxDepth, in each place a value is skipped
		for _, ev := range []any{
			stored(kv{"x", nest(d)}),
			stored(kv{"extra_keys", []any{nest(d), nil}}),
			stored(kv{"metadata", map[string]any{"y": nest(d)}}),
			stored(kv{"lookahead_token_ids", []any{nest(d)}}),
			omap{{"type", "BlockStored"}, {"block_hashes", []uint64{1}}, {"token_ids", []any{[]any{1, nest(d)}}}, {"block_size", 1}},
			omap{{"x", nest(d)}, {"type", "AllBlocksCleared"}},
			[]any{"BlockRemoved", []uint64{1}, nil, nil, nest(d)},
		} {
			out = append(out, encode(tb, []any{tsFloat, []any{ev}, 0}))
		}
	}
	return out
}

// TestOnePassMatchesChecked decodes every seed, every prefix of it and
// thousands of random corruptions of it both ways.
func TestOnePassMatchesChecked(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Type bytes worth planting: every container and str header, ints of
	// every width, nil, ext, the unused 0xc1.
	special := []byte{0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa1, 0xbf, 0xc0, 0xc1, 0xc2, 0xc4, 0xc5, 0xc6, 0xc7, 0xca,
		0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd3, 0xd4, 0xd8, 0xd9, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff, 0x00, 0x7f}
	for _, seed := range onePassSeeds(t) {
		sameAsChecked(t, seed)
		for n := range len(seed) {
			sameAsChecked(t, seed[:n])
		}
		for range 1000 {
			p := append([]byte(nil), seed...)
			for range 1 + rng.IntN(3) {
				i := rng.IntN(len(p))
				switch rng.IntN(4) {
				case 0:
					p[i] = byte(rng.Uint32())
				case 1:
					p[i] = special[rng.IntN(len(special))]
				case 2:
					p = append(p[:i:i], p[i+1:]...)
				default:
					p = append(p[:i:i], append([]byte{special[rng.IntN(len(special))]}, p[i:]...)...)
				}
				if len(p) == 0 {
					break
				}
			}
			sameAsChecked(t, p)
		}
	}
}

// FuzzOnePassMatchesChecked is TestOnePassMatchesChecked driven by the fuzzer.
func FuzzOnePassMatchesChecked(f *testing.F) {
	for _, seed := range onePassSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload []byte) { sameAsChecked(t, payload) })
}
