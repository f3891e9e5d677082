package kvwire

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/kvevents"
)

// verdict is what a decoder made of one event: kept (with the fields the
// rules may change) or skipped (with a kind), or the whole record refused.
type verdict struct {
	Record    string // RecordError kind, "" when the record decoded
	Skipped   kvevents.ErrorKind
	Kind      kvevents.Kind
	BlockSize int
	Tokens    int
	Sparse    bool
	Extra     int // len(ExtraKeys); -1 when nil
}

// wireEvent is one event both formats can carry. extra entries "" are
// "no extra keys for this block" (nil in msgpack, "" in protobuf).
type wireEvent struct {
	removed   bool
	hashes    int
	tokens    int
	blockSize int
	extra     []string
}

func (e wireEvent) hashList() []uint64 {
	h := make([]uint64, e.hashes)
	for i := range h {
		h[i] = uint64(i) + 100
	}
	return h
}

// msgpackEvent is e as vLLM 0.33 sends it (map form). It has a parent, so
// that no extra key is read as a cache salt, and the keys are integers, so
// that none is read as a LoRA name: the namespace rules stay out of the way.
func (e wireEvent) msgpackEvent() map[string]any {
	if e.removed {
		return map[string]any{"type": "BlockRemoved", "block_hashes": e.hashList(), "medium": "GPU"}
	}
	ev := vllmStored(e.hashList(), uint64(99), seq(0, uint32(e.tokens)), 0)
	delete(ev, "group_idx") // KvEventBatch cannot name a group
	ev["block_size"] = e.blockSize
	if e.extra != nil {
		keys := make([]any, len(e.extra))
		for i, k := range e.extra {
			if k != "" {
				n, _ := strconv.Atoi(k)
				keys[i] = []any{n}
			}
		}
		ev["extra_keys"] = keys
	}
	return ev
}

func (e wireEvent) protoEvent() *sluicev1.KvEvent {
	if e.removed {
		return &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockRemoved{BlockRemoved: &sluicev1.BlockRemoved{
			BlockHashes: e.hashList(), Medium: sluicev1.Medium_MEDIUM_GPU}}}
	}
	parent := uint64(99)
	return &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
		BlockHashes: e.hashList(), ParentBlockHash: &parent, TokenIds: seq(0, uint32(e.tokens)),
		BlockSize: uint32(e.blockSize), ExtraKeys: e.extra}}}
}

func verdictOf(rec Record, rerr *RecordError) verdict {
	switch {
	case rerr != nil:
		return verdict{Record: rerr.Kind}
	case len(rec.Batch.Skipped) > 0:
		return verdict{Skipped: rec.Batch.Skipped[0].Kind}
	case len(rec.Batch.Events) == 0:
		return verdict{}
	}
	ev := rec.Batch.Events[0]
	v := verdict{Kind: ev.Kind}
	if s := ev.Stored; s != nil {
		v.BlockSize, v.Tokens, v.Sparse, v.Extra = s.BlockSize, len(s.TokenIDs), s.Sparse, len(s.ExtraKeys)
		if s.ExtraKeys == nil {
			v.Extra = -1
		}
	}
	return v
}

// decodeBoth feeds the same events through the protobuf and the msgpack
// record decoders under the same limits.
func decodeBoth(t *testing.T, d *decoder, evs ...wireEvent) (pb, mp verdict) {
	t.Helper()
	batch := &sluicev1.KvEventBatch{EngineId: "e", Epoch: 1, Seq: 1, Model: "m"}
	var maps []map[string]any
	for _, e := range evs {
		batch.Events = append(batch.Events, e.protoEvent())
		maps = append(maps, e.msgpackEvent())
	}
	pv, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	pb = verdictOf(d.record(&kafka.Message{Key: []byte("e"), Value: pv}, FormatProto, nil))
	msg := &kafka.Message{Key: []byte("e"), Value: mpBatch(t, maps...), Headers: []kafka.Header{
		{Key: HeaderFormat, Value: []byte(FormatSGLangMsgpack)}, {Key: HeaderEpoch, Value: []byte("1")},
		{Key: HeaderSeq, Value: []byte("0")}, {Key: HeaderModel, Value: []byte("m")}}}
	mp = verdictOf(d.record(msg, FormatProto, nil))
	return pb, mp
}

// TestSameVerdictBothFormats: an event means the same whichever wire format
// carried it, because both decoders apply kvevents' one rule set. Each case
// names the verdict both must reach; "was" notes where the two copies of the
// rules used to disagree.
func TestSameVerdictBothFormats(t *testing.T) {
	small := &decoder{lim: kvevents.Limits{MaxPayloadBytes: 1 << 20, MaxEventsPerBatch: 4, MaxHashesPerEvent: 8, MaxTokensPerEvent: 64}}
	stored := func(bs, tokens int) verdict {
		return verdict{Kind: kvevents.KindBlockStored, BlockSize: bs, Tokens: tokens, Extra: -1}
	}
	skipped := func(k kvevents.ErrorKind) verdict { return verdict{Skipped: k} }
	withExtra := func(v verdict, n int) verdict { v.Extra = n; return v }
	tests := []struct {
		name string
		evs  []wireEvent
		want verdict
		was  string
	}{
		{name: "full blocks", evs: []wireEvent{{hashes: 2, tokens: 32, blockSize: 16}}, want: stored(16, 32)},
		{name: "SGLang short last page", evs: []wireEvent{{hashes: 1, tokens: 5, blockSize: 16}}, want: stored(5, 5),
			was: "protobuf: token_count_mismatch"},
		{name: "short page of two blocks", evs: []wireEvent{{hashes: 2, tokens: 20, blockSize: 16}},
			want: skipped(kvevents.KindTokenCountMismatch)},
		{name: "one block, too many tokens", evs: []wireEvent{{hashes: 1, tokens: 20, blockSize: 16}},
			want: skipped(kvevents.KindTokenCountMismatch)},
		{name: "no tokens", evs: []wireEvent{{hashes: 1, tokens: 0, blockSize: 16}},
			want: skipped(kvevents.KindTokenCountMismatch)},
		{name: "no hashes", evs: []wireEvent{{hashes: 0, tokens: 16, blockSize: 16}}, want: skipped(kvevents.KindBadField)},
		{name: "block size 0", evs: []wireEvent{{hashes: 1, tokens: 0, blockSize: 0}}, want: skipped(kvevents.KindBadField)},
		{name: "block size above the token limit", evs: []wireEvent{{hashes: 1, tokens: 5, blockSize: 65}},
			want: skipped(kvevents.KindBadField), was: "protobuf: token_count_mismatch (no upper bound)"},
		{name: "too many hashes", evs: []wireEvent{{hashes: 9, tokens: 9, blockSize: 1}}, want: skipped(kvevents.KindAbsurdSize)},
		{name: "too many tokens", evs: []wireEvent{{hashes: 1, tokens: 65, blockSize: 65}}, want: skipped(kvevents.KindAbsurdSize)},
		{name: "extra keys, one per block", evs: []wireEvent{{hashes: 2, tokens: 32, blockSize: 16, extra: []string{"1", "2"}}},
			want: withExtra(stored(16, 32), 2)},
		{name: "extra keys, some blocks none", evs: []wireEvent{{hashes: 2, tokens: 32, blockSize: 16, extra: []string{"", "2"}}},
			want: withExtra(stored(16, 32), 2)},
		{name: "extra keys, wrong count", evs: []wireEvent{{hashes: 2, tokens: 32, blockSize: 16, extra: []string{"1"}}},
			want: skipped(kvevents.KindBadField)},
		{name: "extra keys all empty, any count", evs: []wireEvent{{hashes: 2, tokens: 32, blockSize: 16, extra: []string{"", "", ""}}},
			want: stored(16, 32), was: "protobuf: bad_field"},
		{name: "extra keys all empty, one per block", evs: []wireEvent{{hashes: 2, tokens: 32, blockSize: 16, extra: []string{"", ""}}},
			want: stored(16, 32), was: "protobuf: kept [\"\", \"\"] rather than none"},
		{name: "removed", evs: []wireEvent{{removed: true, hashes: 3}}, want: verdict{Kind: kvevents.KindBlockRemoved}},
		{name: "removed, too many hashes", evs: []wireEvent{{removed: true, hashes: 9}}, want: skipped(kvevents.KindAbsurdSize)},
		{name: "too many events", evs: []wireEvent{{removed: true}, {removed: true}, {removed: true}, {removed: true}, {removed: true}},
			want: verdict{Record: string(kvevents.KindAbsurdSize)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pb, mp := decodeBoth(t, small, tc.evs...)
			if diff := cmp.Diff(tc.want, pb); diff != "" {
				t.Errorf("protobuf verdict mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, mp); diff != "" {
				t.Errorf("msgpack verdict mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("payload above the limit", func(t *testing.T) {
		tiny := &decoder{lim: small.lim}
		tiny.lim.MaxPayloadBytes = 64
		pb, mp := decodeBoth(t, tiny, wireEvent{hashes: 4, tokens: 64, blockSize: 16})
		want := verdict{Record: string(kvevents.KindAbsurdSize)}
		if pb != want || mp != want {
			t.Errorf("verdicts protobuf %+v, msgpack %+v; want %+v for both (was: protobuf had no payload bound)", pb, mp, want)
		}
	})
}
