package vllmtest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a process group gets to exit after SIGTERM before it is killed.
// vLLM stops in ~3 s.
const stopGrace = 15 * time.Second

// tailLines is how much of each process log a failing test prints.
const tailLines = 80

// process is one child of the test in its own process group (vLLM's API server forks an
// engine-core process: signals go to the whole group), its output in a log file.
type process struct {
	name     string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error    // set before exited is closed
	lifeline *os.File // the write end of a guarded process's stdin; nil otherwise
}

// procs owns every process a test started, so that all their logs can be shown on failure
// and none outlives the test.
type procs struct {
	dir string

	mu  sync.Mutex
	all []*process
	seq int
}

// newProcs returns a process set whose logs go to dir. Its cleanup, registered here, stops
// every process group still running (newest first, in parallel: vLLM takes seconds) and,
// when the test failed, prints each log's tail.
func newProcs(t testing.TB, dir string) *procs {
	p := &procs{dir: dir}
	t.Cleanup(func() {
		p.mu.Lock()
		all := append([]*process(nil), p.all...)
		p.mu.Unlock()
		var wg sync.WaitGroup
		for i := len(all) - 1; i >= 0; i-- {
			wg.Add(1)
			go func(pr *process) {
				defer wg.Done()
				pr.stop()
			}(all[i])
		}
		wg.Wait()
		if t.Failed() {
			for _, pr := range all {
				t.Logf("---- last %d lines of %s (%s; exit: %v) ----\n%s", tailLines, pr.name, pr.logPath, pr.waitErr, tail(pr.logPath, tailLines))
			}
		}
	})
	return p
}

// start runs name's command with env (nil: the test's environment without SLUICE_* and
// DATABASE_URL, so only flags configure sluice) in a new process group.
func (p *procs) start(t testing.TB, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	return p.startWith(t, name, env, nil, bin, args...)
}

func (p *procs) startWith(t testing.TB, name string, env []string, stdin *os.File, bin string, args ...string) *process {
	t.Helper()
	p.mu.Lock()
	p.seq++
	logPath := filepath.Join(p.dir, fmt.Sprintf("%02d-%s.log", p.seq, name))
	p.mu.Unlock()
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
		cmd.Env = childEnv()
	}
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

// startGuarded is start for a server that forks children of its own (vLLM): it runs under
// guardScript, so that none of them outlives the test.
func (p *procs) startGuarded(t testing.TB, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr := p.startWith(t, name, env, r, "bash", append([]string{"-c", guardScript, name, bin}, args...)...)
	r.Close() // the child has its copy
	pr.lifeline = w
	return pr
}

// running reports whether the group leader has not exited.
func (pr *process) running() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

// signalGroup signals the process group (negative pid), which outlives its leader when a
// child was left behind.
func (pr *process) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-pr.cmd.Process.Pid, sig)
}

// kill sends SIGKILL to the whole group and waits for the leader to be gone.
func (pr *process) kill() {
	pr.signalGroup(syscall.SIGKILL)
	<-pr.exited
	if pr.lifeline != nil {
		pr.lifeline.Close()
	}
}

// stop asks the group to shut down (SIGTERM), kills it if the leader has not exited within
// stopGrace, and always SIGKILLs the group at the end so no child survives its leader.
func (pr *process) stop() {
	if pr.running() {
		pr.signalGroup(syscall.SIGTERM)
		select {
		case <-pr.exited:
		case <-time.After(stopGrace):
		}
	}
	pr.kill()
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

// freePorts returns n distinct free loopback TCP ports, held open together while picked so
// they differ; another process could still take one before the child binds it, in which
// case the child fails to start and its log says so.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// serverPorts returns n distinct free loopback TCP ports below the kernel's ephemeral range,
// for servers that bind late: vLLM binds its HTTP port ~20 s and its replay socket ~30 s
// after it starts, long enough for an outgoing connection of any process on the machine to
// be given a port that freePorts picked from the ephemeral range.
func serverPorts(t testing.TB, n int) []int {
	t.Helper()
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				lo = v
			}
		}
	}
	const span = 10000
	if lo <= 1024+span {
		return freePorts(t, n)
	}
	var ports []int
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	for p := lo - span + rand.IntN(span/2); len(ports) < n && p < lo; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		lis = append(lis, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		t.Fatalf("found only %d free loopback ports below %d", len(ports), lo)
	}
	return ports
}

// buildSluice builds the sluice binary from the module root into dir.
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

// eventually polls cond every 100 ms until it holds, failing after timeout with cond's last
// description of what it saw. The timeout is a deadline for a slow machine, not a measure.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v; last seen: %s", what, timeout, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
