// Process handling copied from services/e2e (test files cannot be imported): real sluice
// processes with their logs kept and shown on failure.

package interop

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a process gets to exit after SIGTERM before it is killed.
const stopGrace = 5 * time.Second

// tailLines is how much of each process log a failing test prints.
const tailLines = 60

// process is one running child of the test: a sluice subcommand whose stdout and stderr go to a
// log file, printed (its tail) when the test fails.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// procs owns every process a test started, the ones already stopped included, so that all
// their logs can be shown on failure and none outlives the test.
type procs struct {
	bin string
	dir string

	mu  sync.Mutex
	all []*process
	seq int
}

// newProcs returns a process set whose logs go to dir. Its cleanup, registered here, stops every
// process still running (newest first) and, when the test failed, prints each log's tail.
func newProcs(t testing.TB, bin, dir string) *procs {
	p := &procs{bin: bin, dir: dir}
	t.Cleanup(func() {
		p.mu.Lock()
		all := append([]*process(nil), p.all...)
		p.mu.Unlock()
		for i := len(all) - 1; i >= 0; i-- {
			all[i].stop()
		}
		if t.Failed() {
			for _, pr := range all {
				t.Logf("---- last %d lines of %s (%s; exit: %v) ----\n%s", tailLines, pr.name, pr.logPath, pr.waitErr, tail(pr.logPath, tailLines))
			}
		}
	})
	return p
}

// start runs `sluice args...` as a child named name. The child's environment has no SLUICE_*
// or DATABASE_URL variables, so only the flags given here configure it.
func (p *procs) start(t testing.TB, name string, args ...string) *process {
	t.Helper()
	p.mu.Lock()
	p.seq++
	logPath := filepath.Join(p.dir, fmt.Sprintf("%02d-%s.log", p.seq, name))
	p.mu.Unlock()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	pr := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		pr.waitErr = cmd.Wait()
		f.Close()
		close(pr.exited)
	}()
	p.mu.Lock()
	p.all = append(p.all, pr)
	p.mu.Unlock()
	return pr
}

// running reports whether the process has not exited.
func (pr *process) running() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (pr *process) kill() {
	if !pr.running() {
		return
	}
	_ = pr.cmd.Process.Signal(syscall.SIGKILL)
	<-pr.exited
}

// stop asks the process to shut down (SIGTERM) and kills it if it has not exited within
// stopGrace.
func (pr *process) stop() {
	if !pr.running() {
		return
	}
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pr.exited:
	case <-time.After(stopGrace):
		pr.kill()
	}
}

// childEnv is the test's environment without the variables sluice reads as flag fallbacks.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLUICE_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// tail returns the last n lines of the file at path (or why it cannot).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := sc.Err(); err != nil {
		lines = append(lines, "(reading the log: "+err.Error()+")")
	}
	return strings.Join(lines, "\n")
}

// buildSluice builds the sluice binary from the module root into dir, once per test binary.
func buildSluice(t testing.TB, dir string) string {
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
