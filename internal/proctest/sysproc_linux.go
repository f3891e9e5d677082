package proctest

import "syscall"

// sysProcAttr puts a child in its own process group (so the test can signal it and its
// children together) and makes the kernel kill it when the test process dies, so a test
// binary killed by a timeout leaves no child behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
