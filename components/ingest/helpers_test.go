package ingest

import (
	"context"
	"encoding/gob"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/components/kvwire/kvwiretest"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/kafkadev"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// fakeIndex is a hand-written KVIndex: per holder, the set of engine hashes
// held (with namespace). It stands in for state/kvindex in these tests.
type fakeIndex struct {
	mu     sync.Mutex
	ids    *slots.Table
	blocks map[fakeKey]map[uint64]string // holder -> hash -> namespace
}

type fakeKey struct {
	Engine string
	Rank   int32
}

var _ KVIndex = (*fakeIndex)(nil)

func newFakeIndex(ids *slots.Table) *fakeIndex {
	return &fakeIndex{ids: ids, blocks: map[fakeKey]map[uint64]string{}}
}

func (f *fakeIndex) key(h Holder) fakeKey { return fakeKey{f.ids.ID(h.Engine), h.Rank} }

func (f *fakeIndex) Store(h Holder, ns Namespace, ev *kvevents.BlockStored) error {
	if ev.Medium == kvevents.MediumUnknown {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.blocks[f.key(h)]
	if m == nil {
		m = map[uint64]string{}
		f.blocks[f.key(h)] = m
	}
	for _, b := range ev.BlockHashes {
		m[b] = ns.Model + "|" + ns.LoRA + "|" + ns.CacheSalt
	}
	return nil
}

func (f *fakeIndex) Remove(h Holder, ev *kvevents.BlockRemoved) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range ev.BlockHashes {
		delete(f.blocks[f.key(h)], b)
	}
}

func (f *fakeIndex) Clear(h Holder) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blocks, f.key(h))
}

func (f *fakeIndex) RemoveEngine(s slots.Slot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.blocks {
		if k.Engine == f.ids.ID(s) {
			delete(f.blocks, k)
		}
	}
}

func (f *fakeIndex) WriteSnapshot(w io.Writer, _ *slots.Table) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return gob.NewEncoder(w).Encode(f.blocks)
}

// Clone deep-copies the fake, so that snapshots of it are written from a
// copy as they are for state/kvindex.
func (f *fakeIndex) Clone() KVIndex {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := newFakeIndex(f.ids)
	for k, m := range f.blocks {
		c.blocks[k] = maps.Clone(m)
	}
	return c
}

var _ indexCloner = (*fakeIndex)(nil)

func readFakeIndex(ids *slots.Table) IndexReader {
	return func(r io.Reader) (KVIndex, error) {
		f := newFakeIndex(ids)
		if err := gob.NewDecoder(r).Decode(&f.blocks); err != nil {
			return nil, err
		}
		return f, nil
	}
}

var digestSeed = maphash.MakeSeed()

func (f *fakeIndex) Digest() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var d uint64
	for k, m := range f.blocks {
		for b, ns := range m {
			d += maphash.String(digestSeed, fmt.Sprintf("%s/%d/%x/%s", k.Engine, k.Rank, b, ns))
		}
	}
	return d
}

// blocks returns the number of (holder, block) pairs.
func (f *fakeIndex) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.blocks {
		n += len(m)
	}
	return n
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// devBroker starts an in-process kfake broker with topics.
func devBroker(t testing.TB, topics ...string) []string {
	t.Helper()
	b, err := kafkadev.Start(context.Background(), testLogger(t), topics...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// topicName returns a topic name unique to the test.
func topicName(t testing.TB, suffix string) string {
	return fmt.Sprintf("test.%s.%d.%s", sanitize(t.Name()), time.Now().UnixNano(), suffix)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// producer returns a franz-go client producing to brokers.
func producer(t testing.TB, brokers []string, topic string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func kvProto(t testing.TB, b *sluicev1.KvEventBatch, headers ...kgo.RecordHeader) *kgo.Record {
	v, err := proto.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte(b.GetEngineId()), Value: v, Headers: headers}
}

func loadProto(t testing.TB, r *sluicev1.LoadReport) *kgo.Record {
	v, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte(r.GetEngineId()), Value: v}
}

// Batch builders shared with the decoders' tests.
var (
	stored  = kvwiretest.Stored
	removed = kvwiretest.Removed
	cleared = kvwiretest.Cleared
)

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runBG runs fn(ctx) in the background until the test ends; it fails the
// test if fn returns anything but a context error.
func runBG(t testing.TB, fn func(context.Context) error) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// fastConfig returns a consumer config tuned for tests.
func fastConfig(brokers []string, topic string) Config {
	return Config{Brokers: brokers, Topic: topic, MaxWait: 50 * time.Millisecond, PartitionRefresh: 500 * time.Millisecond,
		RetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: time.Second, DialTimeout: 2 * time.Second}
}
