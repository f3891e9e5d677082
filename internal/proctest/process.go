// Package proctest runs sluice's end-to-end tests as real child processes: a set of
// processes that die with the test and show their logs when it fails, free loopback
// ports, the sluice binary built from the module, waits on HTTP endpoints and
// conditions, the run's Kafka topics, and the decider REST calls and OpenAI answer type
// those tests share.
//
// It is test support: only tests import it (tests/e2e, tests/vllm).
package proctest

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

// Options tunes a Set; a zero field takes its default.
type Options struct {
	// StopGrace is how long a process group gets to exit after SIGTERM before it is
	// killed (default 5 s).
	StopGrace time.Duration
	// TailLines is how much of each process log a failing test prints (default 60).
	TailLines int
}

// Process is one child of the test in its own process group (signals go to the whole
// group, so children it forked go down with it), its output in a log file.
type Process struct {
	// Name names the process in logs and failure messages.
	Name string
	// LogPath is the file holding its stdout and stderr.
	LogPath string

	cmd       *exec.Cmd
	stopGrace time.Duration
	exited    chan struct{}
	waitErr   error    // set before exited is closed
	lifeline  *os.File // the write end of a guarded process's stdin; nil otherwise
}

// Set owns every process a test started, the ones already stopped included, so that all
// their logs can be shown on failure and none outlives the test.
type Set struct {
	dir string
	opt Options

	mu  sync.Mutex
	all []*Process
	seq int
}

// NewSet returns a process set whose logs go to dir. Its cleanup, registered here, stops
// every process group still running (newest first, in parallel: some take seconds) and,
// when the test failed, prints each log's tail.
func NewSet(t testing.TB, dir string, opt Options) *Set {
	if opt.StopGrace <= 0 {
		opt.StopGrace = 5 * time.Second
	}
	if opt.TailLines <= 0 {
		opt.TailLines = 60
	}
	s := &Set{dir: dir, opt: opt}
	t.Cleanup(func() {
		s.mu.Lock()
		all := append([]*Process(nil), s.all...)
		s.mu.Unlock()
		var wg sync.WaitGroup
		for i := len(all) - 1; i >= 0; i-- {
			wg.Add(1)
			go func(p *Process) {
				defer wg.Done()
				p.Stop()
			}(all[i])
		}
		wg.Wait()
		if t.Failed() {
			for _, p := range all {
				t.Logf("---- last %d lines of %s (%s; exit: %v) ----\n%s", opt.TailLines, p.Name, p.LogPath, p.waitErr, Tail(p.LogPath, opt.TailLines))
			}
		}
	})
	return s
}

// Start runs bin with args as a child named name, in a new process group, with env (nil:
// ChildEnv, so only flags configure sluice).
func (s *Set) Start(t testing.TB, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	return s.start(t, name, env, nil, bin, args...)
}

func (s *Set) start(t testing.TB, name string, env []string, stdin *os.File, bin string, args ...string) *Process {
	t.Helper()
	s.mu.Lock()
	s.seq++
	logPath := filepath.Join(s.dir, fmt.Sprintf("%02d-%s.log", s.seq, name))
	s.mu.Unlock()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Env = env
	if env == nil {
		cmd.Env = ChildEnv()
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, stopGrace: s.opt.StopGrace, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	s.mu.Lock()
	s.all = append(s.all, p)
	s.mu.Unlock()
	return p
}

// guardScript runs its arguments as a server in its own process group and takes the whole
// group down when the test process dies, however it dies. The kernel's parent-death signal
// reaches only the direct child, and vLLM's engine-core and worker processes outlive their
// API server when it is SIGKILLed. The test holds the write end of the script's stdin open
// and never writes: EOF means the test is gone, and the group gets SIGTERM (vLLM then frees
// its shared memory), SIGKILL 15 s later. A SIGTERM to the group is the normal stop: every
// process gets it and the script exits with the server's status.
const guardScript = `exec 3<&0
"$@" </dev/null &
server=$!
( trap '' TERM; read -r _ <&3; kill -TERM 0; sleep 15; kill -KILL 0 ) &
watcher=$!
exec 3<&-
trap 'kill -TERM "$server" 2>/dev/null' TERM INT
while :; do
  wait "$server"
  rc=$?
  kill -0 "$server" 2>/dev/null || break
done
kill -KILL "$watcher" 2>/dev/null
exit "$rc"
`

// StartGuarded is Start for a server that forks children of its own (vLLM): it runs under
// a bash guard holding a lifeline pipe from the test, so that none of them outlives the
// test, however the test process dies.
func (s *Set) StartGuarded(t testing.TB, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := s.start(t, name, env, r, "bash", append([]string{"-c", guardScript, name, bin}, args...)...)
	r.Close() // the child has its copy
	p.lifeline = w
	return p
}

// Running reports whether the group leader has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Err is how the group leader exited (nil while it runs).
func (p *Process) Err() error {
	if p.Running() {
		return nil
	}
	return p.waitErr
}

// signalGroup signals the process group (negative pid), which outlives its leader when a
// child was left behind.
func (p *Process) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Kill sends SIGKILL to the whole group and waits for the leader to be gone.
func (p *Process) Kill() {
	p.signalGroup(syscall.SIGKILL)
	<-p.exited
	if p.lifeline != nil {
		p.lifeline.Close()
	}
}

// Stop asks the group to shut down (SIGTERM), kills it if the leader has not exited within
// the set's StopGrace, and always SIGKILLs the group at the end so no child survives its
// leader.
func (p *Process) Stop() {
	if p.Running() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(p.stopGrace):
		}
	}
	p.Kill()
}

// ChildEnv is the test's environment without the variables sluice reads as flag fallbacks
// (SLUICE_*, DATABASE_URL).
func ChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLUICE_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Tail returns the last n lines of the file at path (or why it cannot).
func Tail(path string, n int) string {
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
