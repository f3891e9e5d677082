package ingest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/components/kvwire/kvwiretest"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/components/kvwire"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/kvindex"
)

// Real engine payload shapes (docs/wire-formats.md) over the real broker into the
// real index: KV-cache groups, namespaces, tiers, page-size-1 prompts, EAGLE
// and the ZMQ seq rules (docs/kv-events.md).

// mpBatch encodes a msgpack batch [ts, events, rank] of map events as Python writes them.
func mpBatch(t testing.TB, events ...map[string]any) []byte {
	t.Helper()
	b, err := kvwiretest.MsgpackBatch(float64(time.Now().UnixNano())/1e9, events...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mpRecord(format, engine string, epoch, seq int, value []byte) *kgo.Record {
	r := msgpackRecord(engine, itoa(epoch), itoa(seq), value)
	r.Headers[0].Value = []byte(format)
	return r
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

func span(from, n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(from + i)
	}
	return s
}

func vllmStored(hashes []uint64, parent any, tokens []uint32, group int) map[string]any {
	return map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
		"block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": nil, "group_idx": group,
		"kv_cache_spec_kind": nil, "kv_cache_spec_sliding_window": nil, "locality": "LOCAL", "ownership": nil,
		"session_id": nil, "lookahead_token_ids": nil}
}

func lookupTokens(ix *kvindex.Index, p *pair, ns Namespace, engine string, q []uint32) int64 {
	s, ok := p.slots.Lookup(engine)
	if !ok {
		return 0
	}
	for _, m := range ix.Lookup(ns, q, nil) {
		if m.Engine == s {
			return m.Tokens
		}
	}
	return 0
}

func TestBrokerKVEngineShapes(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	loadTopic, kvTopic := topicName(t, "load"), topicName(t, "kv")
	kp := producer(t, brokers, kvTopic)
	var recs []*kgo.Record
	add := func(r ...*kgo.Record) { recs = append(recs, r...) }

	// vLLM hybrid model, GPU block pool (no kv_cache_spec_kind): groups 0
	// and 1 store the same blocks; group 1 evicts two of them; then group 1
	// shows itself a sliding window (a sparse event: a null block skipped).
	hybrid := span(0, 64)
	add(mpRecord(kvwire.FormatVLLMMsgpack, "hybrid", 1, 0, mpBatch(t,
		vllmStored([]uint64{1 << 63, 1<<63 + 1, 1<<63 + 2}, nil, hybrid[:48], 0),
		vllmStored([]uint64{1 << 63, 1<<63 + 1, 1<<63 + 2}, nil, hybrid[:48], 1))))
	add(mpRecord(kvwire.FormatVLLMMsgpack, "hybrid", 1, 1, mpBatch(t,
		map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{1<<63 + 1, 1<<63 + 2}, "medium": "GPU", "group_idx": 1,
			"locality": "LOCAL", "ownership": nil})))
	add(mpRecord(kvwire.FormatVLLMMsgpack, "hybrid", 1, 2, mpBatch(t,
		vllmStored([]uint64{1<<63 + 3}, uint64(1<<63+2), hybrid[32:64], 1))))

	// vLLM LoRA adapter + cache salt (in extra_keys), offloaded to storage,
	// with EAGLE lookahead tokens.
	lora := span(1000, 32)
	ev := vllmStored([]uint64{77, 78}, nil, lora, 0)
	ev["lora_name"], ev["lora_id"], ev["medium"] = "sql-lora", 1, "STORAGE"
	ev["extra_keys"] = []any{[]any{"sql-lora", "salt-1"}, []any{"sql-lora"}}
	ev["lookahead_token_ids"] = []uint32{5, 6}
	add(mpRecord(kvwire.FormatVLLMMsgpack, "lora", 1, 0, mpBatch(t, ev)))

	// SGLang, page size 1: a 100k-token prompt as one event, salted, with
	// an adapter, in the HiCache host tier.
	const long = 100_000
	hashes := make([]int64, long)
	for i := range hashes {
		hashes[i] = -int64(i) - 1
	}
	longToks := make([]uint32, long)
	for i := range longToks {
		longToks[i] = uint32(i % 97)
	}
	add(mpRecord(kvwire.FormatSGLangMsgpack, "sglang", 1, 0, mpBatch(t, map[string]any{"type": "BlockStored",
		"block_hashes": hashes, "parent_block_hash": nil, "token_ids": longToks, "block_size": 1, "lora_id": nil,
		"medium": "CPU_PINNED", "cache_salt": "tenant-7", "session_id": nil, "lora_name": "ad"})))
	// A medium from a newer engine is kept, not rejected.
	future := vllmStored([]uint64{9}, nil, span(5000, 16), 0)
	future["medium"] = "CXL"
	add(mpRecord(kvwire.FormatVLLMMsgpack, "future", 1, 0, mpBatch(t, future)))

	// Seq rules (ZMQ seq starts at 0): seq 1 lost after seq 0 is a gap;
	// AllBlocksCleared resolves it; a seq that returns to 0 within the
	// epoch is a restart whose blocks apply; that seq 0 replayed is a
	// duplicate; a new epoch starting at seq 5 is uncertain.
	a, b, c := span(7000, 16), span(8000, 16), span(9000, 16)
	add(
		mpRecord(kvwire.FormatVLLMMsgpack, "seq", 1, 0, mpBatch(t, vllmStored([]uint64{100}, nil, a, 0))),
		mpRecord(kvwire.FormatVLLMMsgpack, "seq", 1, 2, mpBatch(t, vllmStored([]uint64{101}, nil, b, 0))),
	)
	for _, r := range recs { // one at a time: the page-size-1 record alone is most of a broker batch
		produce(t, kp, r)
	}
	p := newPairIndex(t, brokers, loadTopic, kvTopic, t.TempDir(), true)
	ix := p.kv.Index().(*kvindex.Index)
	runBG(t, p.kv.Run)
	waitFor(t, 60*time.Second, "first records applied", func() bool { return sumOffsets(p.kv.Offsets()) == int64(len(recs)) })
	if !p.kv.Uncertain("seq") {
		t.Errorf("Uncertain(seq) = false after seq 0 -> 2, want true (batch 1 lost)")
	}
	more := []*kgo.Record{
		mpRecord(kvwire.FormatVLLMMsgpack, "seq", 1, 3, mpBatch(t, map[string]any{"type": "AllBlocksCleared"})),
		mpRecord(kvwire.FormatVLLMMsgpack, "seq", 1, 4, mpBatch(t, vllmStored([]uint64{100}, nil, a, 0))),
		mpRecord(kvwire.FormatVLLMMsgpack, "seq", 1, 0, mpBatch(t, vllmStored([]uint64{200}, nil, b, 0))), // restart
		mpRecord(kvwire.FormatVLLMMsgpack, "seq", 1, 0, mpBatch(t, vllmStored([]uint64{300}, nil, c, 0))), // replayed seq 0
	}
	produce(t, kp, more...)
	waitFor(t, 60*time.Second, "seq records applied", func() bool { return sumOffsets(p.kv.Offsets()) == int64(len(recs)+len(more)) })
	if p.kv.Uncertain("seq") {
		t.Errorf("Uncertain(seq) = true after AllBlocksCleared and a restart, want false")
	}
	base := Namespace{Model: "m"}
	for _, c := range []struct {
		name   string
		engine string
		ns     Namespace
		q      []uint32
		want   int64
	}{
		{"hybrid: group 1's removal keeps group 0's blocks", "hybrid", base, hybrid, 48},
		{"lora+salt: adapter namespace, EAGLE last block not counted", "lora", Namespace{Model: "m", LoRA: "sql-lora", CacheSalt: "salt-1"}, lora, 16},
		{"lora+salt: no hit for the base model", "lora", base, lora, 0},
		{"lora+salt: no hit without the salt", "lora", Namespace{Model: "m", LoRA: "sql-lora"}, lora, 0},
		{"sglang page size 1: 100k tokens", "sglang", Namespace{Model: "m", LoRA: "ad", CacheSalt: "tenant-7"}, longToks, long},
		{"sglang: no hit for another salt", "sglang", Namespace{Model: "m", LoRA: "ad", CacheSalt: "tenant-8"}, longToks, 0},
		{"unknown medium kept", "future", base, span(5000, 16), 16},
		{"restart: old life's block gone", "seq", base, a, 0},
		{"restart: new life's block indexed", "seq", base, b, 16},
		{"replayed seq 0 skipped", "seq", base, c, 0},
	} {
		if got := lookupTokens(ix, p, c.ns, c.engine, c.q); got != c.want {
			t.Errorf("%s: Lookup(%s) = %d tokens, want %d", c.name, c.engine, got, c.want)
		}
	}
	for kind, want := range map[string]float64{"token_count_mismatch": 0, "absurd_size": 0, "index_rejected": 0} {
		if got := testutil.ToFloat64(p.kv.s.m.bad.WithLabelValues(kind)); got != want {
			t.Errorf("bad{%s} = %v, want %v", kind, got, want)
		}
	}
	for reason, want := range map[string]float64{"non_prefix_group": 1, "unknown_medium": 1} {
		if got := testutil.ToFloat64(p.kv.s.m.ignored.WithLabelValues(reason)); got != want {
			t.Errorf("ignored{%s} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(p.kv.s.m.skipped.WithLabelValues("duplicate")); got != 1 {
		t.Errorf("skipped{duplicate} = %v, want 1 (the replayed seq 0)", got)
	}

	// A new epoch whose first batch is not seq 0 lost its first batches.
	produce(t, kp, mpRecord(kvwire.FormatVLLMMsgpack, "seq", 2, 5, mpBatch(t, vllmStored([]uint64{400}, nil, a, 0))))
	waitFor(t, 60*time.Second, "new epoch applied", func() bool { return sumOffsets(p.kv.Offsets()) == int64(len(recs)+len(more)+1) })
	if !p.kv.Uncertain("seq") {
		t.Errorf("Uncertain(seq) = false after epoch 2 started at seq 5, want true")
	}
	if got := lookupTokens(ix, p, base, "seq", b); got != 0 {
		t.Errorf("after a new epoch: old block still matches %d tokens", got)
	}
}
