//go:build !linux

package kvindex

// threadCPU is available on Linux only (threadcpu_linux_test.go).
func threadCPU() (int64, bool) { return 0, false }
