package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BuildSluice builds the sluice binary (./services/sluice of the module the test runs in)
// into dir and returns its path. A test calls it once and runs every sluice process from
// that binary.
func BuildSluice(t testing.TB, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build sluice: %v", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not inside the sluice module")
	}
	bin := filepath.Join(dir, "sluice")
	start := time.Now()
	cmd := exec.Command(goBin, "build", "-o", bin, "./services/sluice")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./services/sluice: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	return bin
}
