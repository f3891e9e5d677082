//go:build !linux

package proctest

import "syscall"

// sysProcAttr puts a child in its own process group; outside Linux there is no
// parent-death signal, and the set's cleanup still stops every group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
