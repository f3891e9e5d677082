package simengine

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

const (
	loadTopic = "sluice.engine-load.v1"
	kvTopic   = "sluice.kv-events.v1"
)

// startBroker starts an in-process Kafka-protocol broker with both topics.
func startBroker(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, loadTopic, kvTopic), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// consume reads records of topic until done says it has enough or 10 s pass.
func consume(t *testing.T, brokers []string, topic string, done func([]*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for !done(recs) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: only %d records within 10s", topic, len(recs))
		}
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func publishingConfig(brokers []string, format string) Config {
	cfg := testConfig()
	cfg.KafkaBrokers = brokers[0]
	cfg.LoadInterval = 20 * time.Millisecond
	cfg.KVInterval = 10 * time.Millisecond
	cfg.KVFormat = format
	cfg.BlockSize = 4
	return cfg
}

func TestPublishProto(t *testing.T) {
	brokers := startBroker(t)
	s, base := start(t, publishingConfig(brokers, KVFormatProto))
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, "max_tokens": 1})
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 50, 60, 70, 80}, "max_tokens": 1})
	s.Engine().Reset()

	loads := consume(t, brokers, loadTopic, func(r []*kgo.Record) bool { return len(r) >= 3 })
	var lastSeq uint64
	for i, rec := range loads {
		var lr sluicev1.LoadReport
		if err := proto.Unmarshal(rec.Value, &lr); err != nil {
			t.Fatalf("load record %d: %v", i, err)
		}
		if string(rec.Key) != "sim-test" || lr.GetEngineId() != "sim-test" || lr.GetDpSize() != 1 || lr.GetEpoch() == 0 ||
			lr.GetKvCapacityTokens() != int64(DefaultConfig().CacheBlocks*4) || lr.GetNative().GetMaxRunningRequests() != int64(DefaultConfig().MaxRunning) ||
			lr.GetCapturedAt() == nil {
			t.Errorf("load record %d: key %q %v", i, rec.Key, &lr)
		}
		if lr.GetSeq() <= lastSeq {
			t.Errorf("load seq %d after %d", lr.GetSeq(), lastSeq)
		}
		lastSeq = lr.GetSeq()
	}
	if loads[0].Headers == nil || header(loads[0], HeaderEpoch) == "" {
		t.Errorf("load record without epoch header")
	}

	var events []*sluicev1.KvEvent
	var batches []*sluicev1.KvEventBatch
	consume(t, brokers, kvTopic, func(recs []*kgo.Record) bool {
		events, batches = events[:0], batches[:0]
		for _, rec := range recs {
			var b sluicev1.KvEventBatch
			if err := proto.Unmarshal(rec.Value, &b); err != nil {
				t.Fatalf("kv record: %v", err)
			}
			if string(rec.Key) != "sim-test" || header(rec, HeaderFormat) != "" || header(rec, HeaderSeq) != strconv.FormatUint(b.GetSeq(), 10) {
				t.Errorf("kv record key %q headers %v", rec.Key, rec.Headers)
			}
			batches = append(batches, &b)
			events = append(events, b.GetEvents()...)
		}
		return len(events) >= 3
	})
	for i, b := range batches {
		if b.GetSeq() != uint64(i+1) || b.GetModel() != "m" || b.GetEngineId() != "sim-test" || b.GetEpoch() != batches[0].GetEpoch() {
			t.Errorf("batch %d: seq %d model %q epoch %d", i, b.GetSeq(), b.GetModel(), b.GetEpoch())
		}
	}
	first := events[0].GetBlockStored()
	if first == nil || len(first.GetBlockHashes()) != 2 || first.ParentBlockHash != nil || first.GetBlockSize() != 4 ||
		len(first.GetTokenIds()) != 8 || first.GetMedium() != sluicev1.Medium_MEDIUM_GPU {
		t.Errorf("first event %v", events[0])
	}
	second := events[1].GetBlockStored()
	if second == nil || len(second.GetBlockHashes()) != 1 || second.ParentBlockHash == nil || *second.ParentBlockHash != first.GetBlockHashes()[0] {
		t.Errorf("second event %v", events[1])
	}
	if events[2].GetAllBlocksCleared() == nil {
		t.Errorf("third event %v", events[2])
	}
}

func TestPublishVLLMMsgpack(t *testing.T) {
	brokers := startBroker(t)
	_, base := start(t, publishingConfig(brokers, KVFormatVLLMMsgpack))
	post(t, base+"/generate", map[string]any{"input_ids": []int{1, 2, 3, 4, 5, 6, 7, 8}, "sampling_params": map[string]any{"max_new_tokens": 1}})
	recs := consume(t, brokers, kvTopic, func(r []*kgo.Record) bool { return len(r) >= 1 })
	rec := recs[0]
	if header(rec, HeaderFormat) != FormatVLLMMsgpack || header(rec, HeaderSeq) != "1" || header(rec, HeaderModel) != "m" ||
		header(rec, HeaderEpoch) == "" || string(rec.Key) != "sim-test" {
		t.Errorf("headers %v key %q", rec.Headers, rec.Key)
	}
	var batch []any
	if err := msgpack.Unmarshal(rec.Value, &batch); err != nil {
		t.Fatal(err)
	}
	if len(batch) != 3 {
		t.Fatalf("batch %v: want [ts, events, dp_rank]", batch)
	}
	if ts, ok := batch[0].(float64); !ok || ts < 1e9 {
		t.Errorf("ts %#v", batch[0])
	}
	if rank, ok := batch[2].(int8); !ok || rank != 0 {
		t.Errorf("dp_rank %#v", batch[2])
	}
	evs := batch[1].([]any)
	ev := evs[0].([]any)
	if len(ev) != 7 || ev[0] != "BlockStored" || ev[2] != nil || ev[5] != nil || ev[6] != "GPU" {
		t.Fatalf("event %#v", ev)
	}
	hashes := ev[1].([]any)
	if len(hashes) != 2 {
		t.Fatalf("hashes %#v", hashes)
	}
	if _, ok := hashes[0].(uint64); !ok {
		t.Errorf("hash %T, want uint64", hashes[0])
	}
	tokens := ev[3].([]any)
	if len(tokens) != 8 {
		t.Errorf("token ids %#v", tokens)
	}
	if bs, ok := ev[4].(int8); !ok || bs != 4 {
		t.Errorf("block size %#v", ev[4])
	}
}

func TestUnreachableKafkaKeepsServing(t *testing.T) {
	cfg := testConfig()
	cfg.KafkaBrokers = "127.0.0.1:1"
	cfg.LoadInterval = 10 * time.Millisecond
	_, base := start(t, cfg)
	for range 3 {
		if resp, body := post(t, base+"/v1/completions", map[string]any{"prompt": "still serving", "max_tokens": 2}); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	// The first load report's write fails after the writer's retries (tens of ms): poll for
	// its count rather than sleep for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := get(t, base+"/metrics")
		if strings.Contains(string(body), `sluice_simengine_kafka_write_errors_total{topic="sluice.engine-load.v1"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics does not count the failed writes within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
