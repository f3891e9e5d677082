package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"

	"github.com/sluicehq/sluice/internal/testenv"
)

// EnvPython names the interpreter of the interop virtualenv, exported by scripts/test.sh
// (scripts/lib/pyenv.sh).
const EnvPython = "SLUICE_TEST_PYTHON"

// replyTimeout bounds one command to the Python engine (the 100k-token store hashes
// 100,000 pages in Python).
const replyTimeout = 2 * time.Minute

// python returns the interop virtualenv's interpreter: t.Fatal in CI when it is missing,
// t.Skip elsewhere, like testenv does for Kafka.
func python(t testing.TB) string {
	t.Helper()
	py := os.Getenv(EnvPython)
	if py == "" {
		if testenv.InCI() {
			t.Fatalf("%s is required in CI but not set: run the tests through scripts/test.sh", EnvPython)
		}
		t.Skipf("%s unset: run scripts/test.sh (it provisions the vLLM/SGLang virtualenv)", EnvPython)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s=%s: %v", EnvPython, py, err)
	}
	return py
}

// pyEngine is one testdata/engine.py process: the real vLLM or SGLang publisher(s) of one
// engine and its /metrics endpoint, driven by JSON commands on its stdin.
type pyEngine struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	log    string
	mu     sync.Mutex
	exited chan struct{}
}

// engineStart is the "start" command of engine.py.
type engineStart struct {
	Op             string  `json:"op"`
	Kind           string  `json:"kind"`
	Endpoint       string  `json:"endpoint"`
	ReplayEndpoint *string `json:"replay_endpoint"`
	DPSize         int     `json:"dp_size"`
	Topic          string  `json:"topic"`
	Lossy          bool    `json:"lossy"`
	PageSize       int     `json:"page_size,omitempty"`
	MetricsPort    int     `json:"metrics_port"`
	Model          string  `json:"model"`
}

// startPyEngine runs engine.py with python and sends it start. The process is stopped
// (and its stderr shown on failure) when owner ends: the whole test, also for an engine
// restarted inside a subtest t.
func startPyEngine(t, owner testing.TB, py, dir, name string, start engineStart) *pyEngine {
	t.Helper()
	logPath := filepath.Join(dir, "py-"+name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// -B: no __pycache__ in the source tree.
	cmd := exec.Command(py, "-B", filepath.Join("testdata", "engine.py"))
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	e := &pyEngine{name: name, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(e.exited)
	}()
	owner.Cleanup(func() {
		e.stop()
		if owner.Failed() {
			t.Logf("---- %s (python engine) stderr ----\n%s", name, proctest.Tail(logPath, tailLines))
		}
	})
	start.Op = "start"
	r := e.do(t, start)
	t.Logf("%s: python engine up (%s), versions %v", name, start.Kind, r["versions"])
	return e
}

// do sends one command and returns the reply, failing the test on an error reply.
func (e *pyEngine) do(t testing.TB, cmd any) map[string]any {
	t.Helper()
	r, err := e.try(cmd)
	if err != nil {
		t.Fatalf("%s: %v", e.name, err)
	}
	return r
}

func (e *pyEngine) try(cmd any) (map[string]any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if _, err := e.stdin.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("send %s: %w (stderr: %s)", b, err, e.log)
	}
	type result struct {
		line []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := e.out.ReadBytes('\n')
		ch <- result{line, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-time.After(replyTimeout):
		return nil, fmt.Errorf("no reply to %.200s within %v", b, replyTimeout)
	}
	if res.err != nil {
		return nil, fmt.Errorf("read reply to %.200s: %w", b, res.err)
	}
	var r map[string]any
	if err := json.Unmarshal(res.line, &r); err != nil {
		return nil, fmt.Errorf("reply %q: %w", res.line, err)
	}
	if ok, _ := r["ok"].(bool); !ok {
		return nil, fmt.Errorf("%.300s: %v", b, r["error"])
	}
	return r, nil
}

// stop asks the engine to shut its publishers down and waits, killing it after stopGrace.
func (e *pyEngine) stop() {
	select {
	case <-e.exited:
		return
	default:
	}
	go func() { _, _ = e.try(map[string]string{"op": "stop"}) }()
	select {
	case <-e.exited:
	case <-time.After(stopGrace):
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
}

// kill ends the engine process at once, as a crash would.
func (e *pyEngine) kill() {
	_ = e.cmd.Process.Kill()
	<-e.exited
}
