package kvwire

import (
	"fmt"
	"math"
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/state/kvevents"
)

// Record headers of the KV-event topic. See components/ingest/README.md.
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

// Record is one decoded KV-event record: whose events they are and the
// events themselves.
type Record struct {
	Engine string
	Rank   int32
	Epoch  uint64
	Seq    uint64
	// FirstSeq is the seq a publisher starts at: 0 for the engines' msgpack
	// batches (the ZMQ frame's seq, forwarded unchanged), 1 for protobuf.
	FirstSeq uint64
	// Model, LoRA and CacheSalt are the namespace of the record's blocks;
	// an event's own LoRAName and CacheSalt take precedence.
	Model, LoRA, CacheSalt string
	Batch                  kvevents.Batch
}

// RecordError is a whole record that cannot be used.
type RecordError struct {
	// Kind is its metric label (sluice_ingest_bad_records_total{kind}).
	Kind string
	Err  error
}

func (e *RecordError) Error() string { return e.Kind + ": " + e.Err.Error() }
func (e *RecordError) Unwrap() error { return e.Err }

func badf(kind, format string, args ...any) *RecordError {
	return &RecordError{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// errf builds a decode failure of the batch (Event -1); a decoder sets Event
// when the failure is one event's.
func errf(kind kvevents.ErrorKind, format string, args ...any) *kvevents.Error {
	return &kvevents.Error{Kind: kind, Event: -1, Detail: fmt.Sprintf(format, args...)}
}

// decoder decodes records under one set of limits, the same for every
// format. It holds no mutable state and is safe for concurrent use.
type decoder struct {
	lim kvevents.Limits
}

var defaultDecoder = &decoder{lim: kvevents.DefaultLimits()}

// DecodeRecord decodes msg by its format header under
// kvevents.DefaultLimits. defaultFormat applies when the header is absent.
func DecodeRecord(msg *kafka.Message, defaultFormat string) (Record, *RecordError) {
	return defaultDecoder.record(msg, defaultFormat, nil)
}

// Decoder is DecodeRecord for one consumer that applies each record before
// it decodes the next: it keeps its buffers from record to record, so that
// a msgpack record costs next to no allocation (a protobuf one is decoded
// as DecodeRecord does). The Record it returns, its Batch's events and
// their slices, stay valid only until the next DecodeRecord call; its
// strings are immutable, as always. A Decoder is not safe for concurrent
// use; the zero value is ready.
type Decoder struct {
	a     arenas
	names map[string]string
}

// DecodeRecord is the package's DecodeRecord, in d's buffers.
func (d *Decoder) DecodeRecord(msg *kafka.Message, defaultFormat string) (Record, *RecordError) {
	return defaultDecoder.record(msg, defaultFormat, d)
}

// maxNames bounds the strings a Decoder interns (engine ids, models,
// adapters, salts of record headers) before it starts afresh.
const maxNames = 4096

// name returns b as a string, the same one every time while it is
// interned, so that the record headers repeated on every record of an
// engine are not allocated again each time. A nil d allocates.
func (d *Decoder) name(b []byte) string {
	if d == nil || len(b) == 0 {
		return string(b)
	}
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	if d.names == nil || len(d.names) >= maxNames {
		d.names = make(map[string]string)
	}
	s := string(b)
	d.names[s] = s
	return s
}

func (d *decoder) record(msg *kafka.Message, defaultFormat string, rd *Decoder) (Record, *RecordError) {
	format := defaultFormat
	var h headers
	for _, hd := range msg.Headers {
		h.set(hd.Key, hd.Value)
	}
	if h.format != nil {
		switch string(h.format) { // the known names without allocating
		case FormatProto:
			format = FormatProto
		case FormatVLLMMsgpack:
			format = FormatVLLMMsgpack
		case FormatSGLangMsgpack:
			format = FormatSGLangMsgpack
		default:
			format = string(h.format)
		}
	}
	switch format {
	case FormatProto, "":
		return d.protoRecord(msg.Key, msg.Value)
	case FormatVLLMMsgpack, FormatSGLangMsgpack:
		return d.msgpackRecord(msg.Key, msg.Value, &h, rd)
	default:
		return Record{}, badf("unknown_format", "header %s %q: want %s, %s or %s", HeaderFormat, format, FormatProto, FormatVLLMMsgpack, FormatSGLangMsgpack)
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

func (d *decoder) msgpackRecord(key, value []byte, h *headers, rd *Decoder) (Record, *RecordError) {
	if len(key) == 0 {
		return Record{}, badf("missing_key", "msgpack record without a key: the key must be the engine id")
	}
	num := func(name string, v []byte) (uint64, *RecordError) {
		if v == nil {
			return 0, badf("missing_header", "msgpack record of engine %q without header %s", key, name)
		}
		n, ok := parseDecimal(v)
		if !ok {
			return 0, badf("bad_header", "header %s %q: want a decimal uint64", name, v)
		}
		return n, nil
	}
	epoch, rerr := num(HeaderEpoch, h.epoch)
	if rerr != nil {
		return Record{}, rerr
	}
	seq, rerr := num(HeaderSeq, h.seq)
	if rerr != nil {
		return Record{}, rerr
	}
	if len(h.model) == 0 {
		return Record{}, badf("missing_header", "msgpack record of engine %q without header %s", key, HeaderModel)
	}
	var a *arenas
	if rd != nil {
		a = &rd.a
	}
	b, err := d.msgpack(value, a)
	if err != nil {
		return Record{}, &RecordError{Kind: string(err.Kind), Err: err}
	}
	rec := Record{Engine: rd.name(key), Epoch: epoch, Seq: seq, FirstSeq: 0, Batch: b,
		Model: rd.name(h.model), LoRA: rd.name(h.lora), CacheSalt: rd.name(h.salt)}
	switch {
	case b.HasRank:
		rec.Rank = b.DPRank
	case h.rank != nil:
		r, err := strconv.ParseInt(string(h.rank), 10, 32)
		if err != nil || r < 0 {
			return Record{}, badf("bad_header", "header %s %q: want a decimal rank >= 0", HeaderDPRank, h.rank)
		}
		rec.Rank = int32(r)
	}
	if rec.Rank < 0 {
		return Record{}, badf("bad_field", "dp_rank %d: must be >= 0", rec.Rank)
	}
	return rec, nil
}

// parseDecimal is strconv.ParseUint(string(b), 10, 64) without the string
// (which, kept by ParseUint's error, would be allocated on every record):
// one or more ASCII digits, at most 2^64-1.
func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
