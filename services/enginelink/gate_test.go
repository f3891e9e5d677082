package enginelink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/kafkadev"
)

// TestProducerCoalescesBehindSlowBroker: a broker that takes 40 ms per produce request, fed a
// record every millisecond per key (the rate of load reports at a 10 ms scrape from a
// 4-rank engine, or KV events from a busy one). kafka-go's writer alone sent each record in
// a request of its own, one round trip after another per partition, so the queue and the
// records' age grew without bound; with the partition gate the records that arrive during a
// round trip leave together in the next request. Every record arrives, each key's in order.
func TestProducerCoalescesBehindSlowBroker(t *testing.T) {
	t.Parallel()
	b, err := kafkadev.Start(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	c := b.Cluster()
	var produces atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		produces.Add(1)
		c.SleepControl(func() { time.Sleep(40 * time.Millisecond) })
		return nil, nil, false // not handled: the broker then serves it, late
	})

	cfg := DefaultConfig()
	cfg.KafkaBrokers = b.Addr()[0]
	cfg.KVTopic, cfg.LoadTopic = "gate.kv", "gate.load"
	p := newProducer(slog.New(slog.NewTextHandler(io.Discard, nil)), cfg, newMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	const keys, perKey = 4, 250
	for i := range perKey {
		for k := range keys {
			msg := kafka.Message{Topic: cfg.KVTopic, Key: []byte("e" + strconv.Itoa(k)), Value: []byte(strconv.Itoa(i)), Time: time.Now()}
			if !p.enqueue(msg) {
				t.Fatalf("record %d of key %d refused: buffer full", i, k)
			}
			load := kafka.Message{Topic: cfg.LoadTopic, Key: []byte("e" + strconv.Itoa(k)), Value: []byte(strconv.Itoa(i)), Time: time.Now()}
			if p.enqueueLoads([]kafka.Message{load}) != 1 {
				t.Fatalf("load report %d of key %d refused: buffer full", i, k)
			}
		}
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	for p.buffered.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d records still buffered after 60 s (%d produce requests)", p.buffered.Load(), produces.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// 2 × 1000 records over ~0.3 s of arrivals: one request per record would be 2000 requests
	// (80 s of round trips); coalesced, each of the 2 topics × partitions sends a request per
	// round trip while records wait, a few dozen in all.
	if n := produces.Load(); n > 300 {
		t.Errorf("%d produce requests for %d records: the backlog did not coalesce", n, 2*keys*perKey)
	}
	t.Logf("%d produce requests for %d records", produces.Load(), 2*keys*perKey)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()...), kgo.ConsumeTopics(cfg.KVTopic, cfg.LoadTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	next := map[string]int{}
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	for got := 0; got < 2*keys*perKey; {
		fs := cl.PollFetches(fctx)
		if err := fctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records", got, 2*keys*perKey)
		}
		fs.EachRecord(func(r *kgo.Record) {
			id := r.Topic + "/" + string(r.Key)
			if want := strconv.Itoa(next[id]); string(r.Value) != want {
				t.Errorf("%s: record %q where %q was next", id, r.Value, want)
			}
			next[id]++
			got++
		})
	}
	for k := range keys {
		for _, topic := range []string{cfg.KVTopic, cfg.LoadTopic} {
			if id := fmt.Sprintf("%s/e%d", topic, k); next[id] != perKey {
				t.Errorf("%s: %d records, want %d", id, next[id], perKey)
			}
		}
	}
}
