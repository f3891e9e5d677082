//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gateway

import (
	"net"
	"syscall"
)

// connPeeker peeks at an idle connection without blocking. It is made once per connection, so
// a reuse allocates nothing (the raw connection and the peek function are kept).
type connPeeker struct {
	rc    syscall.RawConn
	peek  func(fd uintptr) bool
	alive bool
	b     [1]byte
}

func newConnPeeker(c net.Conn) *connPeeker {
	p := &connPeeker{}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return p
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return p
	}
	p.rc = rc
	p.peek = func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		p.alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	}
	return p
}

// connAlive reports whether the connection is still open: nothing to read means it is; an end
// of stream, an error or unexpected bytes mean the engine closed or broke it.
func (p *connPeeker) connAlive() bool {
	if p.rc == nil {
		return false
	}
	p.alive = false
	if err := p.rc.Read(p.peek); err != nil {
		return false
	}
	return p.alive
}
