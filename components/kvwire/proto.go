package kvwire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/kvevents"
)

// errKeyMismatch marks a record whose key names another engine than its value.
var errKeyMismatch = errors.New("record key and engine_id differ")

// protoRecord decodes a sluice.v1.KvEventBatch record. The batch carries its
// engine, rank, epoch, seq and namespace itself; the record key, when set,
// must name the same engine. Its events go through the same rules as the
// engines' msgpack events (kvevents.Limits.CheckStored and CheckRemoved).
func (d *decoder) protoRecord(key, value []byte) (Record, *RecordError) {
	if err := d.lim.CheckPayload(len(value)); err != nil {
		return Record{}, &RecordError{Kind: string(err.Kind), Err: err}
	}
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
	if err := d.lim.CheckEvents(len(evs)); err != nil {
		return Record{}, &RecordError{Kind: string(err.Kind), Err: err}
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
	skip := func(i int, err *kvevents.Error) {
		err.Event = i
		b.Skipped = append(b.Skipped, err)
	}
	for i, ev := range evs {
		switch e := ev.GetEvent().(type) {
		case *sluicev1.KvEvent_BlockStored:
			s := e.BlockStored
			st := &kvevents.BlockStored{
				BlockHashes: s.GetBlockHashes(), TokenIDs: s.GetTokenIds(), BlockSize: int(s.GetBlockSize()),
				LoRAName: s.GetLoraName(), Medium: medium(s.GetMedium()), ExtraKeys: s.GetExtraKeys(),
			}
			if s.ParentBlockHash != nil {
				st.ParentHash, st.HasParent = s.GetParentBlockHash(), true
			}
			// KvEventBatch has no KV-cache group: no event names one.
			if err := d.lim.CheckStored(st, false); err != nil {
				skip(i, err)
				continue
			}
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.KindBlockStored, Stored: st})
		case *sluicev1.KvEvent_BlockRemoved:
			r := e.BlockRemoved
			rm := &kvevents.BlockRemoved{BlockHashes: r.GetBlockHashes(), Medium: medium(r.GetMedium())}
			// MEDIUM_UNSPECIFIED is "no medium": the blocks leave every tier.
			rm.AllTiers = r.GetMedium() == sluicev1.Medium_MEDIUM_UNSPECIFIED
			if err := d.lim.CheckRemoved(rm); err != nil {
				skip(i, err)
				continue
			}
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.KindBlockRemoved, Removed: rm})
		case *sluicev1.KvEvent_AllBlocksCleared:
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.KindAllBlocksCleared})
		default:
			skip(i, errf(kvevents.KindUnknownEventTag, "KvEvent with no event set (or a newer one)"))
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
