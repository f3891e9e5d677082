package kvindex

import (
	"os"
	"strconv"
	"strings"
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

// threadSwitches returns how many times the calling thread has been
// switched out (voluntary and involuntary context switches, RUSAGE_THREAD).
func threadSwitches() int64 {
	var ru syscall.Rusage
	const rusageThread = 1
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// stealTicks returns the machine's CPU time stolen by the hypervisor and
// its total CPU time, in clock ticks (/proc/stat): the thread CPU clock
// keeps running while the hypervisor runs another guest on this vCPU.
func stealTicks() (steal, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		if i < 8 { // user nice system idle iowait irq softirq steal
			total += v
		}
		if i == 7 {
			steal = v
		}
	}
	return steal, total
}
