package deciderserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testenv"
)

const blockSize = 16

// promptTokens is a deterministic long prompt; different seeds share no block.
func promptTokens(seed, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(seed*1_000_003 + i + 1)
	}
	return t
}

func blockHashes(seed, n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = uint64(seed)<<32 | uint64(i+1)
	}
	return h
}

// TestKafkaCacheAwareAndSessions drives a decider whose only knowledge of engine caches and load
// comes from a real Kafka broker: KV events in sluice's protobuf form and in vLLM's own msgpack
// form, and load reports. A request whose long prefix one engine holds goes there; a cold
// prefix falls back by load; a session stays put; a restart forgets bindings (they are
// in-memory placement preferences) and the next request binds again.
func TestKafkaCacheAwareAndSessions(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	loadTopic, kvTopic := "it-load-"+suffix, "it-kv-"+suffix
	cfgPath := filepath.Join(t.TempDir(), "cfg.yaml")
	doc := `
workers:
  - {id: e1, url: "http://e1.test", models: [m], role: plain}
  - {id: e2, url: "http://e2.test", models: [m], role: plain}
  - {id: e3, url: "http://e3.test", models: [m], role: plain}
buckets:
  - id: chat
    models: [m]
    groups:
      plain:
        policy: {type: cache_aware, min_match_tokens: 256, miss_choices: 3}
`
	if err := os.WriteFile(cfgPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath = "127.0.0.1:0", "127.0.0.1:0", cfgPath
	cfg.Health.ProbeInterval = 0
	cfg.Ingest.Brokers, cfg.Ingest.LoadTopic, cfg.Ingest.KVTopic = brokers[0], loadTopic, kvTopic
	cfg.LoadFreshness = time.Minute
	srv := runServer(t, cfg)
	c := grpcClient(t, srv)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Load: e3 is the least loaded, so cold prefixes go there.
	for i, e := range []string{"e1", "e2", "e3"} {
		v, _ := proto.Marshal(&sluicev1.LoadReport{EngineId: e, DpSize: 1, Epoch: 1, Seq: 1, CapturedAt: timestamppb.Now(),
			RunningRequests: int64(10 - 4*i), WaitingRequests: int64(6 - 3*i), KvUsedTokens: 100, KvCapacityTokens: 1000,
			Native: &sluicev1.NativeLoad{WaitingUncachedTokens: int64(3000 - 1500*i), TotalTokens: 100, MaxRunningRequests: 64}})
		produce(&kgo.Record{Topic: loadTopic, Key: []byte(e), Value: v})
	}
	// e1 caches prompt 1 (protobuf record); e2 caches prompt 2 (vLLM msgpack record).
	p1, p2 := promptTokens(1, 4096), promptTokens(2, 4096)
	v, _ := proto.Marshal(&sluicev1.KvEventBatch{EngineId: "e1", Epoch: 7, Seq: 1, Model: "m", Time: timestamppb.Now(),
		Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
			BlockHashes: blockHashes(1, len(p1)/blockSize), TokenIds: p1, BlockSize: blockSize, Medium: sluicev1.Medium_MEDIUM_GPU}}}}})
	produce(&kgo.Record{Topic: kvTopic, Key: []byte("e1"), Value: v})
	batch := []any{float64(time.Now().Unix()), []any{[]any{"BlockStored", blockHashes(2, len(p2)/blockSize), nil, p2, blockSize, nil, "GPU"}}, 0}
	mp, err := msgpack.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	produce(&kgo.Record{Topic: kvTopic, Key: []byte("e2"), Value: mp, Headers: []kgo.RecordHeader{
		{Key: "sluice-format", Value: []byte("vllm.msgpack")}, {Key: "sluice-epoch", Value: []byte("3")},
		{Key: "sluice-seq", Value: []byte("1")}, {Key: "sluice-model", Value: []byte("m")}}})

	decide := func(tokens []uint32) *sluicev1.EnginePick {
		t.Helper()
		resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "m", InputTokens: int64(len(tokens)), TokenIds: tokens, DryRun: true, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetPick().GetPlain()
	}
	// Wait until both KV records and the load reports have been ingested.
	ingested := func() bool {
		a, b := decide(p1), decide(p2)
		if a.GetEngineId() != "e1" || a.GetReason() != "cache_candidate" || b.GetEngineId() != "e2" || b.GetReason() != "cache_candidate" {
			return false
		}
		eng := listEngines(t, srv)
		return eng["e1"].GetLoad().GetLoadKnown() && eng["e2"].GetLoad().GetLoadKnown() && eng["e3"].GetLoad().GetLoadKnown()
	}
	deadline := time.Now().Add(60 * time.Second)
	for !ingested() {
		if time.Now().After(deadline) {
			t.Fatalf("KV events not ingested within 60s: p1 -> %v, p2 -> %v", decide(p1), decide(p2))
		}
		time.Sleep(100 * time.Millisecond)
	}
	withSuffix := append(append([]uint32{}, p1...), promptTokens(9, 300)...)
	if got := decide(withSuffix); got.GetEngineId() != "e1" || got.GetReason() != "cache_candidate" {
		t.Errorf("request extending e1's prefix -> %s (%s), want e1 cache_candidate", got.GetEngineId(), got.GetReason())
	}
	if got := decide(promptTokens(5, 4096)); got.GetEngineId() != "e3" || got.GetReason() != "no_cache_candidate" {
		t.Errorf("cold prefix -> %s (%s), want e3 (least loaded) no_cache_candidate", got.GetEngineId(), got.GetReason())
	}
}

// TestSessionBindingsAcrossRestart documents what a restart does to bindings: they live in
// memory, so a restarted decider has none; the session's next request is assigned afresh (by
// power-of-two) and then stays put again.
func TestSessionBindingsAcrossRestart(t *testing.T) {
	first := startServer(t, "testdata/session.yaml")
	req := &sluicev1.DecideRequest{Model: "m", InputTokens: 10, SessionKey: "conv-9", DryRun: true}
	r1, err := grpcClient(t, first).Decide(context.Background(), req)
	if err != nil || r1.GetPick().GetPlain().GetReason() != "assigned" {
		t.Fatalf("first decider: %v %v", r1, err)
	}
	second := startServer(t, "testdata/session.yaml")
	c := grpcClient(t, second)
	r2, err := c.Decide(context.Background(), req)
	if err != nil || r2.GetPick().GetPlain().GetReason() != "assigned" {
		t.Fatalf("restarted decider reused a binding it cannot have: %v %v", r2, err)
	}
	r3, err := c.Decide(context.Background(), req)
	if err != nil || r3.GetPick().GetPlain().GetEngineId() != r2.GetPick().GetPlain().GetEngineId() || r3.GetPick().GetPlain().GetReason() != "session_primary" {
		t.Errorf("after re-binding: %v %v; want %s session_primary", r3, err, r2.GetPick().GetPlain().GetEngineId())
	}
}
