package ingest

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/slots"
)

// pair is a load and a KV ingester with their tables, as one decider has.
type pair struct {
	slots *slots.Table
	table *loadtable.Table
	load  *LoadIngester
	kv    *KVIngester
	snap  *Snapshotter
	reg   *prometheus.Registry
}

func newPair(t testing.TB, brokers []string, loadTopic, kvTopic, dir string) *pair {
	t.Helper()
	return newPairIndex(t, brokers, loadTopic, kvTopic, dir, false)
}

// newPairIndex is newPair with the real state/kvindex when real is set,
// else the map-based fakeIndex.
func newPairIndex(t testing.TB, brokers []string, loadTopic, kvTopic, dir string, real bool) *pair {
	t.Helper()
	p := &pair{slots: slots.NewTable(), reg: prometheus.NewRegistry()}
	var idx KVIndex = newFakeIndex(p.slots)
	read := readFakeIndex(p.slots)
	if real {
		ix, err := kvindex.New(kvindex.Config{})
		if err != nil {
			t.Fatal(err)
		}
		idx, read = ix, KVIndexReader(kvindex.Config{}, p.slots)
	}
	var err error
	if p.table, err = loadtable.New(p.slots, loadtable.Config{}); err != nil {
		t.Fatal(err)
	}
	if p.load, err = NewLoadIngester(testLogger(t), fastConfig(brokers, loadTopic), p.table, nil, p.reg); err != nil {
		t.Fatal(err)
	}
	if p.kv, err = NewKVIngester(testLogger(t), KVConfig{Config: fastConfig(brokers, kvTopic)}, idx, p.slots, p.reg); err != nil {
		t.Fatal(err)
	}
	if p.snap, err = NewSnapshotter(testLogger(t), SnapshotConfig{Dir: dir, Interval: time.Hour}, p.load, p.kv, read, p.reg); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSnapshotRoundTripAndCorruption(t *testing.T) {
	loadTopic, kvTopic := topicName(t, "load"), topicName(t, "kv")
	brokers := devBroker(t, loadTopic, kvTopic)
	dir := t.TempDir()
	a := newPair(t, brokers, loadTopic, kvTopic, dir)
	stopLoad, stopKV := runBG(t, a.load.Run), runBG(t, a.kv.Run)

	kp, lp := producer(t, brokers, kvTopic), producer(t, brokers, loadTopic)
	produce(t, kp, newWorkload(t, 4, 2, 7).records(500)...)
	now := time.Now()
	for i := range 5 {
		produce(t, lp, loadProto(t, &sluicev1.LoadReport{EngineId: "engine-0" + string(rune('0'+i)), Epoch: 3, Seq: 4,
			CapturedAt: timestamppb.New(now), WaitingRequests: int64(i), KvCapacityTokens: 100,
			Native: &sluicev1.NativeLoad{MaxRunningRequests: 5, PrefillUncachedTokensTotal: 10, PrefillBusyMicrosTotal: 20}}))
	}
	waitFor(t, 20*time.Second, "records applied", func() bool {
		return sumOffsets(a.kv.Offsets()) == 500 && sumOffsets(a.load.Offsets()) == 5
	})
	stopLoad()
	stopKV()
	first, err := a.snap.Write()
	if err != nil {
		t.Fatal(err)
	}
	// Nothing applied since: a's snapshotter skips; a new one (a restarted
	// process, its clock a second on) writes a second file of the same state.
	restarted := a.otherSnapshotter(t)
	restarted.now = func() time.Time { return time.Now().Add(time.Second) }
	second, err := restarted.Write()
	if err != nil {
		t.Fatal(err)
	}

	restore := func(t *testing.T) (*pair, RestoreInfo) {
		b := newPair(t, brokers, loadTopic, kvTopic, dir)
		info, err := b.snap.Restore()
		if err != nil {
			t.Fatal(err)
		}
		return b, info
	}
	check := func(t *testing.T, b *pair) {
		if got, want := b.kv.Index().Digest(), a.kv.Index().Digest(); got != want {
			t.Errorf("restored digest %x, want %x", got, want)
		}
		if diff := cmp.Diff(a.kv.Offsets(), b.kv.Offsets()); diff != "" {
			t.Errorf("kv offsets mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(a.load.Offsets(), b.load.Offsets()); diff != "" {
			t.Errorf("load offsets mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(a.kv.holders, b.kv.holders); diff != "" {
			t.Errorf("kv holders mismatch (-want +got):\n%s", diff)
		}
		sa, sb := a.table.SnapshotAt(now), b.table.SnapshotAt(now)
		for _, id := range a.table.Engines() {
			x, _ := a.slots.Lookup(id)
			y, _ := b.slots.Lookup(id)
			va, oka := sa.View(x)
			vb, okb := sb.View(y)
			if oka != okb || !va.CapturedAt.Equal(vb.CapturedAt) || va.Waiting != vb.Waiting || va.Native != vb.Native {
				t.Errorf("engine %s view: got %+v %v, want %+v %v", id, vb, okb, va, oka)
			}
		}
	}
	t.Run("newest", func(t *testing.T) {
		b, info := restore(t)
		if info.Path != second || len(info.Skipped) != 0 {
			t.Errorf("Restore = %+v, want %s with nothing skipped", info, second)
		}
		check(t, b)
	})
	t.Run("corrupt newest falls back", func(t *testing.T) {
		data, err := os.ReadFile(second)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x40
		if err := os.WriteFile(second, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ingest-99999999999999999999.snap"), []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		b, info := restore(t)
		if info.Path != first || len(info.Skipped) != 2 {
			t.Errorf("Restore = %+v, want %s with 2 skipped", info, first)
		}
		if got := testutil.ToFloat64(b.snap.corrupt); got != 2 {
			t.Errorf("corrupt counter = %v, want 2", got)
		}
		check(t, b)
	})
	t.Run("keep", func(t *testing.T) {
		if _, err := a.otherSnapshotter(t).Write(); err != nil {
			t.Fatal(err)
		}
		files, _ := a.snap.files()
		if len(files) != defaultSnapshotKeep {
			t.Errorf("files after write = %v, want %d", files, defaultSnapshotKeep)
		}
	})
}

// otherSnapshotter returns a new snapshotter of p's ingesters and
// directory, with a registry of its own: one that has written nothing yet.
func (p *pair) otherSnapshotter(t testing.TB) *Snapshotter {
	t.Helper()
	s, err := NewSnapshotter(testLogger(t), p.snap.cfg, p.load, p.kv, p.snap.readIndex, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sumOffsets(m map[int]int64) int64 {
	var n int64
	for _, v := range maps.All(m) {
		n += v
	}
	return n
}

// checkRestart ingests a workload, snapshots at an arbitrary point while
// records keep arriving, "kills" the consumer, produces more, restores a new
// consumer from the snapshot, lets it consume the tail, and compares its
// index with one Replay builds from the whole topic.
func checkRestart(t *testing.T, brokers []string, topic string, records int) {
	ctx := context.Background()
	dir := t.TempDir()
	w := newWorkload(t, 6, 2, 42)
	kp := producer(t, brokers, topic)
	produce(t, kp, w.records(records/3)...)

	a := newPairIndex(t, brokers, "unused-load", topic, dir, true)
	a.snap.load = nil
	stop := runBG(t, a.kv.Run)
	waitFor(t, 30*time.Second, "some records applied", func() bool { return sumOffsets(a.kv.Offsets()) >= int64(records/6) })
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, kp, w.records(records/3)...)
	}()
	if _, err := a.snap.Write(); err != nil {
		t.Fatal(err)
	}
	<-produced
	stop() // killed at whatever point it reached
	produce(t, kp, w.records(records-2*(records/3))...)

	b := newPairIndex(t, brokers, "unused-load", topic, dir, true)
	b.snap.load = nil
	info, err := b.snap.Restore()
	if err != nil || info.Path == "" {
		t.Fatalf("Restore = %+v, %v; want a snapshot", info, err)
	}
	runBG(t, b.kv.Run)

	// The reference: the whole topic replayed into a fresh kvindex sharing
	// b's slot table (kvindex digests identify holders by slot).
	sum, err := Replay(ctx, testLogger(t), ReplayConfig{Brokers: brokers, Topic: topic, Stream: StreamKV, Slots: b.slots})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replay:\n%s", sum)
	if sum.Records != int64(records) {
		t.Errorf("Replay read %d records, want %d", sum.Records, records)
	}
	want := map[int]int64{}
	for p, r := range sum.Partitions {
		want[p] = r[1]
	}
	waitFor(t, 60*time.Second, "tail consumed", func() bool {
		got := b.kv.Offsets()
		for p, end := range want {
			if got[p] < end {
				return false
			}
		}
		return true
	})
	if got, want := b.kv.Index().Digest(), sum.Digest; got != want {
		t.Errorf("restored+tail digest %x, replay digest %x", got, want)
	}
	got, ref := b.kv.Index().(*kvindex.Index).Stats(), sum.Index.(*kvindex.Index).Stats()
	if got.Pairs != ref.Pairs || got.Nodes != ref.Nodes || ref.Pairs == 0 {
		t.Errorf("restored+tail index %d blocks / %d pairs, replay %d / %d", got.Nodes, got.Pairs, ref.Nodes, ref.Pairs)
	}
	for _, e := range []string{"engine-00", "engine-03", "engine-05"} {
		if b.kv.Uncertain(e) != sumUncertain(sum, e) {
			t.Errorf("Uncertain(%s) = %v after restore, replay says %v", e, b.kv.Uncertain(e), sumUncertain(sum, e))
		}
	}
	rs := sum.KV
	if rs.Duplicates == 0 || rs.Gaps == 0 || rs.EpochResets == 0 {
		t.Errorf("workload exercised too little: %+v", rs)
	}
}

func sumUncertain(s Summary, engine string) bool { return slices.Contains(s.UncertainEngines, engine) }

func TestRestartMatchesReplayKfake(t *testing.T) {
	topic := topicName(t, "kv")
	checkRestart(t, devBroker(t, topic), topic, 3000)
}
