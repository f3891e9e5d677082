package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	storeV1  = "buckets:\n  - id: one\n    groups: {plain: {}}\n"
	storeV2  = "buckets:\n  - id: two\n    groups: {plain: {}}\n"
	storeV3  = "buckets:\n  - id: three\n    groups: {plain: {}}\n"
	storeBad = "buckets:\n  - id: bad id\n    fuse: 1\n"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestStore(t *testing.T, content string) (*FileStore, string, *syncBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	s, err := NewFileStore(slog.New(slog.NewTextHandler(logs, nil)), path, FileStoreConfig{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewFileStore: %v", err)
	}
	return s, path, logs
}

// writeFile replaces the file's content and moves its mtime forward so the
// change is visible whatever the file system's timestamp resolution.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Duration(len(content)) * time.Second)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
}

func bucketID(s Snapshot) string { return s.Document.EffectiveBuckets()[0].ID }

func TestFileStoreLoad(t *testing.T) {
	s, path, _ := newTestStore(t, storeV1)
	cur := s.Current()
	if cur.Version != 1 || cur.Source != path || bucketID(cur) != "one" || cur.LoadedAt.IsZero() {
		t.Errorf("Current() = %+v, want version 1 of %s with bucket one", cur, path)
	}
}

func TestNewFileStoreErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(storeBad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := NewFileStore(nil, bad, FileStoreConfig{})
	want := []Problem{
		{"buckets[0].id", "must use only letters, digits, '.', '_' and '-' (line 2)"},
		{"buckets[0].groups", "required; set exactly one of plain or pd (line 2)"},
		{"buckets[0].fuse", "removed; use cache_aware (prefix reuse) or power_of_two (load) (line 3)"},
	}
	if diff := cmp.Diff(want, problemsOf(t, err)); diff != "" {
		t.Errorf("NewFileStore(invalid) problems mismatch (-want +got):\n%s", diff)
	}
	if _, err := NewFileStore(nil, filepath.Join(dir, "missing.yaml"), FileStoreConfig{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewFileStore(missing) = %v, want ErrNotExist", err)
	}
	if _, err := NewFileStore(nil, "", FileStoreConfig{PollInterval: -1}); err == nil {
		t.Errorf("NewFileStore(negative poll) succeeded")
	}
}

func TestFileStoreDefaults(t *testing.T) {
	s, err := NewFileStore(nil, "", FileStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cur := s.Current()
	if cur.Version != 1 || cur.Source != sourceDefaults {
		t.Errorf("Current() = %+v, want version 1 from defaults", cur)
	}
	if diff := cmp.Diff(DefaultBuckets(), cur.Document.EffectiveBuckets()); diff != "" {
		t.Errorf("buckets mismatch (-want +got):\n%s", diff)
	}
	if _, err := s.Apply(context.Background(), &Document{}, 1); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Apply() on a store without a file = %v, want ErrReadOnly", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run() = %v, want nil after cancel", err)
	}
}

func TestFileStoreReload(t *testing.T) {
	s, path, logs := newTestStore(t, storeV1)
	updates, unsubscribe := s.Subscribe()
	defer unsubscribe()

	writeFile(t, path, storeV2)
	s.check()
	got := <-updates
	if got.Version != 2 || bucketID(got) != "two" {
		t.Fatalf("after reload got version %d bucket %q, want 2 two", got.Version, bucketID(got))
	}
	if diff := cmp.Diff(got, s.Current()); diff != "" {
		t.Errorf("Current() differs from the published snapshot (-published +current):\n%s", diff)
	}

	// Same content with a new mtime, or only a comment added: no new version.
	writeFile(t, path, storeV2)
	s.check()
	writeFile(t, path, "# a comment\n"+storeV2)
	s.check()
	if v := s.Current().Version; v != 2 {
		t.Errorf("unchanged document bumped the version to %d", v)
	}
	select {
	case extra := <-updates:
		t.Errorf("unchanged document published snapshot %d", extra.Version)
	default:
	}

	// Invalid content: old version stays, one ERROR per distinct content.
	before := s.Current()
	writeFile(t, path, storeBad)
	s.check()
	s.check()
	writeFile(t, path, storeBad+"# still bad\n")
	s.check()
	if diff := cmp.Diff(before, s.Current()); diff != "" {
		t.Errorf("invalid reload replaced the snapshot (-before +after):\n%s", diff)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 {
		t.Errorf("logged %d errors for 2 distinct invalid contents, want 2:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "buckets[0].fuse: removed") {
		t.Errorf("error log does not list the problems:\n%s", logs)
	}

	// Removed file: keep serving, log once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.check()
	s.check()
	if diff := cmp.Diff(before, s.Current()); diff != "" {
		t.Errorf("removing the file replaced the snapshot (-before +after):\n%s", diff)
	}
	if n := strings.Count(logs.String(), "configuration file removed"); n != 1 {
		t.Errorf("logged removal %d times, want 1", n)
	}

	// Back with valid content: next version.
	writeFile(t, path, storeV3)
	s.check()
	if cur := s.Current(); cur.Version != before.Version+1 || bucketID(cur) != "three" {
		t.Errorf("after restore got version %d bucket %q, want %d three", cur.Version, bucketID(cur), before.Version+1)
	}
}

func TestFileStoreRun(t *testing.T) {
	s, path, _ := newTestStore(t, storeV1)
	updates, unsubscribe := s.Subscribe()
	defer unsubscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	writeFile(t, path, storeV2)
	select {
	case got := <-updates:
		if got.Version != 2 || bucketID(got) != "two" {
			t.Errorf("Run published version %d bucket %q, want 2 two", got.Version, bucketID(got))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not publish the changed file")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func TestFileStoreSubscribeLatestWins(t *testing.T) {
	s, path, _ := newTestStore(t, storeV1)
	updates, unsubscribe := s.Subscribe()
	for _, c := range []string{storeV2, storeV3} {
		writeFile(t, path, c)
		s.check()
	}
	if got := <-updates; got.Version != 3 || bucketID(got) != "three" {
		t.Errorf("slow subscriber got version %d, want only the latest (3)", got.Version)
	}
	select {
	case extra := <-updates:
		t.Errorf("got a second snapshot %d, want only the latest", extra.Version)
	default:
	}
	unsubscribe()
	unsubscribe() // idempotent
	if _, ok := <-updates; ok {
		t.Errorf("channel still open after unsubscribe")
	}
	writeFile(t, path, storeV1)
	s.check() // must not send on the closed channel
}

func TestFileStoreApply(t *testing.T) {
	ctx := context.Background()
	s, path, _ := newTestStore(t, storeV1)
	updates, unsubscribe := s.Subscribe()
	defer unsubscribe()

	doc := s.Current().Document.Clone()
	doc.Buckets[0].ID = "applied"
	doc.Buckets[0].MaxContextTokens = ptr[int64](4096)
	snap, err := s.Apply(ctx, doc, 1)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if snap.Version != 2 || bucketID(snap) != "applied" {
		t.Errorf("Apply() = version %d bucket %q, want 2 applied", snap.Version, bucketID(snap))
	}
	if got := <-updates; got.Version != 2 {
		t.Errorf("subscriber got version %d, want 2", got.Version)
	}
	// The store keeps its own copy.
	doc.Buckets[0].ID = "mutated"
	if bucketID(s.Current()) != "applied" {
		t.Errorf("mutating the applied document changed the snapshot")
	}
	// The file holds the document, re-parses equal, and keeps its mode.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.Current().Document, mustParse(t, data, FormatYAML)); diff != "" {
		t.Errorf("file content mismatch (-snapshot +file):\n%s", diff)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want 0600 kept", info.Mode().Perm(), err)
	}
	// Polling the file we just wrote is not a new version.
	s.check()
	if v := s.Current().Version; v != 2 {
		t.Errorf("re-reading the applied file bumped the version to %d", v)
	}
	// No temp files left behind (beside the file: itself and its version history).
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 || entries[1].Name() != filepath.Base(historyDirFor(path)) {
		t.Errorf("directory holds %v, want only the config file and its history directory", entries)
	}

	// Stale base version.
	_, err = s.Apply(ctx, doc, 1)
	var conflict *ConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, ErrConflict) || conflict.Current != 2 {
		t.Errorf("Apply(basedOn 1) = %v, want *ConflictError{Current: 2}", err)
	}
	// Invalid document: nothing written.
	bad := doc.Clone()
	bad.Buckets[0].ID = "bad id"
	if _, err := s.Apply(ctx, bad, 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("Apply(invalid) = %v, want ErrInvalid", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(data, after) || s.Current().Version != 2 {
		t.Errorf("a rejected Apply changed the file or the version")
	}
	// Cancelled context: nothing written.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Apply(cctx, doc, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := s.Apply(ctx, nil, 2); err == nil {
		t.Errorf("Apply(nil) succeeded")
	}
}

func TestFileStoreApplyIsAtomic(t *testing.T) {
	s, path, _ := newTestStore(t, storeV1)
	var sawTemp bool
	s.tempHook = func(tmp string) {
		// Before the rename the temp file is complete and beside the
		// target, and the target still holds the old content.
		sawTemp = filepath.Dir(tmp) == filepath.Dir(path)
		if got, _ := os.ReadFile(path); string(got) != storeV1 {
			t.Errorf("target changed before rename: %q", got)
		}
		data, err := os.ReadFile(tmp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data, FormatYAML); err != nil {
			t.Errorf("temp file is not a complete document: %v", err)
		}
	}
	doc := &Document{Buckets: []BucketSpec{{ID: "new", Groups: GroupsSpec{Plain: &GroupSpec{}}}}}
	if _, err := s.Apply(context.Background(), doc, 1); err != nil {
		t.Fatal(err)
	}
	if !sawTemp {
		t.Errorf("Apply did not write through a temp file in the same directory")
	}
}

func TestFileStoreApplyJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.json")
	if err := os.WriteFile(path, []byte(`{"buckets":[{"id":"a","groups":{"plain":{}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := NewFileStore(nil, path, FileStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), mustParse(t, []byte(storeV2), FormatYAML), 1); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if _, err := Parse(data, FormatJSON); err != nil {
		t.Errorf("a .json store wrote content that is not JSON: %v\n%s", err, data)
	}
}

func TestFileStoreConcurrentReaders(t *testing.T) {
	s, _, _ := newTestStore(t, storeV1)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					if s.Current().Document == nil {
						t.Error("nil document")
						return
					}
				}
			}
		})
	}
	for i := range 20 {
		doc := &Document{Buckets: []BucketSpec{{ID: "b", Rank: int64(i), Groups: GroupsSpec{Plain: &GroupSpec{}}}}}
		if _, err := s.Apply(context.Background(), doc, s.Current().Version); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestFileStoreRefusesEmptyDocuments: an empty, comment-only or {} file (a truncated edit,
// /dev/null) and an empty Apply never replace the configuration.
func TestFileStoreRefusesEmptyDocuments(t *testing.T) {
	for _, content := range []string{"", "# nothing yet\n", "~\n", "{}"} {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewFileStore(nil, path, FileStoreConfig{}); !errors.Is(err, ErrEmptyDocument) || !errors.Is(err, ErrInvalid) {
			t.Errorf("NewFileStore(%q) = %v, want ErrEmptyDocument", content, err)
		}
	}
	s, path, logs := newTestStore(t, storeV1)
	writeFile(t, path, "")
	s.check()
	if cur := s.Current(); cur.Version != 1 || bucketID(cur) != "one" {
		t.Errorf("after the file was emptied: version %d bucket %s, want version 1 bucket one kept", cur.Version, bucketID(cur))
	}
	if !strings.Contains(logs.String(), "the document is empty") {
		t.Errorf("emptied file not logged; logs:\n%s", logs)
	}
	writeFile(t, path, storeV1)
	for _, doc := range []*Document{{}, mustParse(t, []byte("{}"), FormatJSON)} {
		_, err := s.Apply(context.Background(), doc, s.Current().Version)
		var ve *ValidationError
		if !errors.Is(err, ErrEmptyDocument) || !errors.As(err, &ve) || len(ve.Problems) != 1 {
			t.Errorf("Apply(empty) = %v, want one ErrEmptyDocument problem", err)
		}
	}
	if cur := s.Current(); cur.Version != 1 || bucketID(cur) != "one" {
		t.Errorf("after refused empty Applies: version %d bucket %s, want version 1 bucket one", cur.Version, bucketID(cur))
	}
}

// TestFileStoreHistorySurvivesRestart: the version log lives on disk beside the file, so a
// restarted store keeps the version numbers and can roll back to versions from before.
func TestFileStoreHistorySurvivesRestart(t *testing.T) {
	ctx := WithAuthor(context.Background(), "admin#1")
	s, path, _ := newTestStore(t, storeV1)
	for _, doc := range []string{storeV2, storeV3} {
		if _, err := s.Apply(ctx, mustParse(t, []byte(doc), FormatYAML), s.Current().Version); err != nil {
			t.Fatal(err)
		}
	}
	restarted, err := NewFileStore(nil, path, FileStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if cur := restarted.Current(); cur.Version != 3 || bucketID(cur) != "three" {
		t.Fatalf("after restart: version %d bucket %s, want version 3 bucket three", cur.Version, bucketID(cur))
	}
	vs, err := restarted.Versions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, fmt.Sprintf("%d %s", v.Version, v.Author))
	}
	if diff := cmp.Diff([]string{"3 admin#1", "2 admin#1", "1 file"}, got); diff != "" {
		t.Errorf("Versions() after restart mismatch (-want +got):\n%s", diff)
	}
	snap, err := restarted.Rollback(ctx, 1, 3)
	if err != nil {
		t.Fatalf("Rollback(1) after restart: %v", err)
	}
	if snap.Version != 4 || bucketID(snap) != "one" {
		t.Errorf("Rollback(1) = version %d bucket %s, want version 4 bucket one", snap.Version, bucketID(snap))
	}
	// Edited while stopped: the file becomes the next version, after the logged ones.
	writeFile(t, path, storeV2)
	again, err := NewFileStore(nil, path, FileStoreConfig{historyLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if cur := again.Current(); cur.Version != 5 || bucketID(cur) != "two" {
		t.Errorf("after an edit while stopped: version %d bucket %s, want version 5 bucket two", cur.Version, bucketID(cur))
	}
	if vs, _ := again.Versions(ctx, 0); len(vs) != 3 || vs[2].Version != 3 {
		t.Errorf("Versions() with HistoryLimit 3 = %+v, want versions 5, 4, 3", vs)
	}
	if _, err := again.Version(ctx, 2); !errors.Is(err, ErrVersionNotFound) {
		t.Errorf("Version(2) after pruning = %v, want ErrVersionNotFound", err)
	}
}

// TestFileStoreRefusesUnservableReloads: a valid edit the consumer cannot serve is kept out of
// the store like an invalid one, so the store never reports a version nobody serves.
func TestFileStoreRefusesUnservableReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(storeV1), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	refuseThree := func(d *Document) error {
		if d.EffectiveBuckets()[0].ID == "three" {
			return errors.New("bucket three needs a KV index")
		}
		return nil
	}
	s, err := NewFileStore(slog.New(slog.NewTextHandler(logs, nil)), path, FileStoreConfig{Serviceable: refuseThree})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, storeV3)
	s.check()
	if cur := s.Current(); cur.Version != 1 || bucketID(cur) != "one" {
		t.Errorf("after an unservable edit: version %d bucket %s, want version 1 bucket one kept", cur.Version, bucketID(cur))
	}
	if !strings.Contains(logs.String(), "needs a KV index") {
		t.Errorf("unservable edit not logged; logs:\n%s", logs)
	}
	if _, err := s.Apply(context.Background(), mustParse(t, []byte(storeV3), FormatYAML), 1); err == nil || !strings.Contains(err.Error(), "KV index") {
		t.Errorf("Apply(unservable) = %v, want the consumer's refusal", err)
	}
	writeFile(t, path, storeV2)
	s.check()
	if cur := s.Current(); cur.Version != 2 || bucketID(cur) != "two" {
		t.Errorf("after a servable edit: version %d bucket %s, want version 2 bucket two", cur.Version, bucketID(cur))
	}
}
