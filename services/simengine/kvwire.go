package simengine

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/components/kvwire/engineenc"
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

// KV-event payload formats on the ZMQ stream (-kv-events-format): see engineenc.
const (
	KVEventsVLLM   = engineenc.VLLM
	KVEventsSGLang = engineenc.SGLang
)

// encodeKVBatch encodes one batch of engine events in format (KVEventsVLLM or
// KVEventsSGLang) for DP rank rank with the engines' own layout (components/kvwire/engineenc);
// loraIDs numbers the LoRA adapters for vLLM's lora_id.
func encodeKVBatch(format string, at time.Time, rank int, evs []engine.Event, loraIDs map[string]int) ([]byte, error) {
	return engineenc.Batch(format, unixSeconds(at), rank, evs, loraIDs)
}
