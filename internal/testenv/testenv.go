// Package testenv gives integration tests the real services that scripts/test.sh
// starts: a throwaway PostgreSQL cluster and a single-node Apache Kafka broker.
//
// The script exports where they are (DATABASE_URL, SLUICE_TEST_KAFKA_BROKERS and
// the SLUICE_TEST_PG_* / SLUICE_TEST_KAFKA_* variables used to stop and restart
// them). A test that needs a service asks this package for it. When the service
// is absent the test fails under CI, where a missing service is a broken setup,
// and is skipped elsewhere with a hint to run scripts/test.sh, so a plain
// `go test ./...` stays usable for quick unit runs.
package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/flagenv"
)

// Environment variables exported by scripts/test.sh.
const (
	// EnvPostgresDSN holds the connection URL of the test database.
	EnvPostgresDSN = "DATABASE_URL"
	// EnvKafkaBrokers holds a comma-separated list of host:port bootstrap brokers.
	EnvKafkaBrokers = "SLUICE_TEST_KAFKA_BROKERS"
)

// PostgresDSN returns the URL of the test database
// (postgres://sluice@127.0.0.1:PORT/sluice_test?sslmode=disable when the script
// started the cluster). The database is shared by every test package of the run:
// tests create their own schema or tables, or clean up after themselves.
// It never returns an empty string: without a database it fails the test in CI
// and skips it elsewhere.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvPostgresDSN)
	if dsn == "" {
		missing(t, "PostgreSQL", EnvPostgresDSN)
	}
	return dsn
}

// KafkaBrokers returns the bootstrap addresses (host:port) of the test Kafka
// cluster, in the order given, never empty. The broker auto-creates topics with
// 4 partitions; tests use topic names of their own (for example derived from
// t.Name()) because the broker is shared by every test package of the run.
// Without brokers it fails the test in CI and skips it elsewhere.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	brokers := flagenv.List(os.Getenv(EnvKafkaBrokers))
	if len(brokers) == 0 {
		missing(t, "Kafka", EnvKafkaBrokers)
	}
	return brokers
}

// InCI reports whether the tests run under CI (CI set to anything but "", "0"
// or "false"), where a missing service is a failure instead of a skip.
func InCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		return false
	}
	return true
}

// missing ends the test because a service is not configured: t.Fatal in CI,
// t.Skip elsewhere.
func missing(t testing.TB, service, env string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required in CI but %s is not set: run the tests through scripts/test.sh", service, env)
	}
	t.Skipf("%s not available (%s unset): run scripts/test.sh to start it and run integration tests", service, env)
}
