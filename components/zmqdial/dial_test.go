package zmqdial_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/sluicehq/sluice/components/zmqdial"
	"github.com/sluicehq/sluice/internal/silentpeer"
)

// dial makes a socket as the callers do (one connect attempt per Dial) and dials it through
// Bounded with a timeout of d.
func dial(t *testing.T, endpoint string, d time.Duration) error {
	t.Helper()
	sock := zmq4.NewSub(context.Background(), zmq4.WithDialerMaxRetries(0))
	defer sock.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return zmqdial.Bounded(ctx, sock, endpoint)
}

// TestBounded: a silent peer (accepts, never greets) fails the dial with ErrNoGreeting instead
// of holding it; while that connection lasts, dials to the endpoint fail at once without
// opening another; once the peer hangs up the stuck dial ends and the next dial connects
// afresh; a peer that greets is dialled as before.
func TestBounded(t *testing.T) {
	peer := silentpeer.Listen(t)
	if err := dial(t, peer.Endpoint, 200*time.Millisecond); !errors.Is(err, zmqdial.ErrNoGreeting) {
		t.Fatalf("dial to a silent peer: %v, want ErrNoGreeting", err)
	}
	if err := dial(t, peer.Endpoint, 5*time.Second); !errors.Is(err, zmqdial.ErrNoGreeting) {
		t.Errorf("second dial while the first still waits: %v, want ErrNoGreeting", err)
	}
	if n := peer.Accepted(); n != 1 {
		t.Errorf("the silent peer took %d connections, want 1", n)
	}
	peer.HangUp()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := dial(t, peer.Endpoint, 2*time.Second)
		if err != nil && !errors.Is(err, zmqdial.ErrNoGreeting) {
			break // the stuck dial ended: this one tried the (now closed) port itself
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the peer hung up, dials still fail with %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	pub := zmq4.NewPub(context.Background())
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := dial(t, "tcp://"+pub.Addr().String(), 5*time.Second); err != nil {
		t.Errorf("dial to a real PUB: %v", err)
	}
}
