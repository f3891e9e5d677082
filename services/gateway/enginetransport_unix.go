//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gateway

import (
	"net"
	"syscall"
)

// connAlive peeks at an idle connection without blocking: nothing to read means it is still
// open; an end of stream, an error or unexpected bytes mean the engine closed or broke it.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	}); err != nil {
		return false
	}
	return alive
}
