//go:build !linux

package interop

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; t.Cleanup still stops every child.
func sysProcAttr() *syscall.SysProcAttr { return nil }
