// Package configtest is the one contract test suite every [config.Store]
// passes: the file store and the Postgres store run the same cases and must
// give the same results and the same errors.
package configtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/config"
)

// Documents the suite writes. Each is valid and distinct from the others.
const (
	docOne   = "buckets:\n  - id: one\n    groups: {plain: {}}\n"
	docTwo   = "buckets:\n  - id: two\n    limits: {min: 0, max: 4096}\n    groups: {plain: {worker_ids: [a1]}}\n  - id: three\n    rank: 2\n    groups: {plain: {}}\nworkers:\n  - {id: a1, url: \"http://a1.test:8000\", models: [chat], role: plain, kv_events_endpoint: \"tcp://a1.test:5557\", kv_replay_endpoint: \"tcp://a1.test:5558\", metrics_url: \"http://a1.test:8000/metrics\", dp_size: 2, lora_adapters: [chat-sql]}\nttft_slo: {enabled: true, max_target_ms: 30000}\nshards:\n  - {id: s1, models: [chat], deciders: [\"d1.test:7070\"]}\n"
	docThree = "buckets:\n  - id: three\n    groups:\n      pd:\n        prefill: {policy: {type: cache_aware}}\n        decode: {policy: {type: power_of_two, admission: {max_running_requests: 8}}}\n"
)

// Run runs the contract against stores made by newStore. Each call must
// return a fresh, empty-history store holding one valid version (whatever
// its number), writable, and clean itself up through t.Cleanup. Run does
// not call the store's Run method; the store must publish its own writes
// without it.
func Run(t *testing.T, newStore func(t *testing.T) config.Store) {
	t.Run("Initial", func(t *testing.T) { testInitial(t, newStore(t)) })
	t.Run("ApplyPublishes", func(t *testing.T) { testApplyPublishes(t, newStore(t)) })
	t.Run("StaleBaseConflicts", func(t *testing.T) { testConflict(t, newStore(t)) })
	t.Run("InvalidStoresNothing", func(t *testing.T) { testInvalid(t, newStore(t)) })
	t.Run("EmptyDocumentStoresNothing", func(t *testing.T) { testEmpty(t, newStore(t)) })
	t.Run("VersionLog", func(t *testing.T) { testVersionLog(t, newStore(t)) })
	t.Run("Rollback", func(t *testing.T) { testRollback(t, newStore(t)) })
	t.Run("ConcurrentWritersOneWins", func(t *testing.T) { testConcurrent(t, newStore(t)) })
	t.Run("SnapshotsAreNotShared", func(t *testing.T) { testNotShared(t, newStore(t)) })
}

func parse(t *testing.T, text string) *config.Document {
	t.Helper()
	d, err := config.Parse([]byte(text), config.FormatYAML)
	if err != nil {
		t.Fatalf("Parse fixture: %v", err)
	}
	return d
}

func ctxAs(author string) context.Context {
	return config.WithAuthor(context.Background(), author)
}

func encode(t *testing.T, d *config.Document) string {
	t.Helper()
	b, err := config.Marshal(d, config.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func firstBucket(s config.Snapshot) string { return s.Document.EffectiveBuckets()[0].ID }

func testInitial(t *testing.T, s config.Store) {
	cur := s.Current()
	if cur.Version < 1 || cur.Document == nil || cur.LoadedAt.IsZero() {
		t.Fatalf("Current() = %+v, want a version >= 1 with a document and a load time", cur)
	}
	if err := cur.Document.Validate(); err != nil {
		t.Errorf("initial document invalid: %v", err)
	}
	vs, err := s.Versions(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 || vs[0].Version != cur.Version {
		t.Errorf("Versions() = %+v, want the current version %d first", vs, cur.Version)
	}
}

func testApplyPublishes(t *testing.T, s config.Store) {
	ch, unsubscribe := s.Subscribe()
	defer unsubscribe()
	base := s.Current().Version
	snap, err := s.Apply(ctxAs("alice"), parse(t, docTwo), base)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if snap.Version != base+1 || firstBucket(snap) != "two" {
		t.Errorf("Apply() = version %d bucket %q, want version %d bucket two", snap.Version, firstBucket(snap), base+1)
	}
	if cur := s.Current(); cur.Version != snap.Version || encode(t, cur.Document) != encode(t, parse(t, docTwo)) {
		t.Errorf("Current() after Apply = version %d\n%s\nwant version %d with the applied document", cur.Version, encode(t, cur.Document), snap.Version)
	}
	select {
	case got := <-ch:
		if got.Version != snap.Version {
			t.Errorf("subscriber got version %d, want %d", got.Version, snap.Version)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("subscriber got nothing within 5s of Apply")
	}
	unsubscribe()
	unsubscribe() // safe twice
}

func testConflict(t *testing.T, s config.Store) {
	base := s.Current().Version
	if _, err := s.Apply(ctxAs("alice"), parse(t, docTwo), base); err != nil {
		t.Fatal(err)
	}
	_, err := s.Apply(ctxAs("bob"), parse(t, docThree), base)
	var ce *config.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, config.ErrConflict) {
		t.Fatalf("Apply on stale base = %v, want a *ConflictError matching ErrConflict", err)
	}
	if ce.Current != base+1 {
		t.Errorf("ConflictError.Current = %d, want %d", ce.Current, base+1)
	}
	if _, err := s.Apply(ctxAs("bob"), parse(t, docThree), base+7); !errors.As(err, &ce) {
		t.Errorf("Apply on a future base = %v, want a *ConflictError", err)
	}
	if cur := s.Current(); cur.Version != base+1 || firstBucket(cur) != "two" {
		t.Errorf("Current() = version %d bucket %s, want the first write (version %d, two) kept", cur.Version, firstBucket(cur), base+1)
	}
}

// testEmpty: an empty document (an empty request body, {}, a misspelled field) is refused, so
// a mistake never replaces the whole configuration.
func testEmpty(t *testing.T, s config.Store) {
	before := s.Current()
	for _, doc := range []*config.Document{{}, parse(t, "{}"), parse(t, "# comments only\n")} {
		_, err := s.Apply(ctxAs("mallory"), doc, before.Version)
		var ve *config.ValidationError
		if !errors.Is(err, config.ErrEmptyDocument) || !errors.As(err, &ve) {
			t.Errorf("Apply(empty document) = %v, want a *ValidationError matching ErrEmptyDocument", err)
		}
	}
	if cur := s.Current(); cur.Version != before.Version {
		t.Errorf("Current().Version = %d after refused empty writes, want %d", cur.Version, before.Version)
	}
	vs, err := s.Versions(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 || vs[0].Version != before.Version {
		t.Errorf("Versions() = %+v after refused empty writes, want version %d newest", vs, before.Version)
	}
}

func testInvalid(t *testing.T, s config.Store) {
	before := s.Current()
	vsBefore, err := s.Versions(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := parse(t, docTwo)
	bad.Buckets = append(bad.Buckets, bad.Buckets[0].Clone()) // duplicate id
	lo, hi := int64(100), int64(10)
	bad.Buckets[1].Limits.Min, bad.Buckets[1].Limits.Max = lo, &hi // inverted range
	_, err = s.Apply(ctxAs("mallory"), bad, before.Version)
	var ve *config.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Apply(invalid) = %v, want a *ValidationError", err)
	}
	paths := map[string]bool{}
	for _, p := range ve.Problems {
		paths[p.Path] = true
	}
	for _, want := range []string{"buckets[2].id", "buckets[1].limits"} {
		if !paths[want] && !hasPrefixIn(paths, want) {
			t.Errorf("problems %v: none at %s", ve.Problems, want)
		}
	}
	if cur := s.Current(); cur.Version != before.Version {
		t.Errorf("Current().Version = %d after a refused write, want %d", cur.Version, before.Version)
	}
	vsAfter, err := s.Versions(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(vsAfter) != len(vsBefore) {
		t.Errorf("version log grew from %d to %d entries on a refused write", len(vsBefore), len(vsAfter))
	}
	if _, err := s.Apply(ctxAs("x"), nil, before.Version); err == nil {
		t.Error("Apply(nil) succeeded, want an error")
	}
}

func hasPrefixIn(paths map[string]bool, prefix string) bool {
	for p := range paths {
		if len(p) >= len(prefix) && p[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

func testVersionLog(t *testing.T, s config.Store) {
	ctx := context.Background()
	v0 := s.Current().Version
	s2, err := s.Apply(ctxAs("alice"), parse(t, docTwo), v0)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := s.Apply(ctxAs("bob"), parse(t, docThree), s2.Version)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := s.Versions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) < 3 {
		t.Fatalf("Versions() = %+v, want at least 3 entries", vs)
	}
	got := []int64{vs[0].Version, vs[1].Version, vs[2].Version}
	if diff := cmp.Diff([]int64{s3.Version, s2.Version, v0}, got); diff != "" {
		t.Errorf("Versions() order mismatch (-want +got):\n%s", diff)
	}
	if vs[0].Author != "bob" || vs[1].Author != "alice" {
		t.Errorf("authors = %q, %q; want bob, alice", vs[0].Author, vs[1].Author)
	}
	if vs[0].Summary == "" || vs[0].CreatedAt.IsZero() {
		t.Errorf("newest entry %+v lacks a summary or a time", vs[0])
	}
	if vs[0].Summary != "buckets: ~three -two; workers: -a1; ttft_slo changed; shards changed" {
		t.Errorf("summary of version %d = %q, want %q", vs[0].Version, vs[0].Summary, "buckets: ~three -two; workers: -a1; ttft_slo changed; shards changed")
	}
	limited, err := s.Versions(ctx, 1)
	if err != nil || len(limited) != 1 || limited[0].Version != s3.Version {
		t.Errorf("Versions(limit 1) = %+v, %v; want only version %d", limited, err, s3.Version)
	}
	rev, err := s.Version(ctx, s2.Version)
	if err != nil {
		t.Fatal(err)
	}
	if rev.Version != s2.Version || rev.Author != "alice" || encode(t, rev.Document) != encode(t, parse(t, docTwo)) {
		t.Errorf("Version(%d) = %+v\n%s\nwant alice's document", s2.Version, rev.VersionInfo, encode(t, rev.Document))
	}
	if _, err := s.Version(ctx, s3.Version+100); !errors.Is(err, config.ErrVersionNotFound) {
		t.Errorf("Version(missing) = %v, want ErrVersionNotFound", err)
	}
}

func testRollback(t *testing.T, s config.Store) {
	ctx := context.Background()
	v0 := s.Current()
	s2, err := s.Apply(ctxAs("alice"), parse(t, docTwo), v0.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rollback(ctxAs("bob"), v0.Version, v0.Version); !errors.Is(err, config.ErrConflict) {
		t.Errorf("Rollback on a stale base = %v, want ErrConflict", err)
	}
	if _, err := s.Rollback(ctxAs("bob"), s2.Version+50, s2.Version); !errors.Is(err, config.ErrVersionNotFound) {
		t.Errorf("Rollback to a missing version = %v, want ErrVersionNotFound", err)
	}
	rb, err := s.Rollback(ctxAs("bob"), v0.Version, s2.Version)
	if err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if rb.Version != s2.Version+1 || encode(t, rb.Document) != encode(t, v0.Document) {
		t.Errorf("Rollback() = version %d\n%s\nwant version %d with version %d's document", rb.Version, encode(t, rb.Document), s2.Version+1, v0.Version)
	}
	if cur := s.Current(); cur.Version != rb.Version {
		t.Errorf("Current().Version = %d, want %d", cur.Version, rb.Version)
	}
	vs, err := s.Versions(ctx, 1)
	if err != nil || len(vs) != 1 || vs[0].RollbackOf != v0.Version || vs[0].Author != "bob" {
		t.Errorf("newest version = %+v, %v; want a rollback of %d by bob", vs, err, v0.Version)
	}
}

func testConcurrent(t *testing.T, s config.Store) {
	base := s.Current().Version
	docs := []string{docOne, docTwo, docThree, docOne, docTwo, docThree}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      int
		conflict int
	)
	for i, text := range docs {
		doc := parse(t, text)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Apply(ctxAs("writer"), doc, base)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, config.ErrConflict):
				conflict++
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || conflict != len(docs)-1 {
		t.Errorf("%d writers on version %d: %d won, %d conflicted; want exactly one winner", len(docs), base, won, conflict)
	}
	if v := s.Current().Version; v != base+1 {
		t.Errorf("Current().Version = %d, want %d", v, base+1)
	}
}

func testNotShared(t *testing.T, s config.Store) {
	doc := parse(t, docTwo)
	snap, err := s.Apply(ctxAs("alice"), doc, s.Current().Version)
	if err != nil {
		t.Fatal(err)
	}
	doc.Buckets[0].ID = "changed-by-caller"
	if got := firstBucket(s.Current()); got != "two" {
		t.Errorf("store shares the caller's document: first bucket now %q", got)
	}
	if firstBucket(snap) != "two" {
		t.Errorf("returned snapshot shares the caller's document")
	}
}
