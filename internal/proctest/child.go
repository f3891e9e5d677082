package proctest

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// Child is this test binary started again as a child process (no tests run in it: the child
// acts on env, e.g. from TestMain), its stdin and stdout piped to the parent and its stderr
// shared. Benchmarks use it to measure one side of an exchange in a process of its own, so
// the CPU and allocations they report are that side's alone.
type Child struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Stdout io.ReadCloser
}

// StartChild starts the child with env added to this process's environment. Cleanup closes
// its stdin (the child's cue to stop) and waits for it, killing it first when kill is set.
func StartChild(tb testing.TB, kill bool, env ...string) *Child {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = in.Close()
		if kill {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	})
	return &Child{Cmd: cmd, Stdin: in, Stdout: out}
}
