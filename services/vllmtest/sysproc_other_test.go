//go:build !linux

package vllmtest

import "syscall"

// sysProcAttr puts a child in its own process group; outside Linux there is no
// parent-death signal, and t.Cleanup still stops every group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
