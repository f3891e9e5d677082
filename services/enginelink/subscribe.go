package enginelink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/sluicehq/sluice/components/zmqdial"
)

// item is what a rank feeder receives: a live batch, or a request to resynchronise after the
// link (re)connected to the rank's publisher.
type item struct {
	b      batch
	resync bool
}

// redialDelay separates a lost KV connection from the next dial.
const redialDelay = 200 * time.Millisecond

// logEvery bounds repeated warnings of one kind.
const logEvery = 30 * time.Second

// throttle lets a log line through at most once per logEvery and counts what it held back.
type throttle struct {
	mu   sync.Mutex
	last time.Time
	held int
}

// allow reports whether to log now and how many lines were held back since the last one.
func (t *throttle) allow(now time.Time) (bool, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < logEvery {
		t.held++
		return false, 0
	}
	held := t.held
	t.last, t.held = now, 0
	return true, held
}

// zmqLogger adapts slog for zmq4's internal messages.
func zmqLogger(l *slog.Logger) zmq4.Option {
	return zmq4.WithLogger(slog.NewLogLogger(l.Handler(), slog.LevelDebug))
}

// kvDialTimeout bounds one dial of a rank's KV publisher, the ZMTP handshake included
// (zmqdial): a publisher that takes the connection and never greets is given up on and
// redialled, instead of holding the rank's subscriber — and the link's shutdown — in Dial.
var kvDialTimeout = 5 * time.Second

// maxKVRedial caps the pause between two failed dials of a KV publisher: an engine that comes
// (back) up is subscribed to within it.
const maxKVRedial = 500 * time.Millisecond

// subscribeRank dials one DP rank's publisher and feeds its batches to out until ctx ends,
// reconnecting with backoff when the connection drops (an engine restart closes it). Every
// (re)connection asks the feeder to resync, so what the engine published meanwhile is replayed.
// Each dial is one connect attempt and handshake bounded by kvDialTimeout; the loop owns the
// retries, and logs a failing endpoint at most once per logEvery.
func (l *Link) subscribeRank(ctx context.Context, id string, rank int, endpoint string, out chan<- item) {
	logger := l.logger.With(slog.String("engine_id", id), slog.Int("dp_rank", rank), slog.String("endpoint", endpoint))
	connected := l.m.kvConnected.WithLabelValues(id)
	backoff := 100 * time.Millisecond
	var failing throttle
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		sub := zmq4.NewSub(sctx, zmqLogger(logger), zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(kvDialTimeout))
		_ = sub.SetOption(zmq4.OptionSubscribe, "") // cannot fail before the socket has peers
		dctx, dcancel := context.WithTimeout(sctx, kvDialTimeout)
		err := zmqdial.Bounded(dctx, sub, endpoint)
		dcancel()
		if err != nil {
			_ = sub.Close()
			cancel()
			if ctx.Err() == nil {
				if ok, held := failing.allow(time.Now()); ok {
					if errors.Is(err, zmqdial.ErrNoGreeting) {
						err = fmt.Errorf("%w within %v (a wedged engine, or a kv_events_endpoint that is not the engine's ZMQ PUB socket)", err, kvDialTimeout)
					}
					logger.Warn("cannot connect to the engine's KV publisher; retrying", slog.Any("error", err),
						slog.Duration("every", maxKVRedial), slog.Int("failures_not_logged", held))
				}
				sleep(ctx, backoff)
				backoff = min(2*backoff, maxKVRedial)
			}
			continue
		}
		failing = throttle{}
		backoff = 100 * time.Millisecond
		connected.Inc()
		logger.Info("subscribed to the engine's KV events")
		if send(ctx, out, item{resync: true}) {
			l.receive(sctx, sub, func(frames [][]byte, at time.Time) bool {
				_, seq, payload, err := parseLive(frames)
				if err != nil {
					l.m.kvMalformed.WithLabelValues("frames").Inc()
					return true
				}
				return send(ctx, out, item{b: batch{seq: seq, payload: payload, at: at}})
			})
		}
		connected.Dec()
		_ = sub.Close()
		cancel()
		if ctx.Err() == nil {
			// Redial after a pause: an engine that is going away may still accept a connection on
			// its closing listener, which would then never deliver anything.
			logger.Info("KV publisher connection lost; reconnecting", slog.Duration("after", redialDelay))
			sleep(ctx, redialDelay)
		}
	}
}

// receive reads sub until it fails or handle returns false. A SUB socket reports a dropped
// peer as a Recv error.
func (l *Link) receive(ctx context.Context, sub zmq4.Socket, handle func(frames [][]byte, at time.Time) bool) {
	for {
		msg, err := sub.Recv()
		if err != nil || ctx.Err() != nil {
			return
		}
		if !handle(msg.Frames, time.Now()) {
			return
		}
	}
}

// runBind binds the -kv-bind socket(s) and routes each message to its engine by topic.
func (l *Link) runBind(ctx context.Context, socks []zmq4.Socket) {
	var wg sync.WaitGroup
	for port, sub := range socks {
		wg.Go(func() {
			for ctx.Err() == nil {
				msg, err := sub.Recv()
				if err != nil {
					// One peer went away (an engine restarting); the socket keeps serving others.
					continue
				}
				l.routeBound(ctx, port, msg.Frames, time.Now())
			}
		})
	}
	wg.Wait()
}

// bindSockets binds every -kv-bind port; an error names the endpoint.
func (l *Link) bindSockets(ctx context.Context) ([]zmq4.Socket, error) {
	var socks []zmq4.Socket
	for p := range l.cfg.KVBindPorts {
		ep, _ := rankEndpoint(l.cfg.KVBind, p)                    // validated
		ep = strings.Replace(ep, "tcp://*:", "tcp://0.0.0.0:", 1) // ZMQ's "all interfaces"
		sub := zmq4.NewSub(ctx, zmqLogger(l.logger))
		_ = sub.SetOption(zmq4.OptionSubscribe, "")
		if err := sub.Listen(ep); err != nil {
			_ = sub.Close()
			for _, s := range socks {
				_ = s.Close()
			}
			return nil, &bindError{endpoint: ep, err: err}
		}
		l.logger.Info("KV bind socket listening; engines connect and publish with topic kv@<engine id>@<model>", slog.String("endpoint", ep))
		socks = append(socks, sub)
	}
	return socks, nil
}

type bindError struct {
	endpoint string
	err      error
}

func (e *bindError) Error() string {
	return "-kv-bind: bind " + e.endpoint + ": " + e.err.Error() + " (is the port free? use another with -kv-bind)"
}

func (e *bindError) Unwrap() error { return e.err }

// routeBound hands one bound-socket message to its engine rank's feeder, without blocking: a
// full feeder drops it (counted), which the feeder then sees as a gap and replays. A feeder
// this starts runs under ctx until its engine stops.
func (l *Link) routeBound(ctx context.Context, port int, frames [][]byte, at time.Time) {
	topic, seq, payload, err := parseLive(frames)
	if err != nil {
		l.m.kvMalformed.WithLabelValues("frames").Inc()
		return
	}
	er := l.byTopic(topic)
	if er == nil {
		l.m.kvUnknown.Inc()
		if ok, held := l.unknownLog.allow(at); ok {
			l.logger.Warn("KV message with an unknown topic on the bound socket: set the engine's topic to kv@<engine id>@<model> of a followed engine",
				slog.String("topic", topic), slog.Int("held_back", held))
		}
		return
	}
	rank, ok := batchRank(payload)
	if !ok {
		rank = port
	}
	w := er.feeder(ctx, rank)
	if w == nil {
		return // the engine is being stopped
	}
	select {
	case w.in <- item{b: batch{seq: seq, payload: payload, at: at}}:
	default:
		w.drops.Inc()
	}
}

// send delivers it unless ctx ends first.
func send(ctx context.Context, out chan<- item, it item) bool {
	select {
	case out <- it:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
