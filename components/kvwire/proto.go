package kvwire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/kvevents"
)

// Proto decoding bounds, matching kvevents.DefaultLimits. The record size
// bounds memory; these only reject nonsense (docs/kv-events.md).
var (
	maxEventsPerBatch = kvevents.DefaultLimits().MaxEventsPerBatch
	maxHashesPerEvent = kvevents.DefaultLimits().MaxHashesPerEvent
	maxTokensPerEvent = kvevents.DefaultLimits().MaxTokensPerEvent
)

// errKeyMismatch marks a record whose key names another engine than its value.
var errKeyMismatch = errors.New("record key and engine_id differ")

func decodeProtoRecord(key, value []byte) (Record, *RecordError) {
	var pb sluicev1.KvEventBatch
	if err := proto.Unmarshal(value, &pb); err != nil {
		return Record{}, &RecordError{Kind: "malformed_protobuf", Err: err}
	}
	id := pb.GetEngineId()
	switch {
	case id == "" && len(key) == 0:
		return Record{}, badf("missing_key", "KvEventBatch without engine_id or record key")
	case id == "":
		id = string(key)
	case len(key) > 0 && string(key) != id:
		return Record{}, &RecordError{Kind: "key_mismatch", Err: fmt.Errorf("%w: key %q, engine_id %q", errKeyMismatch, key, id)}
	}
	if pb.GetDpRank() < 0 {
		return Record{}, badf("bad_field", "dp_rank %d: must be >= 0", pb.GetDpRank())
	}
	if pb.GetModel() == "" {
		return Record{}, badf("bad_field", "engine %q: KvEventBatch.model is required", id)
	}
	evs := pb.GetEvents()
	if len(evs) > maxEventsPerBatch {
		return Record{}, badf("absurd_size", "%d events in one batch exceeds %d", len(evs), maxEventsPerBatch)
	}
	rec := Record{
		Engine: id, Rank: pb.GetDpRank(), Epoch: pb.GetEpoch(), Seq: pb.GetSeq(), FirstSeq: 1,
		Model: pb.GetModel(), LoRA: pb.GetLoraName(), CacheSalt: pb.GetCacheSalt(),
	}
	b := &rec.Batch
	b.DPRank, b.HasRank = rec.Rank, true
	if t := pb.GetTime(); t != nil {
		b.Time = t.AsTime()
	}
	b.Events = make([]kvevents.Event, 0, len(evs))
	skip := func(i int, kind kvevents.ErrorKind, format string, args ...any) {
		b.Skipped = append(b.Skipped, &kvevents.Error{Kind: kind, Event: i, Detail: fmt.Sprintf(format, args...)})
	}
	for i, ev := range evs {
		switch e := ev.GetEvent().(type) {
		case *sluicev1.KvEvent_BlockStored:
			s := e.BlockStored
			n, bs := len(s.GetBlockHashes()), int(s.GetBlockSize())
			switch {
			case n > maxHashesPerEvent || len(s.GetTokenIds()) > maxTokensPerEvent:
				skip(i, kvevents.KindAbsurdSize, "%d hashes, %d tokens", n, len(s.GetTokenIds()))
				continue
			case n == 0:
				skip(i, kvevents.KindBadField, "BlockStored without block_hashes")
				continue
			case bs <= 0:
				skip(i, kvevents.KindBadField, "block_size %d: must be > 0", bs)
				continue
			case len(s.GetTokenIds()) != n*bs:
				skip(i, kvevents.KindTokenCountMismatch, "%d token ids for %d blocks of %d", len(s.GetTokenIds()), n, bs)
				continue
			case len(s.GetExtraKeys()) != 0 && len(s.GetExtraKeys()) != n:
				skip(i, kvevents.KindBadField, "%d extra_keys for %d blocks: want none or one per block", len(s.GetExtraKeys()), n)
				continue
			}
			st := &kvevents.BlockStored{
				BlockHashes: s.GetBlockHashes(), TokenIDs: s.GetTokenIds(), BlockSize: bs,
				LoRAName: s.GetLoraName(), Medium: medium(s.GetMedium()), ExtraKeys: s.GetExtraKeys(),
			}
			if s.ParentBlockHash != nil {
				st.ParentHash, st.HasParent = s.GetParentBlockHash(), true
			}
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.KindBlockStored, Stored: st})
		case *sluicev1.KvEvent_BlockRemoved:
			r := e.BlockRemoved
			if len(r.GetBlockHashes()) > maxHashesPerEvent {
				skip(i, kvevents.KindAbsurdSize, "%d hashes", len(r.GetBlockHashes()))
				continue
			}
			rm := &kvevents.BlockRemoved{BlockHashes: r.GetBlockHashes(), Medium: medium(r.GetMedium())}
			// MEDIUM_UNSPECIFIED is "no medium": the blocks leave every tier.
			rm.AllTiers = r.GetMedium() == sluicev1.Medium_MEDIUM_UNSPECIFIED
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.KindBlockRemoved, Removed: rm})
		case *sluicev1.KvEvent_AllBlocksCleared:
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.KindAllBlocksCleared})
		default:
			skip(i, kvevents.KindUnknownEventTag, "KvEvent with no event set (or a newer one)")
		}
	}
	return rec, nil
}

func medium(m sluicev1.Medium) kvevents.Medium {
	switch m {
	case sluicev1.Medium_MEDIUM_UNSPECIFIED, sluicev1.Medium_MEDIUM_GPU:
		return kvevents.MediumGPU
	case sluicev1.Medium_MEDIUM_CPU:
		return kvevents.MediumCPU
	case sluicev1.Medium_MEDIUM_DISK:
		return kvevents.MediumDisk
	case sluicev1.Medium_MEDIUM_EXTERNAL:
		return kvevents.MediumExternal
	default:
		return kvevents.MediumUnknown
	}
}
