package deciderserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestConsoleFleetRanksAndBlocks feeds a decider load reports and KV events over a real Kafka
// broker and reads the console's fleet: each data-parallel rank's load with its own age (also
// when the summed load is unknown because a rank has not reported), and the blocks the prefix
// index holds per engine, summed over its ranks.
func TestConsoleFleetRanksAndBlocks(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	loadTopic, kvTopic := "console-load-"+suffix, "console-kv-"+suffix
	cfg := DefaultConfig()
	cfg.ConfigPath = filepath.Join(t.TempDir(), "cfg.yaml")
	doc := `
workers:
  - {id: e1, url: "http://e1.test", models: [m], role: plain, dp_size: 2}
  - {id: e2, url: "http://e2.test", models: [m], role: plain}
  - {id: e3, url: "http://e3.test", models: [m], role: plain, dp_size: 2}
buckets:
  - {id: chat, models: [m], groups: {plain: {policy: {type: cache_aware}}}}
`
	if err := os.WriteFile(cfg.ConfigPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.AdminTokens, cfg.ViewerTokens = adminToken, viewerToken
	cfg.Health.ProbeInterval = 0
	cfg.Ingest.Brokers, cfg.Ingest.LoadTopic, cfg.Ingest.KVTopic = brokers[0], loadTopic, kvTopic
	cfg.LoadFreshness = time.Minute
	srv := startWith(t, cfg)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(topic, key string, m proto.Message) {
		t.Helper()
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	load := func(engine string, rank, size int32, at time.Time, running, kvUsed int64) {
		produce(loadTopic, engine, &sluicev1.LoadReport{EngineId: engine, DpRank: rank, DpSize: size, Epoch: 1, Seq: 1,
			CapturedAt: timestamppb.New(at), RunningRequests: running, WaitingRequests: 1, KvUsedTokens: kvUsed, KvCapacityTokens: 1000})
	}
	// e1's rank 1 reported 3 s before rank 0 and is far fuller; e3's rank 1 never reports.
	load("e1", 0, 2, now, 3, 200)
	load("e1", 1, 2, now.Add(-3*time.Second), 7, 900)
	load("e2", 0, 1, now, 1, 100)
	load("e3", 0, 2, now, 2, 300)
	// KV: e1 rank 0 holds 256 blocks, e1 rank 1 64 blocks, e2 the first 32 of e1's rank 0.
	p1, p2 := promptTokens(1, 4096), promptTokens(2, 1024)
	kv := func(engine string, rank int32, seed int, tokens []uint32) {
		produce(kvTopic, engine, &sluicev1.KvEventBatch{EngineId: engine, DpRank: rank, Epoch: 1, Seq: 1, Model: "m", Time: timestamppb.Now(),
			Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
				BlockHashes: blockHashes(seed, len(tokens)/blockSize), TokenIds: tokens, BlockSize: blockSize, Medium: sluicev1.Medium_MEDIUM_GPU}}}}})
	}
	kv("e1", 0, 1, p1)
	kv("e1", 1, 2, p2)
	kv("e2", 0, 3, p1[:512])

	rows := func(query string) (map[string]map[string]any, map[string]any) {
		t.Helper()
		code, body := consoleGet(t, srv, "/ui/api/fleet?"+query, viewerToken)
		if code != http.StatusOK {
			t.Fatalf("fleet?%s: %d %v", query, code, body)
		}
		out := map[string]map[string]any{}
		for _, r := range body["rows"].([]any) {
			m := r.(map[string]any)
			out[m["id"].(string)] = m
		}
		return out, body
	}
	num := func(m map[string]any, k string) float64 { f, _ := m[k].(float64); return f }
	var got map[string]map[string]any
	var body map[string]any
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, body = rows("sort=id")
		if num(got["e1"], "kv_blocks") == 320 && num(got["e2"], "kv_blocks") == 32 && got["e1"]["load_known"] == true &&
			got["e2"]["load_known"] == true && len(got["e3"]["rank_load"].([]any)) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("load and KV events not in the fleet within 60s: %v", got)
		}
	}
	// e1: the summed view and each rank as reported, each with its own age.
	e1 := got["e1"]
	if num(e1, "running") != 10 || num(e1, "kv_used_tokens") != 1100 || num(e1, "load_age_ms") < 3000 {
		t.Errorf("e1 summed load = %v; want running 10, kv_used 1100, age of the stalest rank >= 3 s", e1)
	}
	ranks := e1["rank_load"].([]any)
	if len(ranks) != 2 {
		t.Fatalf("e1 rank_load = %v, want 2 ranks", ranks)
	}
	r0, r1 := ranks[0].(map[string]any), ranks[1].(map[string]any)
	if num(r0, "rank") != 0 || num(r0, "running") != 3 || num(r0, "kv_usage") != 0.2 || r0["fresh"] != true || r0["reported"] != true {
		t.Errorf("e1 rank 0 = %v; want running 3, kv_usage 0.2, fresh", r0)
	}
	if num(r1, "rank") != 1 || num(r1, "running") != 7 || num(r1, "kv_usage") != 0.9 || r1["fresh"] != true {
		t.Errorf("e1 rank 1 = %v; want running 7, kv_usage 0.9, fresh", r1)
	}
	if a0, a1 := num(r0, "age_ms"), num(r1, "age_ms"); a1 < 3000 || a1-a0 < 2900 || a1-a0 > 3100 {
		t.Errorf("e1 rank ages = %v ms and %v ms; want rank 1 about 3 s older (and >= 3 s)", a0, a1)
	}
	// e3: load unknown as a whole, and the ranks say why.
	e3 := got["e3"]
	r3 := e3["rank_load"].([]any)
	if e3["load_known"] != false || r3[0].(map[string]any)["reported"] != true || r3[1].(map[string]any)["reported"] != false ||
		num(r3[0].(map[string]any), "running") != 2 {
		t.Errorf("e3 = %v; want load unknown, rank 0 reported (running 2), rank 1 not reported", e3)
	}
	if _, ok := e3["kv_blocks"]; !ok || num(e3, "kv_blocks") != 0 {
		t.Errorf("e3 kv_blocks = %v, want 0 (present: the decider ingests KV events)", e3["kv_blocks"])
	}
	if s := body["summary"].(map[string]any); num(s, "kv_blocks") != 352 || num(s, "load_unknown") != 1 {
		t.Errorf("summary = %v; want kv_blocks 352 and 1 engine with load unknown", s)
	}
	// Sort by blocks; one engine by id (as the page's detail panel asks).
	_, body = rows("sort=-blocks")
	var order []string
	for _, r := range body["rows"].([]any) {
		order = append(order, r.(map[string]any)["id"].(string))
	}
	if strings.Join(order, ",") != "e1,e2,e3" {
		t.Errorf("sort=-blocks = %v, want e1,e2,e3", order)
	}
	if one, body := rows("id=e1&limit=1"); len(one) != 1 || one["e1"] == nil || body["matched"].(float64) != 1 {
		t.Errorf("fleet?id=e1 = %v, want e1 alone", body)
	}
	if one, _ := rows("id=e"); len(one) != 0 {
		t.Errorf("fleet?id=e = %v, want nothing (id is exact; q is the substring filter)", one)
	}
}
