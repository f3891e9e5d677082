// Package engineenc encodes KV-event batches the way the engines put them on their ZMQ
// streams: vLLM 0.33 and SGLang 0.5.23 (docs/wire-formats.md), map events tagged by "type",
// keys in the engines' declaration order and optional fields at their default left out as
// msgspec's omit_defaults does, so the bytes look like the engines' own. The simulated engine
// (services/simengine) publishes with it, and the decoders' tests and benchmarks
// (components/kvwire, components/ingest) read what it writes, so both sides see the same bytes.
// Decoding lives in components/kvwire.
package engineenc

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Formats, the simengine's -kv-events-format values.
const (
	// VLLM is vLLM 0.33's batch: a msgpack array [ts, events, data_parallel_rank] whose events
	// are maps tagged by "type"; hashes are uint64.
	VLLM = "vllm"
	// SGLang is SGLang 0.5.23's batch: [ts, events, attn_dp_rank] with tagged-map events whose
	// hashes are int64 (so often negative).
	SGLang = "sglang"
)

// Kind is an event's type.
type Kind int

// The event kinds.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// String returns the engines' tag for the kind ("BlockStored", …).
func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Unknown"
}

// Event is one KV event as the wire carries it.
type Event struct {
	Kind Kind
	// BlockHashes are the engine's chained block hashes (BlockStored, BlockRemoved).
	BlockHashes []uint64
	// ParentHash is the hash of the block before the first stored one; HasParent is false when
	// the first stored block starts the sequence (BlockStored).
	ParentHash uint64
	HasParent  bool
	// TokenIDs are the stored blocks' tokens, BlockSize of them per block (BlockStored).
	TokenIDs  []uint32
	BlockSize int
	// LoRAName is the adapter of the request whose blocks these are ("" for the base model),
	// CacheSalt its cache salt ("" for none) (BlockStored).
	LoRAName, CacheSalt string
}

// Batch encodes one batch [ts, [events…], rank] in format (VLLM or SGLang; anything else is
// VLLM) for DP rank rank, ts in Unix seconds; loraIDs numbers the LoRA adapters for vLLM's
// lora_id.
func Batch(format string, ts float64, rank int, evs []Event, loraIDs map[string]int) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	w := &mpWriter{enc: enc, loraIDs: loraIDs}
	w.arrayLen(3)
	w.float(ts)
	w.arrayLen(len(evs))
	for _, ev := range evs {
		if format == SGLang {
			w.sglangEvent(ev)
		} else {
			w.vllmEvent(ev)
		}
	}
	w.int(int64(rank))
	return buf.Bytes(), w.err
}

// mpWriter keeps the first encoding error so the encoders read straight through.
type mpWriter struct {
	enc     *msgpack.Encoder
	loraIDs map[string]int
	err     error
}

func (w *mpWriter) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *mpWriter) arrayLen(n int)     { w.do(w.enc.EncodeArrayLen(n)) }
func (w *mpWriter) mapLen(n int)       { w.do(w.enc.EncodeMapLen(n)) }
func (w *mpWriter) str(s string)       { w.do(w.enc.EncodeString(s)) }
func (w *mpWriter) float(f float64)    { w.do(w.enc.EncodeFloat64(f)) }
func (w *mpWriter) int(v int64)        { w.do(w.enc.EncodeInt(v)) }
func (w *mpWriter) uint(v uint64)      { w.do(w.enc.EncodeUint(v)) }
func (w *mpWriter) null()              { w.do(w.enc.EncodeNil()) }
func (w *mpWriter) key(k string)       { w.str(k) }
func (w *mpWriter) keyStr(k, v string) { w.key(k); w.str(v) }

func (w *mpWriter) tokens(ids []uint32) {
	w.arrayLen(len(ids))
	for _, t := range ids {
		w.uint(uint64(t))
	}
}

// hashes writes block hashes as vLLM does (uint64, msgpack picks the smallest width) or as
// SGLang does (the same bits as int64).
func (w *mpWriter) hashes(hs []uint64, signed bool) {
	w.arrayLen(len(hs))
	for _, h := range hs {
		w.hash(h, signed)
	}
}

func (w *mpWriter) hash(h uint64, signed bool) {
	if signed {
		w.int(int64(h))
	} else {
		w.uint(h)
	}
}

func (w *mpWriter) parent(ev Event, signed bool) {
	if ev.HasParent {
		w.hash(ev.ParentHash, signed)
	} else {
		w.null()
	}
}

// vllmEvent writes one event as vLLM 0.33 does. BlockStored carries every field without a
// default (lora_id, medium, lora_name, nil for the base model) plus those a full-attention
// GPU block sets: extra_keys, group_idx 0 and kv_cache_spec_kind "full_attention". The
// sliding window, locality, ownership, session and lookahead fields are at their defaults
// and omitted. A block's extra keys are vLLM's hash extras: the adapter name on every block
// of an adapter, then the cache salt on a request's first block; nil when there are none.
func (w *mpWriter) vllmEvent(ev Event) {
	switch ev.Kind {
	case BlockStored:
		w.mapLen(11)
		w.keyStr("type", "BlockStored")
		w.key("block_hashes")
		w.hashes(ev.BlockHashes, false)
		w.key("parent_block_hash")
		w.parent(ev, false)
		w.key("token_ids")
		w.tokens(ev.TokenIDs)
		w.key("block_size")
		w.int(int64(ev.BlockSize))
		w.key("lora_id")
		if id, ok := w.loraIDs[ev.LoRAName]; ok && ev.LoRAName != "" {
			w.int(int64(id))
		} else {
			w.null()
		}
		w.keyStr("medium", "GPU")
		w.key("lora_name")
		if ev.LoRAName != "" {
			w.str(ev.LoRAName)
		} else {
			w.null()
		}
		w.key("extra_keys")
		w.arrayLen(len(ev.BlockHashes))
		for i := range ev.BlockHashes {
			var extra []string
			if ev.LoRAName != "" {
				extra = append(extra, ev.LoRAName)
			}
			if i == 0 && !ev.HasParent && ev.CacheSalt != "" {
				extra = append(extra, ev.CacheSalt)
			}
			if extra == nil {
				w.null()
				continue
			}
			w.arrayLen(len(extra))
			for _, k := range extra {
				w.str(k)
			}
		}
		w.key("group_idx")
		w.int(0)
		w.keyStr("kv_cache_spec_kind", "full_attention")
	case BlockRemoved:
		w.mapLen(4)
		w.keyStr("type", "BlockRemoved")
		w.key("block_hashes")
		w.hashes(ev.BlockHashes, false)
		w.keyStr("medium", "GPU")
		w.key("group_idx")
		w.int(0)
	default:
		w.mapLen(1)
		w.keyStr("type", "AllBlocksCleared")
	}
}

// sglangEvent writes one event as SGLang 0.5.23 does: int64 hashes, lora_id always present
// (nil), medium "GPU", then cache_salt and lora_name when the request had them; session_id is
// omitted (the simulated requests carry none).
func (w *mpWriter) sglangEvent(ev Event) {
	switch ev.Kind {
	case BlockStored:
		n := 7
		if ev.CacheSalt != "" {
			n++
		}
		if ev.LoRAName != "" {
			n++
		}
		w.mapLen(n)
		w.keyStr("type", "BlockStored")
		w.key("block_hashes")
		w.hashes(ev.BlockHashes, true)
		w.key("parent_block_hash")
		w.parent(ev, true)
		w.key("token_ids")
		w.tokens(ev.TokenIDs)
		w.key("block_size")
		w.int(int64(ev.BlockSize))
		w.key("lora_id")
		w.null()
		w.keyStr("medium", "GPU")
		if ev.CacheSalt != "" {
			w.keyStr("cache_salt", ev.CacheSalt)
		}
		if ev.LoRAName != "" {
			w.keyStr("lora_name", ev.LoRAName)
		}
	case BlockRemoved:
		w.mapLen(3)
		w.keyStr("type", "BlockRemoved")
		w.key("block_hashes")
		w.hashes(ev.BlockHashes, true)
		w.keyStr("medium", "GPU")
	default:
		w.mapLen(1)
		w.keyStr("type", "AllBlocksCleared")
	}
}
