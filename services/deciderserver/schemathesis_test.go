package deciderserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gen/openapiv2"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

// schemathesisExamples bounds each operation's generated cases per phase; with the document's
// 18 operations the run takes well under a minute on a loaded 2-core machine.
const schemathesisExamples = 50

// TestSchemathesis fuzzes the REST API of a real decider (Postgres configuration store, admin
// and viewer tokens, two-buckets.yaml) from the OpenAPI document it serves at /openapi.json:
// schemathesis's coverage, fuzzing and stateful phases with the admin token, so writes happen
// too, and every check but the three scripts/schemathesis/schemathesis.toml explains. Any 5xx
// other than Decide's documented 503s, or a response the document does not describe (status,
// content type, headers, body schema, Allow, auth), fails the test with schemathesis's
// reproducing curl. SLUICE_TEST_SCHEMATHESIS_SEED replays a run's seed;
// SLUICE_TEST_SCHEMATHESIS_EXAMPLES raises the cases per operation for a deeper local run.
func TestSchemathesis(t *testing.T) {
	cfg := pgConfig(t, pgtest.SchemaDSN(t))
	bin := testenv.Schemathesis(t)
	cfg.Health.ProbeInterval = 0 // the configured engines are not reachable
	srv := startWith(t, cfg)

	examples := schemathesisExamples
	if v := os.Getenv("SLUICE_TEST_SCHEMATHESIS_EXAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_TEST_SCHEMATHESIS_EXAMPLES=%q: want a positive number", v)
		}
		examples = n
	}
	dir, err := filepath.Abs("../../scripts/schemathesis")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--config-file", filepath.Join(dir, "schemathesis.toml"), "--no-color",
		"run", "http://" + srv.HTTPAddr() + "/openapi.json",
		"--header", "Authorization: Bearer " + adminToken,
		"--max-examples", strconv.Itoa(examples),
		"--request-timeout", "10",
		"--workers", "1",
		"--generation-database", "none",
		"--output-truncate", "false"}
	if seed := os.Getenv("SLUICE_TEST_SCHEMATHESIS_SEED"); seed != "" {
		args = append(args, "--seed", seed)
	}
	// A bound on a hung run, not on its speed: it normally ends in well under a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute*time.Duration(max(1, examples/schemathesisExamples)))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir() // schemathesis may leave files in its working directory
	cmd.Env = append(os.Environ(), "SCHEMATHESIS_HOOKS="+filepath.Join(dir, "hooks.py"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("schemathesis (at most %d cases per operation and phase) ran %s:\n%s",
		examples, time.Since(start).Round(time.Second), summary(out.String()))
	if ctx.Err() != nil {
		t.Fatalf("schemathesis did not finish in time; output so far:\n%s", out.String())
	}
	if runErr != nil {
		var exit *exec.ExitError
		if !errors.As(runErr, &exit) {
			t.Fatalf("run %s: %v", bin, runErr)
		}
		t.Fatalf("schemathesis found problems (exit %d):\n%s", exit.ExitCode(), out.String())
	}
	// A green run must have exercised every operation of the document.
	if want, got := operationCount(t), testedCount(out.String()); got != want {
		t.Errorf("schemathesis tested %d operations, want all %d of /openapi.json:\n%s", got, want, out.String())
	}
}

// summary is the run's SUMMARY section (phases, failures, warnings, case counts, seed).
func summary(out string) string {
	if i := strings.LastIndex(out, "SUMMARY"); i >= 0 {
		if j := strings.LastIndex(out[:i], "\n"); j >= 0 {
			return out[j+1:]
		}
	}
	return out
}

var testedRE = regexp.MustCompile(`(?m)^\s*Tested:\s*(\d+)`)

// testedCount reads "Tested: N" from the summary, -1 when absent.
func testedCount(out string) int {
	m := testedRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// operationCount counts the operations (path, method) of the served OpenAPI document.
func operationCount(t *testing.T) int {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapiv2.SluiceJSON, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ops := range doc.Paths {
		n += len(ops)
	}
	return n
}
