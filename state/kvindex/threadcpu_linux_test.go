package kvindex

import (
	"syscall"
	"unsafe"
)

// threadCPU returns the calling thread's CPU time in nanoseconds
// (CLOCK_THREAD_CPUTIME_ID): unlike the wall clock it does not advance
// while the thread waits for a CPU, so per-call percentiles measured with
// it are the index's and not the scheduler's. The caller must be locked to
// its thread (runtime.LockOSThread).
func threadCPU() (int64, bool) {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return ts.Nano(), true
}
