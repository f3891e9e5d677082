package ingest

import (
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// bigIndex returns a kvindex of prompts×blocks blocks (see fillIndex).
func bigIndex(tb testing.TB, st *slots.Table, prompts, blocks int) *kvindex.Index {
	tb.Helper()
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	fillIndex(tb, ix, st, prompts, blocks)
	return ix
}

// bigNS is the namespace fillIndex stores in.
var bigNS = Namespace{Model: "m"}

// bigPrompt returns the tokens of fillIndex's prompt p.
func bigPrompt(p, blocks int) []uint32 {
	toks := make([]uint32, blocks*16)
	for i := range toks {
		toks[i] = uint32(p)*uint32(len(toks)) + uint32(i)
	}
	return toks
}

// fillIndex stores prompts prompts of blocks 16-token blocks in ix, by
// direct Store calls (fast), prompt p held by engine "big-engine-<p%64>"
// (interned in st).
func fillIndex(tb testing.TB, ix *kvindex.Index, st *slots.Table, prompts, blocks int) {
	tb.Helper()
	engines := make([]slots.Slot, 64)
	for e := range engines {
		engines[e] = st.Intern("big-engine-" + string(rune('a'+e%26)) + string(rune('a'+e/26)))
	}
	hashes := make([]uint64, blocks)
	for p := range prompts {
		for i := range hashes {
			hashes[i] = uint64(p)<<20 | uint64(i)
		}
		ev := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: bigPrompt(p, blocks), BlockSize: 16}
		if err := ix.Store(Holder{Engine: engines[p%64]}, bigNS, ev); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkSnapshotStall measures how long KV ingestion stalls while a
// snapshot of a 1M-block index is written: one goroutine applies records
// (one BlockStored block each) back to back through the stream's handle
// path, as the partition readers do, while Snapshotter.Write runs; it
// reports the largest and the 99th-percentile gap between two consecutive
// applies during the writes, the records applied per write, and the write
// time, and the mean time the stream's lock was held for the copy
// (sluice_ingest_snapshot_pause_seconds). Needs no broker. A gap includes the scheduler's and the GC's share
// of the two goroutines' time, not only the stream's pause.
func BenchmarkSnapshotStall(b *testing.B) {
	for _, prompts := range []int{128, 2048} { // 64k blocks (a snapshot of a few MB) and 1M
		b.Run("blocks="+strconv.Itoa(prompts*512), func(b *testing.B) { benchSnapshotStall(b, prompts) })
	}
}

func benchSnapshotStall(b *testing.B, prompts int) {
	st := slots.NewTable()
	ix := bigIndex(b, st, prompts, 512)
	reg := prometheus.NewRegistry()
	k, err := NewKVIngester(testLogger(b), KVConfig{Config: fastConfig([]string{"127.0.0.1:1"}, "bench.kv")}, ix, st, reg)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := NewSnapshotter(testLogger(b), SnapshotConfig{Dir: b.TempDir(), Interval: time.Hour}, nil, k, KVIndexReader(kvindex.Config{}, st), reg)
	if err != nil {
		b.Fatal(err)
	}
	// Records to apply, pre-encoded; seqs continue per engine so every one
	// applies (and stores a new block).
	const engines, recs = 16, 1 << 17
	msgs := make([]kafka.Message, recs)
	for i := range msgs {
		r := benchBatch(b, "live-engine-"+string(rune('a'+i%engines)), uint64(i/engines+1), 1)
		msgs[i] = kafka.Message{Partition: 0, Offset: int64(i), Key: r.Key, Value: r.Value}
	}
	lag := k.s.m.lag.WithLabelValues("0")

	var (
		stop    atomic.Bool
		writing atomic.Int32 // the write under way, from 1; 0 between writes
		next    int
	)
	var gaps []time.Duration              // gaps that end during a write
	perWrite := map[int32]time.Duration{} // largest gap per write
	applied := 0                          // records applied during writes
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		for !stop.Load() {
			if next == len(msgs) {
				next = 0 // wrap: later records are duplicates, still handled under the lock
				for i := range msgs {
					msgs[i].Offset += recs
				}
			}
			k.s.handle(0, &msgs[next], lag)
			next++
			now := time.Now()
			if w := writing.Load(); w != 0 {
				g := now.Sub(last)
				gaps = append(gaps, g)
				perWrite[w] = max(perWrite[w], g)
				applied++
			}
			last = now
		}
	}()
	var writeTime time.Duration
	var size int64
	// One write first, not measured: the steady state (a snapshot every
	// interval) writes from the previous snapshot's copy, which only the
	// first snapshot after start lacks.
	if _, err := snap.Write(); err != nil {
		b.Fatal(err)
	}
	warmSum, warmN := pauseTotal(reg)
	time.Sleep(20 * time.Millisecond)
	b.ResetTimer()
	for i := int32(1); b.Loop(); i++ {
		writing.Store(i)
		t0 := time.Now()
		path, err := snap.Write()
		if err != nil {
			b.Fatal(err)
		}
		writeTime += time.Since(t0)
		if fi, err := os.Stat(path); err == nil {
			size = fi.Size()
		}
		writing.Store(0)
		time.Sleep(20 * time.Millisecond) // let ingestion run between writes
	}
	b.StopTimer()
	stop.Store(true)
	<-done
	if len(gaps) == 0 {
		b.Fatal("no record applied during any write")
	}
	slices.Sort(gaps)
	n := float64(b.N)
	var stall time.Duration
	for _, g := range perWrite {
		stall += g
	}
	b.ReportMetric(stall.Seconds()*1000/float64(len(perWrite)), "stall-ms/write")
	b.ReportMetric(float64(gaps[len(gaps)-1].Microseconds())/1000, "max-gap-ms")
	b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds())/1000, "p99-gap-ms")
	b.ReportMetric(float64(applied)/n, "applies/write")
	b.ReportMetric(writeTime.Seconds()*1000/n, "write-ms")
	b.ReportMetric(float64(ix.Stats().Nodes), "blocks")
	b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
	if sum, n := pauseTotal(reg); n > warmN {
		b.ReportMetric((sum-warmSum)*1000/float64(n-warmN), "pause-ms/write")
	}
}

// pauseTotal returns the sum and count of sluice_ingest_snapshot_pause_seconds
// in reg (0, 0 without it).
func pauseTotal(reg *prometheus.Registry) (float64, uint64) {
	m, _ := reg.Gather()
	for _, f := range m {
		if f.GetName() == "sluice_ingest_snapshot_pause_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount()
		}
	}
	return 0, 0
}
