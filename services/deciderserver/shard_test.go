package deciderserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/metrictest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// shardDoc puts model ma in shard a and mb in shard b; mc belongs to no shard. Both engines
// serve every model, so only the shard's topics decide what a replica knows.
const shardDoc = `
workers:
  - {id: e1, url: "http://e1.test", models: [ma, mb, mc], role: plain}
  - {id: e2, url: "http://e2.test", models: [ma, mb, mc], role: plain}
buckets:
  - id: chat
    models: [ma, mb, mc]
    groups:
      plain:
        policy: {type: cache_aware, min_match_tokens: 256, miss_choices: 2}
shards:
  - {id: a, models: [ma]}
  - {id: b, models: [mb], deciders: ["decider-b1.test:7070", "decider-b2.test:7070"]}
`

// writeShardDoc writes shardDoc, with power_of_two in place of cache_aware without a KV index.
func writeShardDoc(t *testing.T, kvIndex bool) string {
	t.Helper()
	doc := shardDoc
	if !kvIndex {
		doc = strings.Replace(doc, "{type: cache_aware, min_match_tokens: 256, miss_choices: 2}", "{type: power_of_two}", 1)
	}
	p := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// wrongShard returns the WRONG_SHARD ErrorInfo of err, failing the test for anything else.
func wrongShard(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("error %v: code %v, want FailedPrecondition", err, st.Code())
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "WRONG_SHARD" {
			return info
		}
	}
	t.Fatalf("error %v carries no ErrorInfo WRONG_SHARD: %v", err, st.Details())
	return nil
}

// TestShardRefusesOtherModels: a decider of shard a serves ma and refuses mb (shard b, whose
// deciders the refusal lists) and mc (no shard) with FAILED_PRECONDITION WRONG_SHARD over gRPC
// and REST; an unsharded decider serves mc and refuses ma; a -shard the document does not
// define is a start-up error.
func TestShardRefusesOtherModels(t *testing.T) {
	cfgPath := writeShardDoc(t, false)
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.Health.ProbeInterval = "127.0.0.1:0", "127.0.0.1:0", cfgPath, 0
	cfg.Shard = "a"
	a := runServer(t, cfg)
	c := grpcClient(t, a)
	ctx := context.Background()
	if _, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "ma", InputTokens: 10, DryRun: true}); err != nil {
		t.Fatalf("shard a, model ma: %v", err)
	}
	_, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "mb", InputTokens: 10, DryRun: true})
	info := wrongShard(t, err)
	if md := info.GetMetadata(); md["shard"] != "b" || md["model"] != "mb" || md["replica_shard"] != "a" ||
		md["deciders"] != "decider-b1.test:7070,decider-b2.test:7070" {
		t.Errorf("WRONG_SHARD metadata = %v", md)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `shard "b"`) || !strings.Contains(msg, "decider-b1.test:7070") {
		t.Errorf("message %q does not name the owning shard and its deciders", msg)
	}
	_, err = c.Decide(ctx, &sluicev1.DecideRequest{Model: "mc", InputTokens: 10, DryRun: true})
	if md := wrongShard(t, err).GetMetadata(); md["shard"] != "" || md["model"] != "mc" {
		t.Errorf("unsharded model on shard a: metadata = %v", md)
	}

	resp, raw := restRaw(t, a, "POST", "/v1/decide", `{"model": "mb", "input_tokens": 10, "dry_run": true}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), `"reason":"WRONG_SHARD"`) ||
		!strings.Contains(string(raw), `"shard":"b"`) {
		t.Errorf("REST decide for shard b's model on shard a = %d %s; want 400 with ErrorInfo WRONG_SHARD naming shard b", resp.StatusCode, raw)
	}

	// Two refusals for shard b's model (gRPC, REST), one for the unsharded mc.
	for owner, want := range map[string]float64{"b": 2, "": 1} {
		if got := shardMetric(t, a, "sluice_decider_wrong_shard_total", map[string]string{"shard": "a", "owner": owner}); got != want {
			t.Errorf("sluice_decider_wrong_shard_total{shard=a,owner=%q} = %v, want %v", owner, got, want)
		}
	}

	cfg.Shard = ""
	unSrv := runServer(t, cfg)
	un := grpcClient(t, unSrv)
	if _, err := un.Decide(ctx, &sluicev1.DecideRequest{Model: "mc", InputTokens: 10, DryRun: true}); err != nil {
		t.Fatalf("unsharded decider, model mc: %v", err)
	}
	_, err = un.Decide(ctx, &sluicev1.DecideRequest{Model: "ma", InputTokens: 10, DryRun: true})
	if md := wrongShard(t, err).GetMetadata(); md["shard"] != "a" || md["replica_shard"] != "" {
		t.Errorf("shard a's model on an unsharded decider: metadata = %v", md)
	}
	if got := shardMetric(t, unSrv, "sluice_decider_wrong_shard_total", map[string]string{"owner": "a"}); got != 1 {
		t.Errorf("unsharded decider: sluice_decider_wrong_shard_total{owner=a} = %v, want 1", got)
	}

	cfg.Shard = "zz"
	if _, err := New(slog.New(slog.DiscardHandler), cfg); err == nil || !strings.Contains(err.Error(), `no shard "zz"`) {
		t.Errorf("New with -shard zz = %v, want an error naming the missing shard", err)
	}
}

// shardMetric sums the samples of name on srv's /metrics whose labels include want (a
// histogram counts its observations).
func shardMetric(t *testing.T, srv *Server, name string, want map[string]string) float64 {
	t.Helper()
	return metrictest.Sum(t, "http://"+srv.HTTPAddr()+"/metrics", "", name, want)
}

// kvRecords reads sluice_ingest_records_total{stream="kv"} from srv's /metrics.
func kvRecords(t *testing.T, srv *Server) int {
	t.Helper()
	return int(shardMetric(t, srv, "sluice_ingest_records_total", map[string]string{"stream": "kv"}))
}

// TestShardIngestsOnlyItsTopics runs deciders of shards a and b against the real broker. Each
// shard's records go to its own topics. A record on shard b's KV topic, even one naming shard
// a's model, never reaches shard a's index, and each replica knows only its own shard's load
// reports.
func TestShardIngestsOnlyItsTopics(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	loadTopic, kvTopic := "it-load-"+suffix, "it-kv-"+suffix
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.Health.ProbeInterval = "127.0.0.1:0", "127.0.0.1:0", writeShardDoc(t, true), 0
	cfg.Ingest.Brokers, cfg.Ingest.LoadTopic, cfg.Ingest.KVTopic = brokers[0], loadTopic, kvTopic
	cfg.LoadFreshness = time.Minute
	cfg.Shard = "a"
	srvA := runServer(t, cfg)
	cfg.Shard = "b"
	srvB := runServer(t, cfg)

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
	kv := func(topic, engine, model string, seq uint64, tokens []uint32, seed int) *kgo.Record {
		v, _ := proto.Marshal(&sluicev1.KvEventBatch{EngineId: engine, Epoch: 1, Seq: seq, Model: model, Time: timestamppb.Now(),
			Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
				BlockHashes: blockHashes(seed, len(tokens)/blockSize), TokenIds: tokens, BlockSize: blockSize, Medium: sluicev1.Medium_MEDIUM_GPU}}}}})
		return &kgo.Record{Topic: topic, Key: []byte(engine), Value: v}
	}
	load := func(topic, engine string) *kgo.Record {
		v, _ := proto.Marshal(&sluicev1.LoadReport{EngineId: engine, DpSize: 1, Epoch: 1, Seq: 1, CapturedAt: timestamppb.Now(),
			RunningRequests: 1, KvUsedTokens: 1, KvCapacityTokens: 1000})
		return &kgo.Record{Topic: topic, Key: []byte(engine), Value: v}
	}
	pa, pb, stray := promptTokens(1, 1024), promptTokens(2, 1024), promptTokens(3, 1024)
	// Shard b's topic: e2 caches pb for mb, and a stray record claims e2 caches stray for
	// shard a's model ma. Shard a's topic: e1 caches pa for ma.
	produce(kv(kvTopic+".b", "e2", "mb", 1, pb, 2), kv(kvTopic+".b", "e2", "ma", 2, stray, 3), load(loadTopic+".b", "e2"))
	produce(kv(kvTopic+".a", "e1", "ma", 1, pa, 1), load(loadTopic+".a", "e1"))

	ca, cb := grpcClient(t, srvA), grpcClient(t, srvB)
	decide := func(c sluicev1.DeciderServiceClient, model string, tokens []uint32) *sluicev1.EnginePick {
		t.Helper()
		resp, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: model, InputTokens: int64(len(tokens)), TokenIds: tokens, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetPick().GetPlain()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		a, b := decide(ca, "ma", pa), decide(cb, "mb", pb)
		if a.GetReason() == "cache_candidate" && b.GetReason() == "cache_candidate" && kvRecords(t, srvB) == 2 {
			if a.GetEngineId() != "e1" || b.GetEngineId() != "e2" {
				t.Fatalf("cache hits on the wrong engines: shard a -> %s, shard b -> %s", a.GetEngineId(), b.GetEngineId())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards did not ingest their records within 60s: a -> %v, b -> %v, b records %d", a, b, kvRecords(t, srvB))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Shard b has read both of its records; give shard a the same chance to (wrongly) read them.
	time.Sleep(time.Second)
	if n := kvRecords(t, srvA); n != 1 {
		t.Errorf("shard a read %d KV records, want 1 (only its own topic's)", n)
	}
	// Per-shard series: each replica's ingest metrics carry its shard; b applied 2 KV records
	// of one event each and 1 load report, a 1 and 1, each with a produce-to-apply delay.
	for _, c := range []struct {
		srv                 *Server
		shard               string
		kv, events, loadRec float64
	}{{srvA, "a", 1, 1, 1}, {srvB, "b", 2, 2, 1}} {
		for _, m := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"sluice_ingest_records_total", map[string]string{"shard": c.shard, "stream": "kv"}, c.kv},
			{"sluice_ingest_kv_events_total", map[string]string{"shard": c.shard, "stream": "kv"}, c.events},
			{"sluice_ingest_record_delay_seconds", map[string]string{"shard": c.shard, "stream": "kv"}, c.kv},
			{"sluice_ingest_record_delay_seconds", map[string]string{"shard": c.shard, "stream": "load"}, c.loadRec},
		} {
			if got := shardMetric(t, c.srv, m.name, m.labels); got != m.want {
				t.Errorf("shard %s: %s%v = %v, want %v", c.shard, m.name, m.labels, got, m.want)
			}
		}
	}
	if got := decide(ca, "ma", stray); got.GetReason() == "cache_candidate" {
		t.Errorf("shard a routes ma's stray prefix by cache (%s): a record on shard b's topic reached shard a's index", got.GetEngineId())
	}
	for _, c := range []struct {
		srv          *Server
		known, unknw string
	}{{srvA, "e1", "e2"}, {srvB, "e2", "e1"}} {
		eng := listEngines(t, c.srv)
		if !eng[c.known].GetLoad().GetLoadKnown() || eng[c.unknw].GetLoad().GetLoadKnown() {
			t.Errorf("load known: %s=%v %s=%v; want only %s's (its shard's topic)", c.known, eng[c.known].GetLoad().GetLoadKnown(),
				c.unknw, eng[c.unknw].GetLoad().GetLoadKnown(), c.known)
		}
	}
	_, err = cb.Decide(ctx, &sluicev1.DecideRequest{Model: "ma", InputTokens: 10, DryRun: true})
	if md := wrongShard(t, err).GetMetadata(); md["shard"] != "a" {
		t.Errorf("shard b refusing ma: metadata %v", md)
	}
}

// TestShardReloadDroppingShardRefused: a configuration file rewritten without the replica's
// shard is refused on reload; the replica keeps serving its version and its shard's rules. A
// later file that keeps the shard but moves a model is taken.
func TestShardReloadDroppingShardRefused(t *testing.T) {
	cfgPath := writeShardDoc(t, false)
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.Health.ProbeInterval = "127.0.0.1:0", "127.0.0.1:0", cfgPath, 0
	cfg.ConfigPoll, cfg.Shard = 20*time.Millisecond, "a"
	srv := runServer(t, cfg)
	c := grpcClient(t, srv)
	ctx := context.Background()
	v0 := srv.decider.ConfigVersion()
	noShards := strings.SplitN(strings.Replace(shardDoc, "{type: cache_aware, min_match_tokens: 256, miss_choices: 2}", "{type: power_of_two}", 1), "shards:", 2)[0]
	if err := os.WriteFile(cfgPath, []byte(noShards), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // 15 polls
	if v := srv.decider.ConfigVersion(); v != v0 {
		t.Fatalf("config version %d after a file without shard a, want %d (refused)", v, v0)
	}
	_, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "mb", InputTokens: 10, DryRun: true})
	wrongShard(t, err)
	// Move mb into shard a: now served here.
	moved := noShards + "shards:\n  - {id: a, models: [ma, mb]}\n"
	if err := os.WriteFile(cfgPath, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.decider.ConfigVersion() == v0 {
		if time.Now().After(deadline) {
			t.Fatal("the file moving mb into shard a was not loaded within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.Decide(ctx, &sluicev1.DecideRequest{Model: "mb", InputTokens: 10, DryRun: true}); err != nil {
		t.Errorf("mb after moving it into shard a: %v", err)
	}
}
