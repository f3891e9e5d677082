package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/components/kvwire"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/slots"
)

func newTestKV(t testing.TB, cfg KVConfig) (*KVIngester, *fakeIndex, *slots.Table, *prometheus.Registry) {
	t.Helper()
	st := slots.NewTable()
	idx := newFakeIndex(st)
	reg := prometheus.NewRegistry()
	if cfg.Brokers == nil {
		cfg.Brokers = []string{"127.0.0.1:1"}
	}
	k, err := NewKVIngester(testLogger(t), cfg, idx, st, reg)
	if err != nil {
		t.Fatal(err)
	}
	return k, idx, st, reg
}

// feed applies records as if read from partition 0 at consecutive offsets.
func feed(t testing.TB, k *KVIngester, recs ...*kgo.Record) {
	t.Helper()
	lag := k.s.m.lag.WithLabelValues("0")
	for _, r := range recs {
		msg := kafka.Message{Key: r.Key, Value: r.Value, Offset: k.s.next[0], Time: time.Now()}
		for _, h := range r.Headers {
			msg.Headers = append(msg.Headers, kafka.Header{Key: h.Key, Value: h.Value})
		}
		k.s.handle(0, &msg, lag)
	}
}

func TestKVEpochSeq(t *testing.T) {
	type step struct {
		batch         *sluicev1.KvEventBatch
		wantBlocks    int
		wantUncertain bool
	}
	tests := []struct {
		name  string
		steps []step
		skip  map[string]float64
	}{
		{"in order", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{stored("e", 0, 1, 2, 200, 3), 5, false},
			{removed("e", 0, 1, 3, 100), 4, false},
		}, nil},
		{"duplicate skipped", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{removed("e", 0, 1, 2, 100, 101), 0, false},
			{stored("e", 0, 1, 1, 100, 2), 0, false},
			{removed("e", 0, 1, 2, 100, 101), 0, false},
		}, map[string]float64{"duplicate": 2}},
		{"older epoch ignored", []step{
			{stored("e", 0, 2, 1, 100, 2), 2, false},
			{stored("e", 0, 1, 9, 300, 2), 2, false},
		}, map[string]float64{"stale_epoch": 1}},
		{"new epoch clears holder", []step{
			{stored("e", 0, 1, 5, 100, 2), 2, false},
			{stored("e", 0, 2, 1, 300, 1), 1, false},
		}, nil},
		{"gap marks uncertain until clear", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{stored("e", 0, 1, 3, 200, 1), 3, true},
			{stored("e", 0, 1, 4, 300, 1), 4, true},
			{cleared("e", 0, 1, 5), 0, false},
		}, nil},
		{"gap cleared by new epoch", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{stored("e", 0, 1, 7, 200, 1), 3, true},
			{stored("e", 0, 2, 1, 300, 1), 1, false},
		}, nil},
		{"new epoch past its first seq is uncertain", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{stored("e", 0, 2, 3, 300, 1), 1, true},
		}, nil},
		{"protobuf seq back to 1 is a duplicate, not a restart", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{stored("e", 0, 1, 2, 200, 1), 3, false},
			{stored("e", 0, 1, 1, 300, 1), 3, false},
		}, map[string]float64{"duplicate": 1}},
		{"ranks are independent", []step{
			{stored("e", 0, 1, 1, 100, 2), 2, false},
			{stored("e", 1, 1, 1, 100, 2), 4, false},
			{stored("e", 1, 2, 1, 500, 1), 3, false},
			{stored("e", 0, 1, 2, 600, 1), 4, false},
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, idx, _, _ := newTestKV(t, KVConfig{})
			for i, s := range tc.steps {
				feed(t, k, kvProto(t, s.batch))
				if got := idx.count(); got != s.wantBlocks {
					t.Errorf("step %d: blocks = %d, want %d", i, got, s.wantBlocks)
				}
				if got := k.Uncertain("e"); got != s.wantUncertain {
					t.Errorf("step %d: Uncertain = %v, want %v", i, got, s.wantUncertain)
				}
			}
			for reason, want := range tc.skip {
				if got := testutil.ToFloat64(k.s.m.skipped.WithLabelValues(reason)); got != want {
					t.Errorf("skipped{%s} = %v, want %v", reason, got, want)
				}
			}
		})
	}
}

func vllmBatch(t testing.TB, rank int, hashes []uint64, tokens []uint32) []byte {
	t.Helper()
	events := []any{[]any{"BlockStored", hashes, nil, tokens, len(tokens) / len(hashes), nil, "GPU"}}
	b, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, events, rank})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func msgpackRecord(engine string, epoch, seq string, value []byte) *kgo.Record {
	h := []kgo.RecordHeader{{Key: kvwire.HeaderFormat, Value: []byte(kvwire.FormatVLLMMsgpack)}, {Key: kvwire.HeaderModel, Value: []byte("m")}}
	if epoch != "" {
		h = append(h, kgo.RecordHeader{Key: kvwire.HeaderEpoch, Value: []byte(epoch)})
	}
	if seq != "" {
		h = append(h, kgo.RecordHeader{Key: kvwire.HeaderSeq, Value: []byte(seq)})
	}
	return &kgo.Record{Key: []byte(engine), Value: value, Headers: h}
}

func TestKVBadRecords(t *testing.T) {
	k, idx, _, reg := newTestKV(t, KVConfig{})
	toks := make([]uint32, 32)
	good := vllmBatch(t, 0, []uint64{1 << 63, 7}, toks)
	mismatch := stored("e", 0, 1, 3, 10, 2)
	mismatch.Events[0].GetBlockStored().TokenIds = mismatch.Events[0].GetBlockStored().TokenIds[:5]
	feed(t, k,
		&kgo.Record{Key: []byte("e"), Value: []byte{0xff, 0x01, 0x02}}, // malformed protobuf
		kvProto(t, stored("e", 0, 1, 1, 100, 2)),
		msgpackRecord("e", "1", "2", []byte{0xc1}), // malformed msgpack (and seq 2 stays unused)
		msgpackRecord("e", "", "2", good),          // missing epoch
		msgpackRecord("e", "1", "x", good),         // bad seq
		&kgo.Record{Key: []byte("e"), Value: good, Headers: []kgo.RecordHeader{{Key: kvwire.HeaderFormat, Value: []byte("json")}}},
		kvProto(t, &sluicev1.KvEventBatch{EngineId: "other", Model: "m"}), // key mismatch once re-keyed below
		kvProto(t, mismatch),
		msgpackRecord("e", "1", "4", good),
	)
	// key mismatch: key differs from engine_id
	rec := kvProto(t, stored("x", 0, 1, 1, 1, 1))
	rec.Key = []byte("y")
	feed(t, k, rec)
	if got, want := idx.count(), 4; got != want {
		t.Errorf("blocks = %d, want %d (2 from proto, 2 from the last msgpack record)", got, want)
	}
	for kind, want := range map[string]float64{
		"malformed_protobuf": 1, "malformed_msgpack": 1, "missing_header": 1, "bad_header": 1,
		"unknown_format": 1, "token_count_mismatch": 1, "key_mismatch": 1,
	} {
		if got := testutil.ToFloat64(k.s.m.bad.WithLabelValues(kind)); got != want {
			t.Errorf("bad{%s} = %v, want %v", kind, got, want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_ingest_records_total"); err != nil || n != 1 {
		t.Errorf("records_total series = %d, %v", n, err)
	}
	if !k.Uncertain("e") {
		t.Errorf("Uncertain(e) = false after seq 1 -> 4 (gap), want true")
	}
}

// TestKfakeEndToEnd runs both ingesters against the in-process broker.
func TestKfakeEndToEnd(t *testing.T) {
	loadTopic, kvTopic := topicName(t, "load"), topicName(t, "kv")
	brokers := devBroker(t, loadTopic, kvTopic)
	st := slots.NewTable()
	reg := prometheus.NewRegistry()
	tbl, err := loadtable.New(st, loadtable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	load, err := NewLoadIngester(testLogger(t), fastConfig(brokers, loadTopic), tbl, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	idx := newFakeIndex(st)
	kv, err := NewKVIngester(testLogger(t), KVConfig{Config: fastConfig(brokers, kvTopic)}, idx, st, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := load.Healthy(); err == nil {
		t.Errorf("Healthy before Run = nil, want an error")
	}
	runBG(t, load.Run)
	runBG(t, kv.Run)

	lp, kp := producer(t, brokers, loadTopic), producer(t, brokers, kvTopic)
	now := time.Now()
	for i := range 8 {
		id := "engine-" + string(rune('a'+i))
		produce(t, lp, loadProto(t, &sluicev1.LoadReport{EngineId: id, Epoch: 1, Seq: 1, CapturedAt: timestamppb.New(now),
			RunningRequests: int64(i), KvCapacityTokens: 1000,
			Native: &sluicev1.NativeLoad{MaxRunningRequests: 10}}))
		produce(t, kp, kvProto(t, stored(id, 0, 1, 1, uint64(i)*1000, 3)))
	}
	produce(t, lp, &kgo.Record{Key: []byte("bad"), Value: []byte("not a protobuf \xff\xff")})
	produce(t, lp, loadProto(t, &sluicev1.LoadReport{EngineId: "late", Epoch: 1, Seq: 1, CapturedAt: timestamppb.New(now)}))
	produce(t, kp, msgpackRecord("engine-a", "1", "2", vllmBatch(t, 0, []uint64{1 << 40, 1<<40 + 1}, make([]uint32, 32))))

	waitFor(t, 20*time.Second, "all load reports", func() bool { return len(tbl.Engines()) == 9 })
	waitFor(t, 20*time.Second, "all KV blocks", func() bool { return idx.count() == 26 })
	s, _ := st.Lookup("engine-c")
	if v, ok := tbl.Snapshot().View(s); !ok || v.Running != 2 || !v.Native {
		t.Errorf("engine-c view = %+v, %v; want running 2, native", v, ok)
	}
	// "bad" and "late" have different keys, so they may sit in different partitions, read by
	// different readers: "late" being applied says nothing about "bad" yet.
	waitFor(t, 20*time.Second, "the malformed load record counted", func() bool {
		return testutil.ToFloat64(load.s.m.bad.WithLabelValues("malformed_protobuf")) >= 1
	})
	if got := testutil.ToFloat64(load.s.m.bad.WithLabelValues("malformed_protobuf")); got != 1 {
		t.Errorf("load bad{malformed_protobuf} = %v, want 1", got)
	}
	if err := kv.Healthy(); err != nil {
		t.Errorf("Healthy = %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}
}

func TestLoadUnknownEngineCap(t *testing.T) {
	st := slots.NewTable()
	tbl, _ := loadtable.New(st, loadtable.Config{})
	cfg := Config{Brokers: []string{"x:1"}, MaxUnknownEngines: 2}
	l, err := NewLoadIngester(testLogger(t), cfg, tbl, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	lag := l.s.m.lag.WithLabelValues("0")
	for i, id := range []string{"a", "b", "c", "a"} {
		v, _ := proto.Marshal(&sluicev1.LoadReport{EngineId: id, Epoch: 1, Seq: uint64(i + 1), CapturedAt: timestamppb.Now()})
		l.s.handle(0, &kafka.Message{Key: []byte(id), Value: v, Offset: int64(i)}, lag)
	}
	if got := tbl.Engines(); len(got) != 2 {
		t.Errorf("engines = %v, want [a b]", got)
	}
	if got := testutil.ToFloat64(l.s.m.bad.WithLabelValues("unknown_engine_cap")); got != 1 {
		t.Errorf("bad{unknown_engine_cap} = %v, want 1", got)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{MinBytes: 10, MaxBytes: 5, MaxWait: -1}.Validate()
	if err == nil {
		t.Fatal("Validate = nil, want errors")
	}
	for _, want := range []string{"Brokers", "MinBytes 10 > MaxBytes 5", "MaxWait"} {
		if !contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to mention %q", err, want)
		}
	}
	_ = context.Background
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestKVNewEpochResetsLoad: an engine restart seen on the KV stream (a newer epoch for a rank
// already seen) is reported once, and the decider drops the engine's load from its previous
// life; the first record of a rank only sets its baseline.
func TestKVNewEpochResetsLoad(t *testing.T) {
	st := slots.NewTable()
	load, err := loadtable.New(st, loadtable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var calls []uint64
	k, _, _, _ := newTestKV(t, KVConfig{OnNewEpoch: func(engine string, epoch uint64) {
		calls = append(calls, epoch)
		load.ResetEngineBefore(engine, epoch)
	}})
	if err := load.Apply(loadtable.Report{EngineID: "e", Epoch: 1, Seq: 1, CapturedAt: time.Now(), Running: 3, KVCapacityTokens: 10}); err != nil {
		t.Fatal(err)
	}
	feed(t, k, kvProto(t, stored("e", 0, 1, 1, 100, 2)))
	if len(calls) != 0 || len(load.Engines()) != 1 {
		t.Fatalf("first record: calls %v, load engines %v; want no reset", calls, load.Engines())
	}
	feed(t, k, kvProto(t, stored("e", 0, 2, 1, 300, 1)))
	if len(calls) != 1 || calls[0] != 2 || len(load.Engines()) != 0 {
		t.Errorf("new epoch: calls %v, load engines %v; want one call for epoch 2 and the old load dropped", calls, load.Engines())
	}
	if load.ResetEngineBefore("e", 1) {
		t.Error("ResetEngineBefore dropped an engine it no longer holds")
	}
}

// TestKVMsgpackSeqFromZero: the ZMQ seq (forwarded unchanged for msgpack
// formats) starts at 0, so a batch lost right after seq 0 is a gap, a
// return to 0 is a restart and a second seq 0 is a duplicate.
func TestKVMsgpackSeqFromZero(t *testing.T) {
	blk := func(base uint64) []byte { return vllmBatch(t, 0, []uint64{base}, make([]uint32, 16)) }
	type step struct {
		epoch, seq    string
		base          uint64
		wantBlocks    int
		wantUncertain bool
	}
	tests := []struct {
		name  string
		steps []step
		dups  float64
	}{
		{"gap right after seq 0", []step{{"1", "0", 1, 1, false}, {"1", "2", 2, 2, true}}, 0},
		{"in order from 0", []step{{"1", "0", 1, 1, false}, {"1", "1", 2, 2, false}}, 0},
		{"seq 0 again after 0 is a duplicate", []step{{"1", "0", 1, 1, false}, {"1", "0", 2, 1, false}}, 1},
		{"seq back to 0 is a restart", []step{{"1", "0", 1, 1, false}, {"1", "1", 2, 2, false}, {"1", "0", 3, 1, false}}, 0},
		{"restart clears a gap", []step{{"1", "0", 1, 1, false}, {"1", "3", 2, 2, true}, {"1", "0", 3, 1, false}}, 0},
		{"new epoch from 0 is certain", []step{{"1", "0", 1, 1, false}, {"2", "0", 2, 1, false}}, 0},
		{"new epoch past 0 is uncertain", []step{{"1", "0", 1, 1, false}, {"2", "1", 2, 1, true}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, idx, _, _ := newTestKV(t, KVConfig{})
			for i, s := range tc.steps {
				feed(t, k, msgpackRecord("e", s.epoch, s.seq, blk(s.base)))
				if got := idx.count(); got != s.wantBlocks {
					t.Errorf("step %d: blocks = %d, want %d", i, got, s.wantBlocks)
				}
				if got := k.Uncertain("e"); got != s.wantUncertain {
					t.Errorf("step %d: Uncertain = %v, want %v", i, got, s.wantUncertain)
				}
			}
			if got := testutil.ToFloat64(k.s.m.skipped.WithLabelValues("duplicate")); got != tc.dups {
				t.Errorf("skipped{duplicate} = %v, want %v", got, tc.dups)
			}
		})
	}
}

// TestKVRecordSizeBound: a record between 8 and 16 MiB (an SGLang-sized prompt sent as one batch,
// which compose's 16 MiB KV topic and enginelink's -kafka-max-batch-bytes let through) is indexed;
// only a record above the 16 MiB default is skipped as absurd_size. The decider used to stop at
// 8 MiB, so such records passed the link and the broker and were silently lost.
func TestKVRecordSizeBound(t *testing.T) {
	t.Parallel()
	k, idx, _, _ := newTestKV(t, KVConfig{})
	const n = 700_000 // 9-byte hashes and 5-byte token ids: ~9.8 MB of msgpack
	hashes, toks := make([]uint64, n), make([]uint32, n)
	for i := range hashes {
		hashes[i], toks[i] = 1<<63|uint64(i), 100_000+uint32(i)
	}
	big := vllmBatch(t, 0, hashes, toks)
	if len(big) <= 8<<20 || len(big) > 16<<20 {
		t.Fatalf("test batch is %d bytes, want between 8 and 16 MiB", len(big))
	}
	feed(t, k, msgpackRecord("e", "1", "1", big), msgpackRecord("e", "1", "2", make([]byte, 16<<20+1)))
	if got := idx.count(); got != n {
		t.Errorf("blocks = %d after a %d-byte record, want %d", got, len(big), n)
	}
	if got := testutil.ToFloat64(k.s.m.bad.WithLabelValues("absurd_size")); got != 1 {
		t.Errorf("bad{absurd_size} = %v, want 1 (the record above 16 MiB)", got)
	}
}
