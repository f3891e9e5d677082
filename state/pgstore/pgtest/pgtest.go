// Package pgtest gives tests a Postgres schema of their own on the test
// database that scripts/test.sh starts, so tests of the Postgres store (and
// of services using it) run in parallel without seeing each other's tables.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testenv"
)

// SchemaDSN creates a fresh schema on the test database, drops it when the
// test ends, and returns a DSN whose search_path is that schema. Without a
// database it fails in CI and skips elsewhere (testenv.PostgresDSN).
func SchemaDSN(t testing.TB) string {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := pgx.Identifier{"t_" + hex.EncodeToString(b[:])}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return // the database may be down after an outage test; the cluster is thrown away anyway
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema.Sanitize()+" CASCADE")
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema[0])
	u.RawQuery = q.Encode()
	return u.String()
}
