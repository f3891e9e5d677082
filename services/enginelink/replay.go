package enginelink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/sluicehq/sluice/components/zmqdial"
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
	// The handshake is bounded too (zmqdial): a replay socket that accepts and never greets
	// fails this replay in time instead of stalling the rank's live stream behind it.
	if err := zmqdial.Bounded(ctx, sock, endpoint); err != nil {
		if errors.Is(err, zmqdial.ErrNoGreeting) {
			err = fmt.Errorf("%w (a stopped engine, or an endpoint that is not the engine's ZMQ replay socket: check kv_replay_endpoint)", err)
		}
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
