package enginelink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// maxReplayBatches bounds one replay answer (vLLM buffers 10,000 batches by default).
const maxReplayBatches = 200_000

// zmqReplayer asks an engine's replay ROUTER socket for buffered batches through a DEALER:
// request [empty, start seq (8 bytes BE)], answers [empty, topic, seq, payload] per batch in seq
// order, then the end marker [empty, "", 0xFFFFFFFFFFFFFFFF, ""]. One socket per request, so a
// late answer to an abandoned request can never be mistaken for the next one.
type zmqReplayer struct {
	logger *slog.Logger
}

var _ replayer = zmqReplayer{}

// replay returns the batches received before ctx ended or the end marker arrived. On a timeout or
// error it returns what it received so far (in order) with the error.
func (r zmqReplayer) replay(ctx context.Context, endpoint string, from uint64) ([]batch, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := zmq4.NewDealer(ctx, zmq4.WithLogger(slog.NewLogLogger(r.logger.Handler(), slog.LevelDebug)),
		zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(-1))
	defer sock.Close()
	if err := dialBounded(ctx, sock, endpoint); err != nil {
		return nil, fmt.Errorf("dial replay socket %s: %w", endpoint, err)
	}
	req := make([]byte, 8)
	binary.BigEndian.PutUint64(req, from)
	if err := sock.SendMulti(zmq4.NewMsgFrom([]byte{}, req)); err != nil {
		return nil, fmt.Errorf("send replay request to %s: %w", endpoint, err)
	}
	var out []batch
	for {
		msg, err := sock.Recv()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return out, fmt.Errorf("replay from %s (seq %d, %d batches received): %w", endpoint, from, len(out), err)
		}
		seq, payload, err := parseReplay(msg.Frames)
		if err != nil {
			return out, fmt.Errorf("replay from %s: %w", endpoint, err)
		}
		if seq == endSeq {
			return out, nil
		}
		out = append(out, batch{seq: seq, payload: payload, at: time.Now()})
		if len(out) >= maxReplayBatches {
			return out, fmt.Errorf("replay from %s: more than %d batches; the rest stay missing", endpoint, maxReplayBatches)
		}
	}
}

// stuckDials holds the endpoints whose last dial is still waiting for the peer's ZMTP greeting.
var stuckDials sync.Map

// errNoGreeting is dialBounded's error for a peer that took the TCP connection and did not greet.
var errNoGreeting = errors.New("the peer accepted the connection but sent no ZMTP greeting in time " +
	"(a stopped engine, or an endpoint that is not the engine's ZMQ replay socket: check kv_replay_endpoint)")

// dialBounded dials sock to endpoint and gives up when ctx ends. zmq4 bounds the TCP connect by
// the socket's context but not the ZMTP handshake after it, so a peer that accepts the
// connection and never greets would hold Dial — and the replay, and with it the rank's live
// stream waiting behind the replay — for as long as it keeps the connection open. The dial runs
// on its own goroutine; when ctx ends first the caller gets errNoGreeting and closes sock. The
// abandoned goroutine ends when the peer greets or closes; until then later dials to the same
// endpoint fail at once, so a silent peer holds at most one goroutine and connection.
func dialBounded(ctx context.Context, sock zmq4.Socket, endpoint string) error {
	if _, stuck := stuckDials.Load(endpoint); stuck {
		return fmt.Errorf("an earlier dial is still waiting: %w", errNoGreeting)
	}
	done := make(chan error, 1)
	go func() { done <- sock.Dial(endpoint) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// zmq4's connect retries end with ctx within one retry pause (100 ms here); a dial still
	// running after that is in the handshake.
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		return ctx.Err()
	case <-time.After(dialRetryGrace):
	}
	stuckDials.Store(endpoint, struct{}{})
	go func() {
		if err := <-done; err == nil {
			_ = sock.Close() // the caller closed it before this late connection joined it
		}
		stuckDials.Delete(endpoint)
	}()
	return errNoGreeting
}

// dialRetryGrace is how long dialBounded waits, once ctx has ended, for zmq4's connect retries to
// notice: longer than the replay socket's retry pause.
const dialRetryGrace = 250 * time.Millisecond
