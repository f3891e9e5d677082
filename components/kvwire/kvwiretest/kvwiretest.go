// Package kvwiretest builds KV-event batches in both wire formats for tests of the decoders
// (components/kvwire) and of ingestion (components/ingest): sluice protobuf batches and engine
// msgpack batches encoded the way Python's msgpack and msgspec write them.
package kvwiretest

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Stored builds a KvEventBatch of model "m" storing n blocks of 4 tokens with hashes
// base..base+n-1 and token ids base*4...
func Stored(engine string, rank int32, epoch, seq uint64, base uint64, n int) *sluicev1.KvEventBatch {
	hashes := make([]uint64, n)
	toks := make([]uint32, 4*n)
	for i := range hashes {
		hashes[i] = base + uint64(i)
	}
	for i := range toks {
		toks[i] = uint32(base)*4 + uint32(i)
	}
	return &sluicev1.KvEventBatch{EngineId: engine, DpRank: rank, Epoch: epoch, Seq: seq, Model: "m",
		Time: timestamppb.Now(),
		Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
			BlockHashes: hashes, TokenIds: toks, BlockSize: 4}}}}}
}

// Removed builds a KvEventBatch of model "m" removing hashes from every tier.
func Removed(engine string, rank int32, epoch, seq uint64, hashes ...uint64) *sluicev1.KvEventBatch {
	return &sluicev1.KvEventBatch{EngineId: engine, DpRank: rank, Epoch: epoch, Seq: seq, Model: "m",
		Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_BlockRemoved{BlockRemoved: &sluicev1.BlockRemoved{BlockHashes: hashes}}}}}
}

// Cleared builds a KvEventBatch of model "m" clearing everything.
func Cleared(engine string, rank int32, epoch, seq uint64) *sluicev1.KvEventBatch {
	return &sluicev1.KvEventBatch{EngineId: engine, DpRank: rank, Epoch: epoch, Seq: seq, Model: "m",
		Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_AllBlocksCleared{AllBlocksCleared: &sluicev1.AllBlocksCleared{}}}}}
}

// MsgpackBatch encodes an engine batch [ts, events, dp rank 0] of map events with compact
// integers and sorted map keys, as Python's msgpack and msgspec write them.
func MsgpackBatch(ts float64, events ...map[string]any) ([]byte, error) {
	evs := make([]any, len(events))
	for i, e := range events {
		evs[i] = e
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)
	if err := enc.Encode([]any{ts, evs, 0}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Event kinds of EngineEvent.
const (
	BlockStored = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// EngineEvent is one KV event of a simulated engine (services/simengine/engine.Event's
// fields that the wire carries).
type EngineEvent struct {
	Kind        int
	BlockHashes []uint64
	ParentHash  uint64
	HasParent   bool
	TokenIDs    []uint32
	BlockSize   int
	LoRAName    string
	CacheSalt   string
}

// EngineBatch encodes one batch of events as the simulated engines put it on their ZMQ
// stream (format "sglang" or "vllm", the -kv-events-format values): [ts, [events…], rank]
// with map events, the tag first, keys in the engines' declaration order and defaults
// omitted. It is services/simengine's encodeKVBatch (kvwire.go), byte for byte, so that
// decoder and ingestion benchmarks read what production reads; loraIDs numbers the
// adapters for vLLM's lora_id.
func EngineBatch(format string, ts float64, rank int, evs []EngineEvent, loraIDs map[string]int) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	w := &mpWriter{enc: enc, loraIDs: loraIDs}
	w.arrayLen(3)
	w.float(ts)
	w.arrayLen(len(evs))
	for _, ev := range evs {
		if format == "sglang" {
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

func (w *mpWriter) parent(ev EngineEvent, signed bool) {
	if ev.HasParent {
		w.hash(ev.ParentHash, signed)
	} else {
		w.null()
	}
}

// vllmEvent writes one event as vLLM 0.33 does (see services/simengine/kvwire.go).
func (w *mpWriter) vllmEvent(ev EngineEvent) {
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

// sglangEvent writes one event as SGLang 0.5.23 does (see services/simengine/kvwire.go).
func (w *mpWriter) sglangEvent(ev EngineEvent) {
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
