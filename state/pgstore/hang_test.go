package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/pgstore"
)

// withAppName tags dsn's connections so the test can find their backends.
func withAppName(t *testing.T, dsn, name string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopBackends SIGSTOPs every backend of the connections tagged app (the
// store's pool and its listener: a partition hits them all) and SIGCONTs
// them when the test ends.
func stopBackends(t *testing.T, conn *pgx.Conn, app string) {
	t.Helper()
	ctx := context.Background()
	var pids []int32
	waitFor(t, 5*time.Second, "the store's backends visible", func() bool {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			return false
		}
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		return err == nil && len(pids) > 0
	})
	for _, pid := range pids {
		if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP backend %d: %v", pid, err)
		}
		t.Cleanup(func() { _ = syscall.Kill(int(pid), syscall.SIGCONT) })
	}
}

// A replica whose LISTEN backend hangs (SIGSTOP: it keeps its socket open and
// never answers, like a network partition) must stop reporting itself
// connected, reconnect on a fresh backend and pick up versions written
// meanwhile, instead of serving the old version for as long as the hang lasts.
func TestHungListenerBackendIsReplaced(t *testing.T) {
	dsn := schemaDSN(t)
	app := "hung-listener-" + strings.TrimPrefix(t.Name(), "Test")
	const ping, query = 500 * time.Millisecond, 500 * time.Millisecond
	a := open(t, pgstore.Config{DSN: withAppName(t, dsn, app), Seed: seed(t), PingInterval: ping, QueryTimeout: query,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	b := open(t, pgstore.Config{DSN: dsn, Seed: seed(t)})
	runStore(t, a)
	waitFor(t, 5*time.Second, "listener connected", func() bool { return a.ListenerStats().Connected })

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stopBackends(t, conn, app)
	stopped := time.Now()

	before := a.ListenerStats().Reconnects
	doc := seed(t)
	doc.Buckets[0].Rank = 7
	snap, err := b.Apply(ctx, doc, b.Current().Version)
	if err != nil {
		t.Fatal(err)
	}
	// Detection is bounded by PingInterval + QueryTimeout (plus a reconnect).
	waitFor(t, 10*time.Second, "replica a reconnects past the hung backend", func() bool {
		return a.ListenerStats().Reconnects > before
	})
	waitFor(t, 10*time.Second, "replica a serves the version written during the hang", func() bool {
		return a.Current().Version >= snap.Version
	})
	t.Logf("hung backend replaced and version %d live %v after SIGSTOP", snap.Version, time.Since(stopped).Round(time.Millisecond))
	if got := a.Current().Document.Buckets[0].Rank; got != 7 {
		t.Errorf("replica a rank = %d, want 7", got)
	}
	waitFor(t, 5*time.Second, "listener connected again", func() bool { return a.ListenerStats().Connected })
}

// ListenerStats().Connected turns false while the connection does not answer,
// before any reconnect succeeds.
func TestListenerStatsReportHang(t *testing.T) {
	dsn := schemaDSN(t)
	app := "stale-listener-" + strings.TrimPrefix(t.Name(), "Test")
	a := open(t, pgstore.Config{DSN: withAppName(t, dsn, app), Seed: seed(t), PingInterval: 300 * time.Millisecond,
		QueryTimeout: 2 * time.Second, ReconnectMin: time.Hour, ReconnectMax: time.Hour})
	runStore(t, a)
	waitFor(t, 5*time.Second, "listener connected", func() bool { return a.ListenerStats().Connected })
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stopBackends(t, conn, app)
	waitFor(t, 10*time.Second, "listener reported disconnected", func() bool { return !a.ListenerStats().Connected })
}

// An admin write against a database that does not answer (here: a lock held
// by another session) ends at the store's own write deadline with
// ErrUnavailable saying nothing was written, even when the caller has no
// deadline; after the lock goes the write works.
func TestWriteDeadline(t *testing.T) {
	dsn := schemaDSN(t)
	s := open(t, pgstore.Config{DSN: dsn, Seed: seed(t), WriteTimeout: 700 * time.Millisecond})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE config_head IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	doc := seed(t)
	doc.Buckets[0].Rank = 3
	start := time.Now()
	_, err = s.Apply(ctx, doc, s.Current().Version)
	took := time.Since(start)
	if !errors.Is(err, config.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("Apply against a locked head = %v, want ErrUnavailable saying nothing was written", err)
	}
	if took > 5*time.Second {
		t.Errorf("Apply returned after %v; the write deadline is 700ms", took)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	vs, err := s.Versions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 {
		t.Errorf("versions after the timed-out write = %d, want 1 (nothing written)", len(vs))
	}
	if _, err := s.Apply(ctx, doc, s.Current().Version); err != nil {
		t.Errorf("Apply after the lock is gone: %v", err)
	}
}
