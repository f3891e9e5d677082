package testenv

import (
	"os"
	"testing"
)

// EnvSchemathesis holds the path of the schemathesis command that scripts/test.sh installs
// in its cached venv (scripts/lib/schemathesis.sh).
const EnvSchemathesis = "SLUICE_TEST_SCHEMATHESIS"

// Schemathesis returns the path of the schemathesis command, never empty. Without it the test
// fails, in CI and locally alike, because scripts/test.sh always provides it when it runs the
// package; it is skipped only in a quick unit run (SLUICE_TEST_NO_SERVICES=1 outside CI).
func Schemathesis(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvSchemathesis); p != "" {
		return p
	}
	if os.Getenv("SLUICE_TEST_NO_SERVICES") == "1" && !InCI() {
		t.Skipf("schemathesis not installed (%s unset, SLUICE_TEST_NO_SERVICES=1)", EnvSchemathesis)
	}
	t.Fatalf("schemathesis is required but %s is not set: run the tests through scripts/test.sh, which installs it", EnvSchemathesis)
	return ""
}
