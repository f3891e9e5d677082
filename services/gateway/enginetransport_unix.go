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
	send  func(fd uintptr) bool
	alive bool
	b     [1]byte

	// sendWait's state, read by send.
	msg     []byte
	check   bool
	sent    int
	err     error
	waiting bool
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
		p.alive = peekAlive(fd, p.b[:])
		return true
	}
	p.send = func(fd uintptr) bool {
		if p.waiting {
			return true // the answer is readable (or the deadline fired)
		}
		if p.check {
			if p.alive = peekAlive(fd, p.b[:]); !p.alive {
				return true
			}
		}
		for p.sent < len(p.msg) {
			n, err := syscall.Write(int(fd), p.msg[p.sent:])
			if err == syscall.EINTR {
				continue
			}
			if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
				return true // the socket buffer is full: the caller writes the rest
			}
			if err != nil {
				p.err = err
				return true
			}
			p.sent += n
		}
		p.waiting = true
		return false // wait until the engine's answer is readable
	}
	return p
}

// peekAlive reports whether fd has nothing to read yet: a peer that closed or broke the
// connection, or unexpected bytes, make it false.
func peekAlive(fd uintptr, b []byte) bool {
	_, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
}

// sendWait writes msg and waits until the answer is readable, in one pass through the
// runtime's poller: the write is made from inside the read wait, after the poller forgot any
// earlier readiness, so the answer's arrival cannot be missed, and the first read of the
// answer then finds it rather than failing with EAGAIN and parking (a read system call saved
// per exchange). When check is set (a pooled connection) it first peeks that the engine has
// not closed the connection; alive false means it had, and nothing was written. sent is how
// much of msg was written: less than all when the socket buffer filled (the caller writes the
// rest) or on err. Where the connection offers no raw access it writes nothing and leaves it
// to the caller.
func (p *connPeeker) sendWait(msg []byte, check bool) (sent int, alive bool, err error) {
	if p.rc == nil {
		return 0, !check, nil
	}
	p.msg, p.check, p.sent, p.err, p.waiting, p.alive = msg, check, 0, nil, false, true
	rerr := p.rc.Read(p.send)
	sent, alive, err = p.sent, p.alive, p.err
	p.msg = nil
	if err == nil {
		err = rerr // the wait failed: the request's context cut it short
	}
	return sent, alive, err
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
