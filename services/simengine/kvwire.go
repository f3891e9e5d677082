package simengine

import (
	"bytes"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/simengine/engine"
)

// KVBatchProto translates one batch of engine events into sluice's protobuf form, the value
// of a sluice.kv-events.v1 record (sluice simulate builds its records with it too).
func KVBatchProto(id, model string, epoch, seq uint64, at time.Time, evs []engine.Event) *sluicev1.KvEventBatch {
	b := &sluicev1.KvEventBatch{EngineId: id, DpRank: 0, Epoch: epoch, Seq: seq, Time: timestamppb.New(at), Model: model,
		Events: make([]*sluicev1.KvEvent, 0, len(evs))}
	for _, ev := range evs {
		var pe *sluicev1.KvEvent
		switch ev.Kind {
		case engine.BlockStored:
			st := &sluicev1.BlockStored{BlockHashes: ev.BlockHashes, TokenIds: ev.TokenIDs,
				BlockSize: uint32(ev.BlockSize), Medium: sluicev1.Medium_MEDIUM_GPU}
			if ev.HasParent {
				p := ev.ParentHash
				st.ParentBlockHash = &p
			}
			pe = &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockStored{BlockStored: st}}
		case engine.BlockRemoved:
			pe = &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockRemoved{BlockRemoved: &sluicev1.BlockRemoved{
				BlockHashes: ev.BlockHashes, Medium: sluicev1.Medium_MEDIUM_GPU}}}
		case engine.AllBlocksCleared:
			pe = &sluicev1.KvEvent{Event: &sluicev1.KvEvent_AllBlocksCleared{AllBlocksCleared: &sluicev1.AllBlocksCleared{}}}
		default:
			continue
		}
		b.Events = append(b.Events, pe)
	}
	return b
}

// kvBatchVLLM encodes one batch as vLLM's positional msgpack payload (docs/wire-formats.md):
// [ts, [events…], dp_rank] with
// ["BlockStored", hashes, parent|nil, token_ids, block_size, lora_id=nil, "GPU"],
// ["BlockRemoved", hashes, "GPU"] and ["AllBlocksCleared"]; hashes are uint64.
func kvBatchVLLM(at time.Time, evs []engine.Event) ([]byte, error) {
	out := make([]any, 0, len(evs))
	for _, ev := range evs {
		switch ev.Kind {
		case engine.BlockStored:
			var parent any
			if ev.HasParent {
				parent = ev.ParentHash
			}
			out = append(out, []any{"BlockStored", ev.BlockHashes, parent, ev.TokenIDs, ev.BlockSize, nil, "GPU"})
		case engine.BlockRemoved:
			out = append(out, []any{"BlockRemoved", ev.BlockHashes, "GPU"})
		case engine.AllBlocksCleared:
			out = append(out, []any{"AllBlocksCleared"})
		}
	}
	return msgpack.Marshal([]any{unixSeconds(at), out, 0})
}

// KV-event payload formats on the ZMQ stream (-kv-events-format).
const (
	// KVEventsVLLM is vLLM 0.33's batch: a msgpack array [ts, events, data_parallel_rank] whose
	// events are maps tagged by "type".
	KVEventsVLLM = "vllm"
	// KVEventsSGLang is SGLang 0.5.23's batch: [ts, events, attn_dp_rank] with tagged-map
	// events whose hashes are int64 (so often negative).
	KVEventsSGLang = "sglang"
)

// encodeKVBatch encodes one batch of engine events in format (KVEventsVLLM or
// KVEventsSGLang) for DP rank rank; loraIDs numbers the LoRA adapters for vLLM's lora_id.
// Map keys come in the engines' declaration order (msgspec writes the tag first, then the
// fields), and optional fields still at their default are left out as msgspec's
// omit_defaults does, so the bytes look like the engines' own.
func encodeKVBatch(format string, at time.Time, rank int, evs []engine.Event, loraIDs map[string]int) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	w := &mpWriter{enc: enc, loraIDs: loraIDs}
	w.arrayLen(3)
	w.float(unixSeconds(at))
	w.arrayLen(len(evs))
	for _, ev := range evs {
		if format == KVEventsSGLang {
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

func (w *mpWriter) parent(ev engine.Event, signed bool) {
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
func (w *mpWriter) vllmEvent(ev engine.Event) {
	switch ev.Kind {
	case engine.BlockStored:
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
	case engine.BlockRemoved:
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
func (w *mpWriter) sglangEvent(ev engine.Event) {
	switch ev.Kind {
	case engine.BlockStored:
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
	case engine.BlockRemoved:
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
