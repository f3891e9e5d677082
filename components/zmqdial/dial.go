// Package zmqdial bounds a zmq4 dial. zmq4 bounds the TCP connect of Socket.Dial (its dialer
// timeout and retries end with the socket's context) but not the ZMTP handshake that follows:
// a peer that accepts the connection and never sends its greeting — a stopped or wedged
// engine, whose kernel still completes the TCP handshake, or an endpoint that is some other
// port — blocks Dial for as long as it holds the connection, and with it whatever waits on
// the dial (a replay, a subscriber's redial loop, a process's shutdown). docs/wire-formats.md
// says where sluice dials this way.
package zmqdial

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrNoGreeting is Bounded's error for a peer that took the TCP connection and did not greet,
// and for a dial refused because an earlier one to the same endpoint still waits for that.
var ErrNoGreeting = errors.New("the peer accepted the connection and sent no ZMTP greeting")

// RetryGrace is how long Bounded waits, once ctx has ended, for zmq4's connect retries to
// notice: a socket dialled through Bounded needs a retry pause (zmq4.WithDialerRetry) shorter
// than this, or one connect attempt per Dial (zmq4.WithDialerMaxRetries(0)).
const RetryGrace = 250 * time.Millisecond

// stuck holds the endpoints whose last dial is still waiting for the peer's greeting.
var stuck sync.Map

// Bounded dials sock to endpoint and gives up when ctx ends. ctx must end the socket's connect
// retries too: it is the socket's own context (or a parent of it), or the socket makes one
// connect attempt per Dial. A dial still running RetryGrace after ctx ended is in the
// handshake: Bounded returns ErrNoGreeting, and until that dial ends (the peer greets, or drops
// the connection) every Bounded dial to the same endpoint returns ErrNoGreeting at once rather
// than open another connection the peer would hold too. When the peer drops it, the next dial
// connects afresh, so a real peer that takes the endpoint over is reached; when the peer greets
// late, the late connection is closed with sock, which the caller has given up by then.
func Bounded(ctx context.Context, sock zmq4.Socket, endpoint string) error {
	if _, ok := stuck.Load(endpoint); ok {
		return fmt.Errorf("an earlier dial is still waiting: %w", ErrNoGreeting)
	}
	done := make(chan error, 1)
	go func() { done <- sock.Dial(endpoint) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		return ctx.Err()
	case <-time.After(RetryGrace):
	}
	stuck.Store(endpoint, struct{}{})
	go func() {
		if err := <-done; err == nil {
			_ = sock.Close() // the caller closed it before this late connection joined it
		}
		stuck.Delete(endpoint)
	}()
	return ErrNoGreeting
}
