package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testrun"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/config/configtest"
	"github.com/sluicehq/sluice/state/pgstore"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

func schemaDSN(t *testing.T) string { return pgtest.SchemaDSN(t) }

func open(t *testing.T, cfg pgstore.Config) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func seed(t *testing.T) *config.Document {
	t.Helper()
	d, err := config.Parse([]byte("buckets:\n  - id: start\n    groups: {plain: {}}\n"), config.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPostgresStoreContract(t *testing.T) {
	configtest.Run(t, func(t *testing.T) config.Store {
		return open(t, pgstore.Config{DSN: schemaDSN(t), Seed: seed(t)})
	})
}

// runStore runs s.Run until the test ends.
func runStore(t *testing.T, s *pgstore.Store) {
	t.Helper()
	testrun.Background(t, s.Run)
}

func TestReplicasReload(t *testing.T) {
	dsn := schemaDSN(t)
	a := open(t, pgstore.Config{DSN: dsn, Seed: seed(t)})
	b := open(t, pgstore.Config{DSN: dsn, Seed: seed(t)}) // a second seed is a no-op
	if a.Current().Version != 1 || b.Current().Version != 1 {
		t.Fatalf("versions after open = %d, %d; want 1, 1", a.Current().Version, b.Current().Version)
	}
	runStore(t, b)
	ch, unsubscribe := b.Subscribe()
	defer unsubscribe()
	// b reports Connected only once its LISTEN ran (and its catch-up reload), so a's
	// notifications cannot be missed from here on.
	waitFor(t, 5*time.Second, "replica b listening", func() bool { return b.ListenerStats().Connected })
	for i := range 5 {
		doc := seed(t)
		doc.Buckets[0].Rank = int64(i + 1)
		start := time.Now()
		snap, err := a.Apply(config.WithAuthor(context.Background(), "test"), doc, a.Current().Version)
		if err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		for {
			select {
			case got := <-ch:
				if got.Version < snap.Version {
					continue
				}
				t.Logf("version %d: apply took %v, live on the other replica %v after commit",
					snap.Version, committed.Sub(start), time.Since(committed))
			case <-time.After(time.Second):
				t.Fatalf("version %d not live on the other replica within 1s of commit", snap.Version)
			}
			break
		}
		if b.Current().Document.Buckets[0].Rank != int64(i+1) {
			t.Errorf("replica b rank = %d, want %d", b.Current().Document.Buckets[0].Rank, i+1)
		}
	}
	if st := b.ListenerStats(); !st.Connected || st.LastReload.IsZero() {
		t.Errorf("ListenerStats() = %+v, want connected with a reload time", st)
	}
}

func TestTablesHoldTheCurrentDocument(t *testing.T) {
	dsn := schemaDSN(t)
	s := open(t, pgstore.Config{DSN: dsn, Seed: seed(t)})
	doc, err := config.Parse([]byte(`
workers:
  - {id: p1, url: "http://p1:8000", models: [m], role: prefill, bootstrap_port: 8998}
  - {id: d1, url: "http://d1:8000", models: [m], role: decode}
buckets:
  - id: short
    limits: {min: 0, max: 4096}
    groups:
      pd:
        prefill: {worker_ids: [p1], policy: {type: cache_aware, admission: {max_running_requests: 64}}}
        decode: {worker_ids: [d1], policy: {type: power_of_two}}
`), config.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), doc, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var buckets, groups, engines int
	var admission, policy string
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM buckets), (SELECT count(*) FROM engine_groups), (SELECT count(*) FROM workers),
		(SELECT admission::text FROM engine_groups WHERE stage = 'prefill'), (SELECT policy::text FROM engine_groups WHERE stage = 'prefill')`).
		Scan(&buckets, &groups, &engines, &admission, &policy); err != nil {
		t.Fatal(err)
	}
	if buckets != 1 || groups != 2 || engines != 2 || !strings.Contains(admission, `"max_running_requests": 64`) || strings.Contains(policy, "admission") {
		t.Errorf("tables: %d buckets, %d groups, %d workers, prefill admission %s policy %s; want 1, 2, 2 with admission split from policy",
			buckets, groups, engines, admission, policy)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM config_versions`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("DELETE FROM config_versions = %v, want the append-only trigger to refuse", err)
	}
}

func TestSnapshotFileServesWhenDatabaseIsDown(t *testing.T) {
	dsn := schemaDSN(t)
	path := filepath.Join(t.TempDir(), "last-known.json")
	s := open(t, pgstore.Config{DSN: dsn, Seed: seed(t), SnapshotPath: path})
	doc := seed(t)
	doc.Buckets[0].ID = "saved"
	if _, err := s.Apply(context.Background(), doc, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("snapshot file not written: %v", err)
	}
	// A DSN nobody listens on stands in for a database that is down.
	down := "postgres://sluice@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	off, err := pgstore.Open(context.Background(), slog.New(slog.DiscardHandler), pgstore.Config{DSN: down, SnapshotPath: path})
	if err != nil {
		t.Fatalf("Open with a snapshot while the database is down: %v", err)
	}
	defer off.Close()
	if cur := off.Current(); cur.Version != 2 || cur.Document.Buckets[0].ID != "saved" {
		t.Errorf("Current() = version %d %+v, want version 2 from the snapshot", cur.Version, cur.Document.Buckets)
	}
	if _, err := off.Apply(context.Background(), doc, 2); !errors.Is(err, config.ErrUnavailable) {
		t.Errorf("Apply while down = %v, want ErrUnavailable", err)
	}
	_, err = pgstore.Open(context.Background(), slog.New(slog.DiscardHandler), pgstore.Config{DSN: down})
	if !errors.Is(err, config.ErrUnavailable) || !strings.Contains(err.Error(), "no last-known snapshot") {
		t.Errorf("Open without a snapshot while down = %v, want a clear ErrUnavailable start-up error", err)
	}
}

// TestNULRefusedNamingTheField: a document holding NUL in a model id or a label is valid (the
// file store keeps it) but PostgreSQL cannot store NUL; the store refuses it as invalid, naming
// each field, and writes nothing. It used to fail the write with SQLSTATE 22P05 (an admin call
// answered 500; found by schemathesis).
func TestNULRefusedNamingTheField(t *testing.T) {
	s := open(t, pgstore.Config{DSN: schemaDSN(t), Seed: seed(t)})
	doc, err := config.Parse([]byte("workers:\n  - {id: a, url: \"http://a\", models: [\"m\\0x\"], role: plain, labels: {k: \"v\\0\"}}\n"), config.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(context.Background(), doc, s.Current().Version)
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Apply = %v, want a *config.ValidationError", err)
	}
	var paths []string
	for _, p := range ve.Problems {
		paths = append(paths, p.Path)
	}
	if want := []string{"workers[0].models[0]", `workers[0].labels["k"]`}; !slices.Equal(paths, want) {
		t.Errorf("problem paths = %q, want %q (%v)", paths, want, err)
	}
	if v := s.Current().Version; v != 1 {
		t.Errorf("version %d after a refused write, want 1", v)
	}
}
