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
