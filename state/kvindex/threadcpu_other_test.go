//go:build !linux

package kvindex

// threadCPU is available on Linux only (threadcpu_linux_test.go).
func threadCPU() (int64, bool) { return 0, false }

func threadSwitches() int64 { return 0 }

func stealTicks() (steal, total int64) { return 0, 0 }
