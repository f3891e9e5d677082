package ingest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// cpuNow is the process's user + system CPU time.
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShardedIngest runs 1 to 4 model shards on one machine against the real broker:
// each shard is a KV ingester with its own real prefix index on its own topic (the topic per
// shard of docs/decisions.md, "Model-sharded deciders"). It reports
//   - events/s: all shards together draining a backlog of 20k records of 8 events per shard,
//     and cpu-us/event, the process CPU time per event over that drain;
//   - lag-p50-ms / lag-p99-ms / lag-max-ms: produce timestamp to application, every shard fed 1,000
//     records of 10 events per second (10k events/s per shard) for 3 s at once.
//
// Each shard must store exactly its own topic's blocks. Run with -count for interleaved rounds.
func BenchmarkShardedIngest(b *testing.B) {
	brokers := benchBrokers(b)
	const maxShards, backlog, eventsPer = 4, 20_000, 8
	topics := make([]string, maxShards)
	for s := range topics {
		topics[s] = topicName(b, fmt.Sprintf("kv.s%d", s))
		produceShard(b, producer(b, brokers, topics[s]), s, backlog, eventsPer)
	}
	for _, n := range []int{1, 2, 3, 4} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			for range b.N {
				drain(b, brokers, topics[:n], backlog, eventsPer)
				shardLag(b, brokers, n)
			}
		})
	}
}

// produceShard writes records batches of eventsPer events from 16 engines of shard s.
func produceShard(b *testing.B, cl *kgo.Client, s, records, eventsPer int) {
	const engines = 16
	seqs := make([]uint64, engines)
	batch := make([]*kgo.Record, 0, 1000)
	for i := range records {
		e := i % engines
		seqs[e]++
		batch = append(batch, benchBatch(b, fmt.Sprintf("s%d-engine-%d", s, e), seqs[e], eventsPer))
		if len(batch) == cap(batch) || i == records-1 {
			produce(b, cl, batch...)
			batch = batch[:0]
		}
	}
}

type shardIngester struct {
	k    *KVIngester
	stop context.CancelFunc
}

func startShard(b *testing.B, brokers []string, topic string) *KVIngester {
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := KVConfig{Config: fastConfig(brokers, topic)}
	cfg.MaxBytes = 64 << 20
	k, err := NewKVIngester(testLogger(b), cfg, ix, slots.NewTable(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// drain consumes every shard's backlog from the start, all shards at once.
func drain(b *testing.B, brokers, topics []string, records, eventsPer int) {
	shards := make([]shardIngester, len(topics))
	for i, t := range topics {
		shards[i].k = startShard(b, brokers, t)
	}
	cpu0, t0 := cpuNow(b), time.Now()
	for i := range shards {
		shards[i].stop = runBG(b, shards[i].k.Run)
	}
	for _, s := range shards {
		waitFor(b, 5*time.Minute, "shard backlog", func() bool { return sumOffsets(s.k.Offsets()) >= int64(records) })
	}
	wall, cpu := time.Since(t0), cpuNow(b)-cpu0
	for i, s := range shards {
		s.stop()
		if got := s.k.Stats().BlocksStored; got != int64(records*eventsPer) {
			b.Fatalf("shard %d stored %d blocks, want exactly its own topic's %d", i, got, records*eventsPer)
		}
	}
	events := float64(len(topics) * records * eventsPer)
	b.ReportMetric(events/wall.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/events, "cpu-us/event")
}

// shardLag feeds n fresh shard topics at a fixed rate at once and reports the produce-to-apply
// delay over all their records.
func shardLag(b *testing.B, brokers []string, n int) {
	const eventsPer, perTick, ticks = 10, 10, 300 // 10 records per 10 ms: 1,000 records/s per shard
	var mu sync.Mutex
	var lags []time.Duration
	type lagShard struct {
		cl   *kgo.Client
		k    *KVIngester
		stop context.CancelFunc
	}
	shards := make([]lagShard, n)
	for i := range shards {
		topic := topicName(b, fmt.Sprintf("lag.s%d", i))
		shards[i].cl = producer(b, brokers, topic)
		// Warm up with every engine key the run uses (seq 1), so each partition it writes to
		// has been read once before the clock starts.
		for j := range perTick {
			produce(b, shards[i].cl, benchBatch(b, fmt.Sprintf("lag-s%d-e%d", i, j), 1, 1))
		}
		shards[i].k = startShard(b, brokers, topic)
		shards[i].k.s.applied = func(m *kafka.Message) {
			d := time.Since(m.Time)
			mu.Lock()
			lags = append(lags, d)
			mu.Unlock()
		}
		shards[i].stop = runBG(b, shards[i].k.Run)
	}
	for _, s := range shards {
		waitFor(b, 30*time.Second, "warm-up records", func() bool { return sumOffsets(s.k.Offsets()) >= perTick })
	}
	mu.Lock()
	lags = lags[:0]
	mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	var wg sync.WaitGroup
	seq := uint64(1)
	for range ticks {
		<-tick.C
		seq++
		for i, s := range shards {
			for j := range perTick {
				r := benchBatch(b, fmt.Sprintf("lag-s%d-e%d", i, j), seq, eventsPer)
				wg.Add(1)
				s.cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						b.Error(err)
					}
				})
			}
		}
	}
	tick.Stop()
	wg.Wait()
	want := n * ticks * perTick
	waitFor(b, 60*time.Second, "all applied", func() bool { mu.Lock(); defer mu.Unlock(); return len(lags) >= want })
	for _, s := range shards {
		s.stop()
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64(lags[len(lags)-1].Microseconds())/1000, "lag-max-ms")
}
