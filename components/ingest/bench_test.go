package ingest

import (
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// nopIndex accepts everything and keeps nothing: it isolates the cost of the
// broker -> decode -> epoch/seq path from the index's own apply cost (which
// state/kvindex benchmarks on its own).
type nopIndex struct{ stored int64 }

func (n *nopIndex) Store(Holder, Namespace, *kvevents.BlockStored) error { n.stored++; return nil }
func (*nopIndex) Remove(Holder, *kvevents.BlockRemoved)                  {}
func (*nopIndex) Clear(Holder)                                           {}
func (*nopIndex) RemoveEngine(slots.Slot)                                {}
func (*nopIndex) WriteSnapshot(io.Writer, *slots.Table) error            { return nil }
func (*nopIndex) Digest() uint64                                         { return 0 }

// benchBatch is a KvEventBatch of events BlockStored events of one 16-token
// block each, the shape vLLM emits while decoding.
func benchBatch(tb testing.TB, engine string, seq uint64, events int) *kgo.Record {
	b := &sluicev1.KvEventBatch{EngineId: engine, Epoch: 1, Seq: seq, Model: "m"}
	for i := range events {
		toks := make([]uint32, 16)
		for j := range toks {
			toks[j] = uint32(seq*uint64(events)+uint64(i))*16 + uint32(j)
		}
		b.Events = append(b.Events, &sluicev1.KvEvent{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
			BlockHashes: []uint64{seq<<8 | uint64(i)}, TokenIds: toks, BlockSize: 16}}})
	}
	return kvProto(tb, b)
}

// produceBench writes records batches of eventsPer events across 16 engines.
func produceBench(b *testing.B, cl *kgo.Client, records, eventsPer int) {
	const engines = 16
	seqs := make([]uint64, engines)
	batch := make([]*kgo.Record, 0, 1000)
	for i := range records {
		e := i % engines
		seqs[e]++
		batch = append(batch, benchBatch(b, "engine-"+string(rune('a'+e)), seqs[e], eventsPer))
		if len(batch) == cap(batch) || i == records-1 {
			produce(b, cl, batch...)
			batch = batch[:0]
		}
	}
}

func benchBrokers(b *testing.B) []string {
	if testing.Short() {
		b.Skip("real-broker benchmark; skipped in -short")
	}
	return testenv.KafkaBrokers(b)
}

// BenchmarkBrokerToIndex measures real broker -> KVIngester throughput in KV
// events per second: a topic of pre-produced batches consumed from the start.
// Sub-benchmark nop isolates the ingest path; kvindex includes the real
// index's apply cost.
func BenchmarkBrokerToIndex(b *testing.B) {
	brokers := benchBrokers(b)
	const records, eventsPer = 50_000, 8
	topic := topicName(b, "kv")
	produceBench(b, producer(b, brokers, topic), records, eventsPer)
	for _, real := range []bool{false, true} {
		name := "nop"
		if real {
			name = "kvindex"
		}
		b.Run(name, func(b *testing.B) { benchBrokerToIndex(b, brokers, topic, records, eventsPer, real) })
	}
}

func benchBrokerToIndex(b *testing.B, brokers []string, topic string, records, eventsPer int, real bool) {
	b.ReportAllocs()
	var total time.Duration
	for range b.N {
		st := slots.NewTable()
		var idx KVIndex = &nopIndex{}
		if real {
			ix, err := kvindex.New(kvindex.Config{})
			if err != nil {
				b.Fatal(err)
			}
			idx = ix
		}
		cfg := KVConfig{Config: fastConfig(brokers, topic)}
		cfg.MaxBytes = 64 << 20
		k, err := NewKVIngester(testLogger(b), cfg, idx, st, prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		stop := runBG(b, k.Run)
		waitFor(b, 5*time.Minute, "all records", func() bool { return sumOffsets(k.Offsets()) >= int64(records) })
		total += time.Since(t0)
		stop()
		if got := k.Stats().BlocksStored; got != int64(records*eventsPer) {
			b.Fatalf("stored %d events, want %d (bad: %+v)", got, records*eventsPer, k.Stats())
		}
	}
	b.ReportMetric(float64(records*eventsPer*b.N)/total.Seconds(), "events/s")
}

// BenchmarkIngestLag produces at a fixed rate of 50k KV events/s (5k
// records/s of 10 events) and reports the p50/p99 delay from the record's
// produce timestamp to its application.
func BenchmarkIngestLag(b *testing.B) {
	brokers := benchBrokers(b)
	const eventsPer, recordsPerSec, seconds = 10, 5_000, 5
	topic := topicName(b, "kv")
	cl := producer(b, brokers, topic)
	produce(b, cl, benchBatch(b, "warmup", 1, 1))
	for range b.N {
		st := slots.NewTable()
		k, err := NewKVIngester(testLogger(b), KVConfig{Config: fastConfig(brokers, topic)}, &nopIndex{}, st, prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var lags []time.Duration
		k.s.applied = func(m *kafka.Message) {
			d := time.Since(m.Time)
			mu.Lock()
			lags = append(lags, d)
			mu.Unlock()
		}
		stop := runBG(b, k.Run)
		waitFor(b, 30*time.Second, "warm-up record", func() bool { return sumOffsets(k.Offsets()) >= 1 })
		mu.Lock()
		lags = lags[:0]
		mu.Unlock()
		// Produce in 10 ms ticks, asynchronously, as an engine would.
		tick := time.NewTicker(10 * time.Millisecond)
		per := recordsPerSec / 100
		var seq uint64 = 1
		var wg sync.WaitGroup
		for range seconds * 100 {
			<-tick.C
			for range per {
				seq++
				r := benchBatch(b, "lag-engine", seq, eventsPer)
				wg.Add(1)
				cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						b.Error(err)
					}
				})
			}
		}
		tick.Stop()
		wg.Wait()
		want := seconds * 100 * per
		waitFor(b, 30*time.Second, "all applied", func() bool { mu.Lock(); defer mu.Unlock(); return len(lags) >= want })
		stop()
		mu.Lock()
		slices.Sort(lags)
		b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(lags[len(lags)-1].Microseconds())/1000, "max-ms")
		mu.Unlock()
	}
}

// BenchmarkColdStart measures a restart: restore a snapshot covering the
// first part of a topic, then consume the tail to the end. It uses the
// real state/kvindex (default node cap). SLUICE_BENCH_COLDSTART_RECORDS sets
// the snapshot part in records of 10 events (default 50k); the tail is a
// fifth of it.
func BenchmarkColdStart(b *testing.B) {
	brokers := benchBrokers(b)
	snapRecords, tailRecords, eventsPer := 50_000, 50_000, 10
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_COLDSTART_RECORDS")); err == nil && n > 0 {
		snapRecords, tailRecords = n, n/5 // the tail is what arrives within one snapshot interval
	}
	topic := topicName(b, "kv")
	cl := producer(b, brokers, topic)
	produceBench(b, cl, snapRecords, eventsPer)
	dir := b.TempDir()
	a := newPairIndex(b, brokers, "unused", topic, dir, true)
	a.snap.load = nil
	stop := runBG(b, a.kv.Run)
	waitFor(b, 5*time.Minute, "snapshot part", func() bool { return sumOffsets(a.kv.Offsets()) >= int64(snapRecords) })
	stop()
	if _, err := a.snap.Write(); err != nil {
		b.Fatal(err)
	}
	// The tail: more records from the same engines (seqs continue).
	tail := make([]*kgo.Record, 0, 1000)
	for i := range tailRecords {
		e := i % 16
		tail = append(tail, benchBatch(b, "engine-"+string(rune('a'+e)), uint64(snapRecords/16+1+i/16), eventsPer))
		if len(tail) == cap(tail) {
			produce(b, cl, tail...)
			tail = tail[:0]
		}
	}
	b.ResetTimer()
	var restore, consume time.Duration
	for range b.N {
		p := newPairIndex(b, brokers, "unused", topic, dir, true)
		p.snap.load = nil
		t0 := time.Now()
		if info, err := p.snap.Restore(); err != nil || info.Path == "" {
			b.Fatalf("Restore: %+v %v", info, err)
		}
		t1 := time.Now()
		stop := runBG(b, p.kv.Run)
		waitFor(b, 5*time.Minute, "tail", func() bool { return sumOffsets(p.kv.Offsets()) >= int64(snapRecords+tailRecords) })
		t2 := time.Now()
		stop()
		restore += t1.Sub(t0)
		consume += t2.Sub(t1)
	}
	n := float64(b.N)
	b.ReportMetric(restore.Seconds()/n, "restore-s")
	b.ReportMetric(consume.Seconds()/n, "tail-s")
	b.ReportMetric(float64(tailRecords*eventsPer)*n/consume.Seconds(), "tail-events/s")
	b.ReportMetric(float64(snapRecords*eventsPer), "snapshot-events")
}
