package ingest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// blockingFile is a snapshot file whose first Write waits for release after
// closing entered: it holds a snapshot write in the middle of the file for
// as long as a test needs.
type blockingFile struct {
	snapFile
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (f *blockingFile) Write(p []byte) (int, error) {
	f.once.Do(func() {
		close(f.entered)
		<-f.release
	})
	return f.snapFile.Write(p)
}

// lookupByID answers a lookup with engine ids instead of slots, so that
// indexes with different slot tables compare.
func lookupByID(ix *kvindex.Index, st *slots.Table, q []uint32) map[string]int {
	out := map[string]int{}
	for _, m := range ix.Lookup(bigNS, q, nil) {
		out[st.ID(m.Engine)] = m.Blocks
	}
	return out
}

// indexOn returns ix rebuilt with its engines interned in st: kvindex digests
// identify holders by slot, so this is how indexes of two processes compare.
func indexOn(t *testing.T, ix KVIndex, from, st *slots.Table) *kvindex.Index {
	t.Helper()
	var buf bytes.Buffer
	if err := ix.WriteSnapshot(&buf, from); err != nil {
		t.Fatal(err)
	}
	out, err := kvindex.ReadSnapshot(&buf, kvindex.Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSnapshotWriteDoesNotPauseIngestion holds a snapshot write in the middle
// of writing its file (the KV index section is larger than the writer's
// buffer, so the file is written while the section is) and checks that
// records keep applying meanwhile. Before the index was copied, the stream's
// lock was held for the whole section, so no record could apply until the
// write finished. The snapshot must still be the state at the moment of the
// copy: restored, it has the same offsets, digest and lookup answers as the
// index had then, and after consuming the tail it equals the live index.
func TestSnapshotWriteDoesNotPauseIngestion(t *testing.T) {
	topic := topicName(t, "kv")
	brokers := devBroker(t, topic)
	dir := t.TempDir()
	a := newPairIndex(t, brokers, "unused-load", topic, dir, true)
	a.snap.load = nil
	live := a.kv.Index().(*kvindex.Index)
	const prompts, blocks = 128, 256 // 32k blocks, a KV section of a few MB
	fillIndex(t, live, a.slots, prompts, blocks)
	kp := producer(t, brokers, topic)
	w := newWorkload(t, 4, 2, 7)
	produce(t, kp, w.records(300)...)
	var appliedN atomic.Int64
	a.kv.s.applied = func(*kafka.Message) { appliedN.Add(1) }
	runBG(t, a.kv.Run)
	waitFor(t, 30*time.Second, "first records applied", func() bool { return sumOffsets(a.kv.Offsets()) == 300 })

	// The state the snapshot must hold (the stream is idle: all applied).
	copyNames := slots.NewTable()
	atCopy := indexOn(t, live, a.slots, copyNames)
	wantOffsets := a.kv.Offsets()
	queries := [][]uint32{bigPrompt(0, blocks), bigPrompt(prompts-1, blocks/2), bigPrompt(prompts/2, 3)}
	var wantAnswers []map[string]int
	for _, q := range queries {
		wantAnswers = append(wantAnswers, lookupByID(live, a.slots, q))
	}

	entered, release := make(chan struct{}), make(chan struct{})
	a.snap.create = func(dir string) (snapFile, error) {
		f, err := createTemp(dir)
		if err != nil {
			return nil, err
		}
		return &blockingFile{snapFile: f, entered: entered, release: release}, nil
	}
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // runs before the stream stops, so a failed test does not hang
	type result struct {
		path string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		path, err := a.snap.Write()
		done <- result{path, err}
	}()
	<-entered
	produce(t, kp, w.records(100)...)
	// Counted after each apply, outside the stream's lock, which Write may
	// hold (Offsets would wait for it).
	waitFor(t, 30*time.Second, "records applied while the snapshot file is being written", func() bool {
		return appliedN.Load() == 400
	})
	releaseOnce()
	r := <-done
	if r.err != nil {
		t.Fatalf("Write: %v", r.err)
	}

	b := newPairIndex(t, brokers, "unused-load", topic, dir, true)
	b.snap.load = nil
	info, err := b.snap.Restore()
	if err != nil || info.Path != r.path {
		t.Fatalf("Restore = %+v, %v; want %s", info, err, r.path)
	}
	restored := b.kv.Index().(*kvindex.Index)
	if diff := cmp.Diff(wantOffsets, b.kv.Offsets()); diff != "" {
		t.Errorf("restored offsets mismatch (-at copy +restored):\n%s", diff)
	}
	if got, want := restored.Digest(), indexOn(t, atCopy, copyNames, b.slots).Digest(); got != want {
		t.Errorf("restored Digest() %x, want %x (the index when it was copied)", got, want)
	}
	for i, q := range queries {
		if diff := cmp.Diff(wantAnswers[i], lookupByID(restored, b.slots, q)); diff != "" {
			t.Errorf("restored Lookup(query %d) mismatch (-at copy +restored):\n%s", i, diff)
		}
	}

	runBG(t, b.kv.Run)
	waitFor(t, 30*time.Second, "tail consumed after restore", func() bool { return sumOffsets(b.kv.Offsets()) == 400 })
	if got, want := restored.Digest(), indexOn(t, live, a.slots, b.slots).Digest(); got != want {
		t.Errorf("restored+tail Digest() %x, live index %x", got, want)
	}
	if diff := cmp.Diff(a.kv.holders, b.kv.holders); diff != "" {
		t.Errorf("restored+tail holders mismatch (-live +restored):\n%s", diff)
	}
}

// TestSnapshotSkippedWhenUnchanged: a Write with nothing applied (and no
// engine removed) since the last snapshot written or restored writes no file
// and is counted; shutdown writes only when something changed.
func TestSnapshotSkippedWhenUnchanged(t *testing.T) {
	loadTopic, kvTopic := topicName(t, "load"), topicName(t, "kv")
	brokers := devBroker(t, loadTopic, kvTopic)
	dir := t.TempDir()
	a := newPair(t, brokers, loadTopic, kvTopic, dir)
	runBG(t, a.load.Run)
	runBG(t, a.kv.Run)
	kp := producer(t, brokers, kvTopic)
	w := newWorkload(t, 4, 2, 7)
	applied := 0
	apply := func(n int) {
		t.Helper()
		produce(t, kp, w.records(n)...)
		applied += n
		waitFor(t, 30*time.Second, "records applied", func() bool { return sumOffsets(a.kv.Offsets()) == int64(applied) })
	}
	write := func(s *Snapshotter) string {
		t.Helper()
		path, err := s.Write()
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	check := func(step string, s *Snapshotter, written, skipped float64, files int) {
		t.Helper()
		if got := testutil.ToFloat64(s.written); got != written {
			t.Errorf("%s: written = %v, want %v", step, got, written)
		}
		if got := testutil.ToFloat64(s.skipped); got != skipped {
			t.Errorf("%s: skipped = %v, want %v", step, got, skipped)
		}
		if got, _ := s.files(); len(got) != files {
			t.Errorf("%s: files %v, want %d", step, got, files)
		}
	}

	apply(50)
	first := write(a.snap)
	check("first", a.snap, 1, 0, 1)
	if got := write(a.snap); got != first {
		t.Errorf("unchanged Write = %s, want the last snapshot %s", got, first)
	}
	check("unchanged", a.snap, 1, 1, 1)

	apply(1)
	second := write(a.snap)
	if second == first {
		t.Errorf("Write after a record = %s, the previous snapshot", second)
	}
	check("after a record", a.snap, 2, 1, 2)

	a.kv.RemoveEngine("engine-01") // changes the index without a record
	write(a.snap)
	check("after RemoveEngine", a.snap, 3, 1, 2)

	// Shutdown with nothing new: no file.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.snap.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	check("shutdown unchanged", a.snap, 3, 2, 2)
	// Shutdown after a record: a file.
	apply(1)
	if err := a.snap.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	check("shutdown changed", a.snap, 4, 2, 2)

	// A restored process has nothing new to write until a record applies.
	b := newPair(t, brokers, loadTopic, kvTopic, dir)
	info, err := b.snap.Restore()
	if err != nil || info.Path == "" {
		t.Fatalf("Restore = %+v, %v", info, err)
	}
	if got := write(b.snap); got != info.Path {
		t.Errorf("Write after Restore = %s, want the restored %s", got, info.Path)
	}
	check("after restore", b.snap, 0, 1, 2)
	files, _ := b.snap.files()
	if !slices.Contains(files, info.Path) {
		t.Errorf("files %v lost the restored %s", files, info.Path)
	}
	if _, err := os.Stat(info.Path); err != nil {
		t.Error(err)
	}
}
