// Package silentpeer is a TCP peer that accepts connections and never writes to them: what a
// wedged or stopped process looks like to a dialer (its kernel completes the TCP handshake), or
// an endpoint that names some other port. Tests of the ZMQ dials (components/zmqdial) point a
// socket at it; zmq4's Dial waits for a ZMTP greeting it never sends.
package silentpeer

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Peer is a listening silent peer.
type Peer struct {
	// Endpoint is its ZMQ endpoint, tcp://127.0.0.1:PORT.
	Endpoint string
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	closed   bool
}

// Listen starts a silent peer on a free loopback port; it holds every connection it takes open
// until HangUp or the end of the test.
func Listen(t testing.TB) *Peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Peer{Endpoint: "tcp://" + ln.Addr().String(), ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.closed {
				_ = conn.Close()
			} else {
				p.accepted.Add(1)
				p.conns = append(p.conns, conn)
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.HangUp)
	return p
}

// Accepted is how many connections the peer took.
func (p *Peer) Accepted() int64 { return p.accepted.Load() }

// HangUp closes the listener and every connection taken, freeing the port for a real peer.
func (p *Peer) HangUp() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
