package simengine

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/sluicehq/sluice/components/kvwire"
	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/state/kvevents"
)

// testLoRAIDs numbers the adapters of the sample events.
var testLoRAIDs = map[string]int{"adapter-a": 1}

// decodedEvent is the part of a decoded KV event the sim decides. Tests compare these rather
// than kvevents.Event so they hold whatever else the decoder learns to read (KV-cache groups,
// where vLLM's salt goes).
type decodedEvent struct {
	Kind      kvevents.Kind
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []uint32
	BlockSize int
	Medium    kvevents.Medium
	AllTiers  bool
	LoRA      string
	// Salt is the cache salt the decoder saw: its CacheSalt, or what is left of a first
	// block's extra keys (vLLM's hash extras) once the adapter name is taken out.
	Salt string
}

// project reads decoded events as decodedEvents.
func project(t *testing.T, evs []kvevents.Event) []decodedEvent {
	t.Helper()
	out := make([]decodedEvent, 0, len(evs))
	for _, ev := range evs {
		d := decodedEvent{Kind: ev.Kind}
		switch {
		case ev.Stored != nil:
			st := ev.Stored
			d.Hashes, d.Parent, d.HasParent, d.Tokens, d.BlockSize, d.Medium, d.LoRA, d.Salt =
				st.BlockHashes, st.ParentHash, st.HasParent, st.TokenIDs, st.BlockSize, st.Medium, st.LoRAName, st.CacheSalt
			for i, k := range st.ExtraKeys {
				if k == "" {
					continue
				}
				var tuple []string
				if err := msgpack.Unmarshal([]byte(k), &tuple); err != nil {
					t.Fatalf("extra keys %q: want vLLM's string tuple", k)
				}
				tuple = slices.DeleteFunc(tuple, func(e string) bool { return e == st.LoRAName })
				switch {
				case len(tuple) == 0:
				case i == 0 && len(tuple) == 1 && d.Salt == "":
					d.Salt = tuple[0]
				default:
					t.Fatalf("block %d extra keys %q: want only the adapter, and the salt on the first", i, tuple)
				}
			}
		case ev.Removed != nil:
			d.Hashes, d.Medium, d.AllTiers = ev.Removed.BlockHashes, ev.Removed.Medium, ev.Removed.AllTiers
		}
		out = append(out, d)
	}
	return out
}

// expected is what the decoder should make of the engine events the sim stored in format. A
// cache salt shows in every SGLang event, and in vLLM only where vLLM reports it: the first
// block of a request.
func expected(format string, evs []engine.Event) []decodedEvent {
	out := make([]decodedEvent, 0, len(evs))
	for _, ev := range evs {
		switch ev.Kind {
		case engine.BlockStored:
			d := decodedEvent{Kind: kvevents.KindBlockStored, Hashes: ev.BlockHashes, Parent: ev.ParentHash,
				HasParent: ev.HasParent, Tokens: ev.TokenIDs, BlockSize: ev.BlockSize, Medium: kvevents.MediumGPU, LoRA: ev.LoRAName}
			if format == KVEventsSGLang || !ev.HasParent {
				d.Salt = ev.CacheSalt
			}
			out = append(out, d)
		case engine.BlockRemoved:
			out = append(out, decodedEvent{Kind: kvevents.KindBlockRemoved, Hashes: ev.BlockHashes, Medium: kvevents.MediumGPU})
		case engine.AllBlocksCleared:
			out = append(out, decodedEvent{Kind: kvevents.KindAllBlocksCleared})
		}
	}
	return out
}

// decodeClean decodes payload with the decider's decoder and fails on any skipped (invalid)
// record or event dropped as not describing a prefix: every event the sim sends must apply.
func decodeClean(t *testing.T, payload []byte, sent int) kvevents.Batch {
	t.Helper()
	b, err := kvwire.DecodeMsgpack(payload)
	if err != nil {
		t.Fatalf("DecodeMsgpack: %v", err)
	}
	if len(b.Skipped) != 0 || len(b.Events) != sent {
		t.Fatalf("DecodeMsgpack: %d of %d events, skipped %v; want all, none skipped", len(b.Events), sent, b.Skipped)
	}
	return b
}

func sampleEvents() []engine.Event {
	return []engine.Event{
		{Kind: engine.BlockStored, BlockHashes: []uint64{15760518052499183552, 7}, TokenIDs: []uint32{1, 2, 3, 4, 151644, 6, 7, 8}, BlockSize: 4},
		{Kind: engine.BlockStored, BlockHashes: []uint64{1 << 63}, ParentHash: 7, HasParent: true, TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4},
		{Kind: engine.BlockStored, BlockHashes: []uint64{3, 4}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, CacheSalt: "tenant-a"},
		{Kind: engine.BlockStored, BlockHashes: []uint64{5}, ParentHash: 4, HasParent: true, TokenIDs: []uint32{9, 9, 9, 9}, BlockSize: 4, CacheSalt: "tenant-a"},
		{Kind: engine.BlockStored, BlockHashes: []uint64{6}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, LoRAName: "adapter-a"},
		{Kind: engine.BlockStored, BlockHashes: []uint64{7, 8}, ParentHash: 6, HasParent: true, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, LoRAName: "adapter-a", CacheSalt: "s"},
		{Kind: engine.BlockStored, BlockHashes: []uint64{9}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, LoRAName: "adapter-a", CacheSalt: "s"},
		{Kind: engine.BlockRemoved, BlockHashes: []uint64{15760518052499183552, 1<<64 - 1}},
		{Kind: engine.AllBlocksCleared},
	}
}

// TestEncodeKVBatchRoundTrip decodes both wire forms with the decider's own decoder and
// expects exactly the events the simulated cache emitted: none skipped or dropped.
func TestEncodeKVBatchRoundTrip(t *testing.T) {
	at := time.Unix(1789095808, 837884700)
	for _, format := range []string{KVEventsVLLM, KVEventsSGLang} {
		t.Run(format, func(t *testing.T) {
			evs := sampleEvents()
			payload, err := encodeKVBatch(format, at, 0, evs, testLoRAIDs)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeClean(t, payload, len(evs))
			if got.DPRank != 0 || !got.HasRank {
				t.Errorf("dp rank %d (present %v), want 0", got.DPRank, got.HasRank)
			}
			if diff := cmp.Diff(expected(format, evs), project(t, got.Events)); diff != "" {
				t.Errorf("DecodeMsgpack(encodeKVBatch(%s)) mismatch (-want +got):\n%s", format, diff)
			}
			if d := got.Time.Sub(at).Abs(); d > time.Microsecond {
				t.Errorf("batch time %v, want %v", got.Time, at)
			}
		})
	}
}

// TestEncodeKVBatchShape checks the layout a consumer written against the engines would
// see: vLLM's map keys in order and its uint64 hashes, SGLang's negative int64 hashes.
func TestEncodeKVBatchShape(t *testing.T) {
	plain, adapter := sampleEvents()[0], sampleEvents()[6]
	for _, tc := range []struct {
		name, format string
		ev           engine.Event
		want         []any
	}{
		{"vllm", KVEventsVLLM, plain, []any{"type", "BlockStored", "block_hashes", []any{uint64(15760518052499183552), uint64(7)},
			"parent_block_hash", nil, "token_ids", []any{1, 2, 3, 4, 151644, 6, 7, 8}, "block_size", 4, "lora_id", nil,
			"medium", "GPU", "lora_name", nil, "extra_keys", []any{nil, nil}, "group_idx", 0, "kv_cache_spec_kind", "full_attention"}},
		{"sglang", KVEventsSGLang, plain, []any{"type", "BlockStored", "block_hashes", []any{int64(-2686226021210368064), 7},
			"parent_block_hash", nil, "token_ids", []any{1, 2, 3, 4, 151644, 6, 7, 8}, "block_size", 4, "lora_id", nil,
			"medium", "GPU"}},
		{"vllm_lora_salt", KVEventsVLLM, adapter, []any{"type", "BlockStored", "block_hashes", []any{9},
			"parent_block_hash", nil, "token_ids", []any{1, 2, 3, 4}, "block_size", 4, "lora_id", 1,
			"medium", "GPU", "lora_name", "adapter-a", "extra_keys", []any{[]any{"adapter-a", "s"}}, "group_idx", 0,
			"kv_cache_spec_kind", "full_attention"}},
		{"sglang_lora_salt", KVEventsSGLang, adapter, []any{"type", "BlockStored", "block_hashes", []any{9},
			"parent_block_hash", nil, "token_ids", []any{1, 2, 3, 4}, "block_size", 4, "lora_id", nil,
			"medium", "GPU", "cache_salt", "s", "lora_name", "adapter-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload, err := encodeKVBatch(tc.format, time.Unix(1, 0), 3, []engine.Event{tc.ev}, testLoRAIDs)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := decodeGeneric(payload)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) != 3 || normalise(batch[2]) != uint64(3) {
				t.Fatalf("batch %v: want [ts, events, 3]", batch)
			}
			if diff := cmp.Diff(normalise(tc.want), normalise(batch[1].([]any)[0])); diff != "" {
				t.Errorf("event mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// decodeGeneric decodes a msgpack value keeping map keys in order: a map becomes the flat
// []any{k1, v1, k2, v2, …}.
func decodeGeneric(b []byte) ([]any, error) {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	v, err := decodeOrdered(d)
	if err != nil {
		return nil, err
	}
	out, _ := v.([]any)
	return out, nil
}

func decodeOrdered(d *msgpack.Decoder) (any, error) {
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, 2*n)
		for range 2 * n {
			v, err := decodeOrdered(d)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, n)
		for range n {
			v, err := decodeOrdered(d)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	v, err := d.DecodeInterfaceLoose()
	return v, err
}

// normalise makes integers comparable whatever width msgpack chose: non-negative ones become
// uint64, negative ones int64.
func normalise(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalise(e)
		}
		return out
	case int:
		return normalise(int64(x))
	case int64:
		if x < 0 {
			return x
		}
		return uint64(x)
	case uint64:
		return x
	}
	return v
}

// TestStoredEventsRoundTrip drives a real engine with a tiny cache (so it evicts), collects
// the events its cache emitted, and expects components/kvwire to decode the sim's encoding of
// them into exactly those events, in both forms.
func TestStoredEventsRoundTrip(t *testing.T) {
	var stored []engine.Event
	eng, err := engine.New(engine.Config{BlockSize: 4, CacheBlocks: 3, PrefillTokensPerSec: 1e9, DecodeMsPerToken: 0.001,
		Sink: func(evs []engine.Event) { stored = append(stored, evs...) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []engine.Request{
		{TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{TokenIDs: []uint32{1, 2, 3, 4, 50, 60, 70, 80}},
		{TokenIDs: []uint32{1, 2, 3, 4, 50, 60, 70, 80}, CacheSalt: "tenant-a"},
		{TokenIDs: []uint32{1, 2, 3, 4, 50, 60, 70, 80}, LoRAName: "adapter-a", CacheSalt: "tenant-a"},
		{TokenIDs: []uint32{100, 101, 102, 103, 104, 105, 106, 107}},
	} {
		req.MaxTokens = 1
		run, err := eng.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(); err != nil {
			t.Fatal(err)
		}
	}
	eng.Reset()
	kinds, salted := map[engine.EventKind]int{}, 0
	for _, ev := range stored {
		kinds[ev.Kind]++
		if ev.CacheSalt != "" {
			salted++
		}
	}
	if kinds[engine.BlockStored] == 0 || kinds[engine.BlockRemoved] == 0 || kinds[engine.AllBlocksCleared] != 1 || salted == 0 {
		t.Fatalf("engine emitted %v (%d salted); want stores, salted stores, evictions and one clear", kinds, salted)
	}
	for _, format := range []string{KVEventsVLLM, KVEventsSGLang} {
		t.Run(format, func(t *testing.T) {
			payload, err := encodeKVBatch(format, time.Now(), 0, stored, testLoRAIDs)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeClean(t, payload, len(stored))
			if diff := cmp.Diff(expected(format, stored), project(t, got.Events)); diff != "" {
				t.Errorf("decoded events mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func BenchmarkEncodeKVBatch(b *testing.B) {
	tokens := make([]uint32, 16*32)
	hashes := make([]uint64, 32)
	for i := range tokens {
		tokens[i] = uint32(i * 7919)
	}
	for i := range hashes {
		hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	evs := make([]engine.Event, 64)
	for i := range evs {
		evs[i] = engine.Event{Kind: engine.BlockStored, BlockHashes: hashes, TokenIDs: tokens, BlockSize: 16, HasParent: i > 0, ParentHash: 1}
	}
	at := time.Now()
	for _, format := range []string{KVEventsVLLM, KVEventsSGLang} {
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodeKVBatch(format, at, 0, evs, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
