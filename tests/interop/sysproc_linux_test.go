package interop

import "syscall"

// sysProcAttr makes the kernel kill a child when the test process dies, so a test binary
// killed by a timeout leaves no engines or deciders behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
