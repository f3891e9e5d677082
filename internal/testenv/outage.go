package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// EnvOutage is set to "1" by scripts/test.sh for its outage phase, in which the
// TestOutage* tests run one package at a time after the main, parallel run.
const EnvOutage = "SLUICE_TEST_OUTAGE"

// outagePrefix is the name prefix scripts/test.sh uses to find outage tests.
const outagePrefix = "TestOutage"

// scriptTimeout bounds one start or stop; the scripts have their own, shorter limits.
const scriptTimeout = 3 * time.Minute

// StopPostgres stops the test PostgreSQL cluster (fast shutdown: open
// connections are cut) and registers a cleanup that starts it again if the test
// did not, so a failing test never leaves the database down for later tests.
//
// Stopping a shared service would break tests running in parallel in other
// packages, so it is allowed only in tests named TestOutage*, which
// scripts/test.sh runs alone in its outage phase; in the main run they are
// skipped. A test of another name that calls it fails.
func StopPostgres(t testing.TB) {
	t.Helper()
	requireOutagePhase(t)
	requirePostgresControl(t)
	runScript(t, "postgres-stop.sh")
	t.Cleanup(func() { runScript(t, "postgres-start.sh") })
}

// StartPostgres starts the test PostgreSQL cluster again after StopPostgres, on
// the same port with the same data, and returns once it accepts connections.
// Calling it while the cluster runs does nothing. Same rules as StopPostgres.
func StartPostgres(t testing.TB) {
	t.Helper()
	requireOutagePhase(t)
	requirePostgresControl(t)
	runScript(t, "postgres-start.sh")
}

// StopKafka stops the test Kafka broker (SIGTERM, controlled shutdown; SIGKILL
// after 30 s) and registers a cleanup that starts it again if the test did not.
// Same rules as StopPostgres: only in TestOutage* tests.
func StopKafka(t testing.TB) {
	t.Helper()
	requireOutagePhase(t)
	requireKafkaControl(t)
	runScript(t, "kafka-stop.sh")
	t.Cleanup(func() { runScript(t, "kafka-start.sh") })
}

// StartKafka starts the test Kafka broker again after StopKafka, on the same
// ports with the same log directories (topics and committed offsets survive),
// and returns once the broker logged that it started and its port accepts
// connections. Calling it while the broker runs does nothing. Same rules as
// StopPostgres.
func StartKafka(t testing.TB) {
	t.Helper()
	requireOutagePhase(t)
	requireKafkaControl(t)
	runScript(t, "kafka-start.sh")
}

// requireOutagePhase enforces the naming rule and skips outside the outage phase.
func requireOutagePhase(t testing.TB) {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	if !strings.HasPrefix(top, outagePrefix) {
		t.Fatalf("%s stops a shared service: name it %s... so scripts/test.sh runs it alone in its outage phase", top, outagePrefix)
	}
	if os.Getenv(EnvOutage) != "1" {
		t.Skipf("outage test: runs in scripts/test.sh's serial outage phase (%s=1)", EnvOutage)
	}
}

func requirePostgresControl(t testing.TB) {
	t.Helper()
	for _, env := range []string{"SLUICE_TEST_PG_BIN", "SLUICE_TEST_PG_USER", "SLUICE_TEST_PG_DATADIR", "SLUICE_TEST_PG_PORT"} {
		if os.Getenv(env) == "" {
			missing(t, "a PostgreSQL cluster started by scripts/test.sh", env)
		}
	}
}

func requireKafkaControl(t testing.TB) {
	t.Helper()
	if os.Getenv("SLUICE_TEST_KAFKA_STATE") == "" {
		missing(t, "a Kafka broker started by scripts/test.sh", "SLUICE_TEST_KAFKA_STATE")
	}
}

// runScript runs one of the scripts/lib start/stop helpers with the test's
// environment and fails the test, showing the script's output, if it fails.
func runScript(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	path := filepath.Join(scriptsDir(t), name)
	start := time.Now()
	out, err := exec.CommandContext(ctx, "bash", path).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	t.Logf("%s took %v", name, time.Since(start).Round(time.Millisecond))
}

// scriptsDir finds scripts/lib: SLUICE_TEST_SCRIPTS if set, else relative to
// this source file (repo/internal/testenv).
func scriptsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SLUICE_TEST_SCRIPTS"); d != "" {
		return d
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate scripts/lib: set SLUICE_TEST_SCRIPTS")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "lib")
}
