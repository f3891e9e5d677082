package ingest

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/kvevents"
)

// Record headers of the KV-event topic. See README.md.
const (
	// HeaderFormat names the payload format; absent means FormatProto.
	HeaderFormat = "sluice-format"
	// HeaderEpoch, HeaderSeq (decimal uint64) and HeaderModel are required on
	// msgpack records; HeaderLoRA, HeaderCacheSalt and HeaderDPRank are
	// optional.
	HeaderEpoch     = "sluice-epoch"
	HeaderSeq       = "sluice-seq"
	HeaderModel     = "sluice-model"
	HeaderLoRA      = "sluice-lora"
	HeaderCacheSalt = "sluice-cache-salt"
	HeaderDPRank    = "sluice-dp-rank"
)

// Payload formats named by HeaderFormat.
const (
	FormatProto         = "sluice.kv.v1+proto"
	FormatVLLMMsgpack   = "vllm.msgpack"
	FormatSGLangMsgpack = "sglang.msgpack"
)

// Proto decoding bounds, matching kvevents.DefaultLimits. The record size
// bounds memory; these only reject nonsense (docs/kv-events.md).
var (
	maxEventsPerBatch = kvevents.DefaultLimits().MaxEventsPerBatch
	maxHashesPerEvent = kvevents.DefaultLimits().MaxHashesPerEvent
	maxTokensPerEvent = kvevents.DefaultLimits().MaxTokensPerEvent
)

// kvRecord is one decoded KV-event record: whose events they are and the
// events themselves.
type kvRecord struct {
	engine string
	rank   int32
	epoch  uint64
	seq    uint64
	// firstSeq is the seq a publisher starts at: 0 for the engines' msgpack
	// batches (the ZMQ frame's seq, forwarded unchanged), 1 for protobuf.
	firstSeq uint64
	ns       Namespace
	batch    kvevents.Batch
}

// recordError is a whole record that cannot be used; kind is its metric label.
type recordError struct {
	kind string
	err  error
}

func (e *recordError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

func badf(kind, format string, args ...any) *recordError {
	return &recordError{kind: kind, err: fmt.Errorf(format, args...)}
}

// decodeKVRecord decodes msg by its format header. defaultFormat applies when
// the header is absent.
func decodeKVRecord(msg *kafka.Message, defaultFormat string) (kvRecord, *recordError) {
	format := defaultFormat
	var h headers
	for _, hd := range msg.Headers {
		h.set(hd.Key, hd.Value)
	}
	if h.format != nil {
		format = string(h.format)
	}
	switch format {
	case FormatProto, "":
		return decodeKVProto(msg.Key, msg.Value)
	case FormatVLLMMsgpack, FormatSGLangMsgpack:
		return decodeKVMsgpack(msg.Key, msg.Value, &h)
	default:
		return kvRecord{}, badf("unknown_format", "header %s %q: want %s, %s or %s", HeaderFormat, format, FormatProto, FormatVLLMMsgpack, FormatSGLangMsgpack)
	}
}

// headers holds the sluice-* headers of one record (the last of each wins).
type headers struct {
	format, epoch, seq, model, lora, salt, rank []byte
}

func (h *headers) set(k string, v []byte) {
	switch k {
	case HeaderFormat:
		h.format = v
	case HeaderEpoch:
		h.epoch = v
	case HeaderSeq:
		h.seq = v
	case HeaderModel:
		h.model = v
	case HeaderLoRA:
		h.lora = v
	case HeaderCacheSalt:
		h.salt = v
	case HeaderDPRank:
		h.rank = v
	}
}

func decodeKVMsgpack(key, value []byte, h *headers) (kvRecord, *recordError) {
	if len(key) == 0 {
		return kvRecord{}, badf("missing_key", "msgpack record without a key: the key must be the engine id")
	}
	num := func(name string, v []byte) (uint64, *recordError) {
		if v == nil {
			return 0, badf("missing_header", "msgpack record of engine %q without header %s", key, name)
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, badf("bad_header", "header %s %q: want a decimal uint64", name, v)
		}
		return n, nil
	}
	epoch, rerr := num(HeaderEpoch, h.epoch)
	if rerr != nil {
		return kvRecord{}, rerr
	}
	seq, rerr := num(HeaderSeq, h.seq)
	if rerr != nil {
		return kvRecord{}, rerr
	}
	if len(h.model) == 0 {
		return kvRecord{}, badf("missing_header", "msgpack record of engine %q without header %s", key, HeaderModel)
	}
	b, err := kvevents.DecodeMsgpack(value)
	if err != nil {
		kind := "malformed_msgpack"
		var de *kvevents.Error
		if errors.As(err, &de) {
			kind = string(de.Kind)
		}
		return kvRecord{}, &recordError{kind: kind, err: err}
	}
	rec := kvRecord{engine: string(key), epoch: epoch, seq: seq, firstSeq: 0, batch: b,
		ns: Namespace{Model: string(h.model), LoRA: string(h.lora), CacheSalt: string(h.salt)}}
	switch {
	case b.HasRank:
		rec.rank = b.DPRank
	case h.rank != nil:
		r, err := strconv.ParseInt(string(h.rank), 10, 32)
		if err != nil || r < 0 {
			return kvRecord{}, badf("bad_header", "header %s %q: want a decimal rank >= 0", HeaderDPRank, h.rank)
		}
		rec.rank = int32(r)
	}
	if rec.rank < 0 {
		return kvRecord{}, badf("bad_field", "dp_rank %d: must be >= 0", rec.rank)
	}
	return rec, nil
}

func decodeKVProto(key, value []byte) (kvRecord, *recordError) {
	var pb sluicev1.KvEventBatch
	if err := proto.Unmarshal(value, &pb); err != nil {
		return kvRecord{}, &recordError{kind: "malformed_protobuf", err: err}
	}
	id := pb.GetEngineId()
	switch {
	case id == "" && len(key) == 0:
		return kvRecord{}, badf("missing_key", "KvEventBatch without engine_id or record key")
	case id == "":
		id = string(key)
	case len(key) > 0 && string(key) != id:
		return kvRecord{}, &recordError{kind: "key_mismatch", err: fmt.Errorf("%w: key %q, engine_id %q", errKeyMismatch, key, id)}
	}
	if pb.GetDpRank() < 0 {
		return kvRecord{}, badf("bad_field", "dp_rank %d: must be >= 0", pb.GetDpRank())
	}
	if pb.GetModel() == "" {
		return kvRecord{}, badf("bad_field", "engine %q: KvEventBatch.model is required", id)
	}
	evs := pb.GetEvents()
	if len(evs) > maxEventsPerBatch {
		return kvRecord{}, badf("absurd_size", "%d events in one batch exceeds %d", len(evs), maxEventsPerBatch)
	}
	rec := kvRecord{
		engine: id, rank: pb.GetDpRank(), epoch: pb.GetEpoch(), seq: pb.GetSeq(), firstSeq: 1,
		ns: Namespace{Model: pb.GetModel(), LoRA: pb.GetLoraName(), CacheSalt: pb.GetCacheSalt()},
	}
	b := &rec.batch
	b.DPRank, b.HasRank = rec.rank, true
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
