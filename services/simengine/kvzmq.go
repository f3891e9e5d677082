package simengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/components/zmqdial"
	"github.com/sluicehq/sluice/services/simengine/engine"
)

// Defaults of vLLM's ZmqEventPublisher that the simulation keeps.
const (
	// DefaultKVReplayBuffer is how many published batches the replay socket can resend.
	DefaultKVReplayBuffer = 10_000
	// kvEventsHWM is the PUB high-water mark: beyond it ZMQ drops batches, as it would for a
	// real engine whose subscriber is too slow.
	kvEventsHWM = 100_000
)

// replayEnd is the seq frame of the replay socket's end marker: -1 as a signed 8-byte
// big-endian integer.
var replayEnd = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// zmqBinds reports whether a KV-event endpoint binds (a wildcard host, or ipc/inproc) or
// connects, by vLLM's rule: "bind stable, connect volatile". tcp://host:port connects, so
// the subscriber must bind.
func zmqBinds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// offsetEndpoint returns the endpoint of DP rank rank: the TCP port plus rank (port 0, any free
// port, stays 0), or for ipc and inproc the path with a "_dp<rank>" suffix. Rank 0 keeps the
// endpoint.
func offsetEndpoint(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	if strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	i := strings.LastIndexByte(endpoint, ':')
	port, err := strconv.Atoi(endpoint[i+1:])
	if !strings.HasPrefix(endpoint, "tcp://") || i < len("tcp://") || err != nil {
		return "", fmt.Errorf("endpoint %q: want tcp://host:port, ipc://path or inproc://name", endpoint)
	}
	if port == 0 { // an ephemeral port for every rank
		return endpoint, nil
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

// validateZMQEndpoint checks an endpoint's shape (the flag name is for the message).
func validateZMQEndpoint(flag, endpoint string) error {
	switch {
	case strings.HasPrefix(endpoint, "ipc://") && len(endpoint) > len("ipc://"),
		strings.HasPrefix(endpoint, "inproc://") && len(endpoint) > len("inproc://"):
		return nil
	case strings.HasPrefix(endpoint, "tcp://"):
		host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
		if p, perr := strconv.Atoi(port); err == nil && perr == nil && p >= 0 && p <= 65535 && host != "" {
			return nil
		}
	}
	return fmt.Errorf("-%s %q: want tcp://*:PORT (bind), tcp://HOST:PORT (connect), ipc://PATH or inproc://NAME", flag, endpoint)
}

// loraIDs numbers adapters from 1 in order, as vLLM's lora_int_id.
func loraIDs(adapters []string) map[string]int {
	ids := make(map[string]int, len(adapters))
	for i, a := range adapters {
		ids[a] = i + 1
	}
	return ids
}

type replayEntry struct {
	seq     uint64
	payload []byte
}

// zmqKVPublisher is one DP rank's KV-event publisher, wire-compatible with vLLM's and SGLang's
// ZmqEventPublisher: a PUB socket sending [topic, seq, payload] per batch (seq an 8-byte
// big-endian counter from 0 per process) and an optional ROUTER replay socket that resends
// buffered batches from a requested seq. The engine's Sink only appends to a pending list;
// Run batches it every KVInterval. Sockets exist only while Run runs.
type zmqKVPublisher struct {
	logger      *slog.Logger
	rank        int
	endpoint    string // offset by rank
	replayEP    string // offset by rank; "" without replay
	topic       []byte
	format      string
	loraIDs     map[string]int // vLLM lora_id of each adapter
	interval    time.Duration
	bufferSteps int

	queue eventQueue

	bufMu   sync.Mutex
	buf     []replayEntry // ring of the last bufferSteps batches
	bufHead int           // index of the oldest entry once the ring is full

	ready            chan struct{} // closed once the sockets are bound (or failed)
	readyErr         error
	pubAddr, repAddr string

	sock *zmqSocketState // the live PUB socket, for tests that wait for a subscriber

	batches, dropped, replays prometheus.Counter
	lastPublish               prometheus.Gauge
}

// zmqSocketState holds the current PUB socket under a lock while Run owns it (a connecting
// PUB gets a new socket per connection).
type zmqSocketState struct {
	mu  sync.Mutex
	pub zmq4.Socket
}

// set makes pub the publishing socket and closes the one it replaces.
func (s *zmqSocketState) set(pub zmq4.Socket) {
	s.mu.Lock()
	old := s.pub
	s.pub = pub
	s.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
}

func (s *zmqSocketState) send(msg zmq4.Msg) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pub.Send(msg)
}

// close closes the publishing socket.
func (s *zmqSocketState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pub != nil {
		_ = s.pub.Close()
	}
}

func newZMQKVPublisher(logger *slog.Logger, cfg Config, rank int, reg prometheus.Registerer) (*zmqKVPublisher, error) {
	ep, err := offsetEndpoint(cfg.KVEventsEndpoint, rank)
	if err != nil {
		return nil, fmt.Errorf("-kv-events-endpoint: %w", err)
	}
	rep, err := offsetEndpoint(cfg.KVReplayEndpoint, rank)
	if err != nil {
		return nil, fmt.Errorf("-kv-replay-endpoint: %w", err)
	}
	labels := prometheus.Labels{"engine_id": cfg.ID, "dp_rank": strconv.Itoa(rank)}
	p := &zmqKVPublisher{
		logger: logger.With(slog.String("component", "kv_zmq"), slog.Int("dp_rank", rank)),
		rank:   rank, endpoint: ep, replayEP: rep, topic: []byte(cfg.KVEventsTopic),
		format: cfg.kvEventsFormat(), loraIDs: loraIDs(cfg.Adapters()), interval: cfg.KVInterval, bufferSteps: cfg.KVReplayBuffer,
		ready: make(chan struct{}), sock: &zmqSocketState{},
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_simengine_zmq_kv_batches_total",
			Help: "KV-event batches published on the ZMQ PUB socket.", ConstLabels: labels}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_simengine_zmq_kv_events_dropped_total",
			Help: "KV events dropped before publishing because too many were pending.", ConstLabels: labels}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_simengine_zmq_kv_replay_requests_total",
			Help: "Replay requests served.", ConstLabels: labels}),
		lastPublish: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_simengine_zmq_kv_last_publish_timestamp_seconds",
			Help: "Unix time of the last published KV-event batch.", ConstLabels: labels}),
	}
	p.queue.dropped = p.dropped
	reg.MustRegister(p.batches, p.dropped, p.replays, p.lastPublish)
	return p, nil
}

// enqueue is the engine's Sink.
func (p *zmqKVPublisher) enqueue(evs []engine.Event) { p.queue.add(evs) }

// endpoints waits until Run has bound its sockets and returns endpoints a subscriber can use:
// a bound tcp wildcard becomes tcp://127.0.0.1:PORT; a connecting PUB returns its target.
func (p *zmqKVPublisher) endpoints(ctx context.Context) (pub, replay string, err error) {
	select {
	case <-ctx.Done():
		return "", "", ctx.Err()
	case <-p.ready:
		return p.pubAddr, p.repAddr, p.readyErr
	}
}

// subscribed reports whether some subscriber's subscription has reached the PUB socket
// (batches sent before that are lost, as with any ZMQ PUB).
func (p *zmqKVPublisher) subscribed() bool {
	p.sock.mu.Lock()
	defer p.sock.mu.Unlock()
	return p.sock.pub != nil && hasTopics(p.sock.pub)
}

func (p *zmqKVPublisher) setReady(err error) {
	p.readyErr = err
	close(p.ready)
}

// Run publishes until ctx is cancelled, then sends what is pending and closes the sockets.
// A connecting PUB keeps redialling its subscriber in the background (keepConnected);
// publishing goes on meanwhile and those batches are lost, as with a real engine.
func (p *zmqKVPublisher) Run(ctx context.Context) error {
	// The sockets outlive ctx by the final publish.
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	zlog := slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug)
	bind := zmqBinds(p.endpoint)
	newPub := func() (zmq4.Socket, error) {
		opts := []zmq4.Option{zmq4.WithLogger(zlog)}
		if !bind {
			// One dial attempt per socket: keepConnected owns the retries.
			opts = append(opts, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(pubDialTimeout))
		}
		pub := zmq4.NewPub(sctx, opts...)
		if err := pub.SetOption(zmq4.OptionHWM, kvEventsHWM); err != nil {
			_ = pub.Close()
			return nil, fmt.Errorf("kv events PUB: %w", err)
		}
		return pub, nil
	}
	pub, err := newPub()
	if err != nil {
		p.setReady(err)
		return err
	}
	p.sock.set(pub)
	defer p.sock.close()

	// g runs what lives as long as the sockets: the dial and the replay loop.
	g, gctx := errgroup.WithContext(ctx)
	stop := func() error {
		cancel()
		return g.Wait()
	}
	if bind {
		if err := pub.Listen(p.endpoint); err != nil {
			p.setReady(err)
			return fmt.Errorf("-kv-events-endpoint %s: %w", p.endpoint, err)
		}
		p.pubAddr = boundEndpoint(p.endpoint, pub.Addr())
	} else {
		p.pubAddr = p.endpoint
		g.Go(func() error { return p.keepConnected(sctx, newPub) })
	}
	if p.replayEP != "" {
		router := zmq4.NewRouter(sctx, zmq4.WithLogger(zlog))
		defer router.Close()
		if err := router.Listen(p.replayEP); err != nil {
			p.setReady(err)
			_ = stop()
			return fmt.Errorf("-kv-replay-endpoint %s: %w", p.replayEP, err)
		}
		p.repAddr = boundEndpoint(p.replayEP, router.Addr())
		g.Go(func() error { return p.serveReplay(sctx, router) })
	}
	p.setReady(nil)
	p.logger.Info("publishing KV events over ZMQ", slog.String("endpoint", p.endpoint), slog.Bool("binds", bind),
		slog.String("local_endpoint", p.pubAddr), slog.String("replay_endpoint", p.repAddr),
		slog.String("topic", string(p.topic)), slog.String("format", p.format))

	var seq uint64
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-gctx.Done():
			if ctx.Err() != nil { // shutdown, not a failed socket
				p.publish(&seq)
			}
			return stop()
		case <-t.C:
			p.publish(&seq)
		}
	}
}

// pubDialTimeout bounds one dial of a connecting PUB, the ZMTP handshake included
// (zmqdial): a subscriber that takes the connection and never greets is given up on and
// redialled, instead of holding keepConnected — and the sim's shutdown — in Dial.
var pubDialTimeout = 5 * time.Second

// Redialling of a connecting PUB (keepConnected).
const (
	// redialInterval separates two dial attempts, as libzmq's ZMQ_RECONNECT_IVL (100 ms).
	redialInterval = 100 * time.Millisecond
	// subscribeGrace is how long a new connection may go without a subscription before it
	// counts as lost (the peer accepted on a closing listener, or is not a subscriber).
	subscribeGrace = 2 * time.Second
	// watchInterval is how often the connection's subscriptions are looked at.
	watchInterval = 20 * time.Millisecond
)

// keepConnected keeps a connecting PUB connected to its subscriber until ctx ends, as libzmq
// does for a connecting socket (it redials every reconnect interval, whatever failed), and
// zmq4's own automatic reconnect does not: that redial is a single Dial from the connection's
// close callback, so a subscriber restarting on the same port — whose closing listener still
// completes the TCP connect but then resets the ZMTP handshake — ends it for good, and a loss
// noticed by a send redials from inside the socket's writer, which holds the lock the new
// connection needs (go-zeromq/zmq4 #124). Here each attempt is a fresh socket dialled once;
// the connected one replaces the publishing socket, and when its subscriptions vanish (zmq4
// drops a closed connection and its subscriptions) or never arrive within subscribeGrace, it
// is replaced by the next attempt. Each dial, handshake included, is bounded by pubDialTimeout
// (zmqdial.Bounded), so a subscriber that accepts and never greets cannot hold the loop.
// Batches published between two connections are lost, as from any PUB without a subscriber.
func (p *zmqKVPublisher) keepConnected(ctx context.Context, newPub func() (zmq4.Socket, error)) error {
	p.logger.Info("connecting KV-event PUB to its subscriber", slog.String("endpoint", p.endpoint))
	failing := false
	for ctx.Err() == nil {
		pub, err := newPub()
		if err != nil {
			return err
		}
		dctx, dcancel := context.WithTimeout(ctx, pubDialTimeout)
		err = zmqdial.Bounded(dctx, pub, p.endpoint)
		dcancel()
		if err != nil {
			_ = pub.Close()
			if !failing {
				p.logger.Info("KV-event subscriber not reachable; redialling", slog.String("endpoint", p.endpoint),
					slog.Duration("every", redialInterval), slog.Any("error", err))
				failing = true
			}
			sleepCtx(ctx, redialInterval)
			continue
		}
		failing = false
		p.sock.set(pub)
		if p.watch(ctx, pub) {
			p.logger.Info("KV-event PUB connected", slog.String("endpoint", p.endpoint))
			if !p.watchUntilGone(ctx, pub) {
				return nil
			}
			p.logger.Info("KV-event subscriber gone; redialling", slog.String("endpoint", p.endpoint))
		}
		sleepCtx(ctx, redialInterval)
	}
	return nil
}

// watch waits up to subscribeGrace for pub's first subscription and reports whether it came.
func (p *zmqKVPublisher) watch(ctx context.Context, pub zmq4.Socket) bool {
	deadline := time.Now().Add(subscribeGrace)
	for time.Now().Before(deadline) {
		if hasTopics(pub) {
			return true
		}
		if !sleepCtx(ctx, watchInterval) {
			return false
		}
	}
	return hasTopics(pub)
}

// watchUntilGone waits until pub has no subscription left (true) or ctx ends (false).
func (p *zmqKVPublisher) watchUntilGone(ctx context.Context, pub zmq4.Socket) bool {
	for hasTopics(pub) {
		if !sleepCtx(ctx, watchInterval) {
			return false
		}
	}
	return true
}

func hasTopics(s zmq4.Socket) bool {
	t, ok := s.(zmq4.Topics)
	return ok && len(t.Topics()) > 0
}

// sleepCtx waits d or until ctx ends, reporting whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publish sends the pending events as batches of at most maxEventsPerBatch on the current
// PUB socket.
func (p *zmqKVPublisher) publish(seq *uint64) {
	evs, skipped := p.queue.take()
	*seq += uint64(skipped) // dropped events leave a seq gap subscribers can see
	now := time.Now()
	for len(evs) > 0 {
		n := min(len(evs), maxEventsPerBatch)
		payload, err := encodeKVBatch(p.format, now, p.rank, evs[:n], p.loraIDs)
		evs = evs[n:]
		if err != nil {
			p.logger.Error("encode KV batch", slog.Any("error", err))
			continue
		}
		s := *seq
		*seq++
		var seqb [8]byte
		binary.BigEndian.PutUint64(seqb[:], s)
		// Buffered first, so a subscriber that saw the batch can always replay it.
		p.remember(s, payload)
		if err := p.sock.send(zmq4.NewMsgFrom(p.topic, seqb[:], payload)); err != nil {
			p.logger.Warn("send KV batch", slog.Uint64("seq", s), slog.Any("error", err))
		}
		p.batches.Inc()
		p.lastPublish.SetToCurrentTime()
	}
}

func (p *zmqKVPublisher) remember(seq uint64, payload []byte) {
	p.bufMu.Lock()
	defer p.bufMu.Unlock()
	if len(p.buf) < p.bufferSteps {
		p.buf = append(p.buf, replayEntry{seq, payload})
		return
	}
	p.buf[p.bufHead] = replayEntry{seq, payload}
	p.bufHead = (p.bufHead + 1) % len(p.buf)
}

// buffered returns the buffered batches with seq ≥ from, oldest first.
func (p *zmqKVPublisher) buffered(from uint64) []replayEntry {
	p.bufMu.Lock()
	defer p.bufMu.Unlock()
	var out []replayEntry
	for i := range p.buf {
		e := p.buf[(p.bufHead+i)%len(p.buf)]
		if e.seq >= from {
			out = append(out, e)
		}
	}
	return out
}

// serveReplay answers replay requests [identity, "", start seq] until ctx ends. vLLM replies
// [identity, "", topic, seq, payload] per batch and ends with [identity, "", "", -1, ""];
// SGLang leaves the topic frame out of both.
func (p *zmqKVPublisher) serveReplay(ctx context.Context, router zmq4.Socket) error {
	for {
		msg, err := router.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.logger.Warn("replay receive", slog.Any("error", err))
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			p.logger.Warn("invalid replay request: want [identity, empty, 8-byte start seq]", slog.Int("frames", len(msg.Frames)))
			continue
		}
		id, from := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.replays.Inc()
		for _, e := range p.buffered(from) {
			var seqb [8]byte
			binary.BigEndian.PutUint64(seqb[:], e.seq)
			if err := router.Send(p.replayFrame(id, seqb[:], e.payload, false)); err != nil {
				p.logger.Warn("replay send", slog.Any("error", err))
				break
			}
		}
		if err := router.Send(p.replayFrame(id, replayEnd, nil, true)); err != nil && ctx.Err() == nil {
			p.logger.Warn("replay send end marker", slog.Any("error", err))
		}
	}
}

func (p *zmqKVPublisher) replayFrame(id, seq, payload []byte, end bool) zmq4.Msg {
	if payload == nil {
		payload = []byte{}
	}
	if p.format == KVEventsSGLang {
		return zmq4.NewMsgFrom(id, []byte{}, seq, payload)
	}
	topic := p.topic
	if end {
		topic = []byte{}
	}
	return zmq4.NewMsgFrom(id, []byte{}, topic, seq, payload)
}

// boundEndpoint turns a bound listener's address into an endpoint a local peer can use.
func boundEndpoint(endpoint string, addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !strings.HasPrefix(endpoint, "tcp://") {
		return endpoint
	}
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// ErrNoKVEvents is returned by Server.KVEventsEndpoints when KV events over ZMQ are off.
var ErrNoKVEvents = errors.New("simengine: KV events over ZMQ are off (-kv-events-endpoint is empty)")
