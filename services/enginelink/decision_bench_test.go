package enginelink_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testrun"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/services/deciderserver"
	"github.com/sluicehq/sluice/services/enginelink"
)

// BenchmarkEngineToDecision measures the whole production path for KV events: a vLLM-like
// publisher sends map-form batches of 16 BlockStored events over ZMQ at a steady 50k events/s;
// the link forwards them to the real broker; a real decider consumes them into its prefix index.
// Each of b.N probe blocks rides in one of those batches, and the probe's latency is from just
// before its ZMQ send until a dry-run Decide (gRPC, explain) credits the engine with its 16
// tokens. It reports the probes' p50/p99/max in ms and the event rate reached (goal: p99 <= 50 ms
// at 50k events/s). Run with SLUICE_TEST_RACE=0 through scripts/test.sh for the recorded figures.
func BenchmarkEngineToDecision(b *testing.B) {
	const (
		eventsPerSec = 50_000
		perBatch     = 16
		probeEvery   = 20 * time.Millisecond
	)
	brokers := testenv.KafkaBrokers(b)
	eng := newFakeEngine(b, engineOpts{})
	cfg := testConfig(brokers)
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP}}
	runLink(b, cfg)
	dec := startDecisionDecider(b, strings.Join(brokers, ","), cfg.KVTopic, cfg.LoadTopic)
	conn, err := grpc.NewClient(dec.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := sluicev1.NewDeciderServiceClient(conn)

	var next uint32 = 1 << 20 // token ids: every block distinct
	block := func() []uint32 {
		out := make([]uint32, 16)
		for i := range out {
			out[i] = next
			next++
		}
		return out
	}
	seq := eng.seq
	send := func(blocks [][]uint32) {
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], seq)
		seq++
		if err := eng.pub.SendMulti(zmq4.NewMsgFrom(nil, s[:], storedBatch(b, blocks))); err != nil {
			b.Fatal(err)
		}
	}
	visible := func(tokens []uint32) bool {
		ids := make([]uint32, len(tokens))
		copy(ids, tokens)
		d, err := client.Decide(context.Background(), &sluicev1.DecideRequest{Model: "m", InputTokens: int64(len(ids)), TokenIds: ids, DryRun: true, Explain: true})
		if err != nil {
			b.Fatal(err)
		}
		return proctest.Matched(d, "e1") >= int64(len(ids))
	}
	// Warm up until a block published now is seen: subscription live, topic created, consumer
	// positioned.
	deadline := time.Now().Add(60 * time.Second)
	for {
		probe := block()
		send([][]uint32{probe})
		time.Sleep(50 * time.Millisecond)
		if visible(probe) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no published block became visible to Decide within 60s")
		}
	}

	type probe struct {
		tokens []uint32
		sent   time.Time
	}
	probes := make(chan probe, b.N)
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the poller: one probe at a time, in order
		defer wg.Done()
		for p := range probes {
			for !visible(p.tokens) {
				if time.Since(p.sent) > 30*time.Second {
					b.Error("a probe block was not visible to Decide within 30s")
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
			lat = append(lat, time.Since(p.sent))
		}
	}()
	b.ResetTimer()
	start := time.Now()
	batchEvery := time.Second * perBatch / eventsPerSec
	sent, probed := 0, 0
	nextProbe := start
	for probed < b.N {
		// Pace batches at the target rate; catch up in bursts after a slow send.
		if ahead := time.Until(start.Add(time.Duration(sent) * batchEvery)); ahead > 0 {
			time.Sleep(ahead)
		}
		blocks := make([][]uint32, perBatch)
		for i := range blocks {
			blocks[i] = block()
		}
		if now := time.Now(); !now.Before(nextProbe) {
			probes <- probe{tokens: blocks[perBatch-1], sent: now}
			probed++
			nextProbe = nextProbe.Add(probeEvery)
		}
		send(blocks)
		sent++
	}
	close(probes)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no probe measured")
	}
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(sent*perBatch)/elapsed.Seconds(), "events/s")
}

// storedBatch encodes a vLLM 0.33 map-form batch with one root BlockStored per block.
func storedBatch(b *testing.B, blocks [][]uint32) []byte {
	events := make([]any, len(blocks))
	for i, toks := range blocks {
		events[i] = map[string]any{
			"type": "BlockStored", "block_hashes": []uint64{uint64(toks[0])<<8 | 1<<63}, "parent_block_hash": nil,
			"token_ids": toks, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil,
			"extra_keys": []any{nil}, "group_idx": 0, "kv_cache_spec_kind": "full_attention",
		}
	}
	out, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, events, 0})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// startDecisionDecider runs a real decider consuming the link's topics, with one engine e1 of
// model m under a cache_aware bucket.
func startDecisionDecider(b testing.TB, brokers, kvTopic, loadTopic string) *deciderserver.Server {
	b.Helper()
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	doc := "workers:\n  - {id: e1, url: \"http://127.0.0.1:9\", models: [m], role: plain}\n" +
		"buckets:\n  - id: chat\n    groups:\n      plain:\n        policy: {type: cache_aware, min_match_tokens: 16}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.ConfigSnapshot = "127.0.0.1:0", "127.0.0.1:0", path, "-"
	cfg.Health.ProbeInterval = 0 // the engine is not reachable; its KV residency is what is measured
	cfg.Ingest.Brokers, cfg.Ingest.KVTopic, cfg.Ingest.LoadTopic = brokers, kvTopic, loadTopic
	dec, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		b.Fatal(err)
	}
	testrun.Background(b, dec.Run)
	return dec
}
