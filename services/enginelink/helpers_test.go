package enginelink_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testrun"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/kafkadev"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/services/enginelink"
)

// waitLimit bounds every wait for a condition; reaching it fails the test.
const waitLimit = 30 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startBroker starts an in-process Kafka-protocol broker for the test.
func startBroker(t testing.TB) []string {
	t.Helper()
	b, err := kafkadev.Start(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), kafkadev.KVTopic, kafkadev.LoadTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// topicSeq makes topic names unique within the process (the real broker is shared).
var topicSeq atomic.Int64

// forEachBroker runs f against the in-process broker and against the real Kafka broker of
// scripts/test.sh (skipped outside CI when none is configured).
func forEachBroker(t *testing.T, f func(t *testing.T, brokers []string)) {
	t.Run("kfake", func(t *testing.T) { f(t, startBroker(t)) })
	t.Run("kafka", func(t *testing.T) { f(t, testenv.KafkaBrokers(t)) })
}

// testConfig is a link config on brokers with no HTTP listener and topics of its own.
func testConfig(brokers []string) enginelink.Config {
	cfg := enginelink.DefaultConfig()
	n := strconv.FormatInt(time.Now().UnixNano()%1e12, 10) + "-" + strconv.FormatInt(topicSeq.Add(1), 10)
	cfg.KVTopic, cfg.LoadTopic = "test.kv."+n, "test.load."+n
	cfg.KafkaBrokers = strings.Join(brokers, ",")
	cfg.HTTPAddr = ""
	cfg.ScrapeInterval = 20 * time.Millisecond
	cfg.ReplayTimeout = 5 * time.Second
	return cfg
}

// runLink builds and runs a link until the test ends; Run must return nil.
func runLink(t testing.TB, cfg enginelink.Config) *enginelink.Link {
	t.Helper()
	l, err := enginelink.New(testLogger(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	testrun.Background(t, l.Run)
	return l
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metricValue sums the samples of name whose labels include want.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// kvRecord is one consumed KV record, headers flattened.
type kvRecord struct {
	Key     string
	Value   []byte
	Headers map[string]string
}

func (r kvRecord) seq() uint64 { n, _ := strconv.ParseUint(r.Headers["sluice-seq"], 10, 64); return n }
func (r kvRecord) epoch() uint64 {
	n, _ := strconv.ParseUint(r.Headers["sluice-epoch"], 10, 64)
	return n
}

// consumer reads one topic from the start in the background.
type consumer struct {
	mu   sync.Mutex
	recs []kvRecord
}

func consume(t testing.TB, brokers []string, topic string) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				h := map[string]string{}
				for _, x := range r.Headers {
					h[x.Key] = string(x.Value)
				}
				c.mu.Lock()
				c.recs = append(c.recs, kvRecord{Key: string(r.Key), Value: r.Value, Headers: h})
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return c
}

// records returns a copy of what was consumed so far, optionally only of key.
func (c *consumer) records(key string) []kvRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []kvRecord
	for _, r := range c.recs {
		if key == "" || r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

// vllmBatch encodes a vLLM map-form batch with n BlockStored events (array form, as vLLM
// sends), tagged with id so tests can recognise the payload; rank < 0 leaves dp_rank nil.
func vllmBatch(t testing.TB, tag uint64, n, rank int) []byte {
	t.Helper()
	events := make([]any, n)
	for i := range events {
		tokens := make([]uint32, 16)
		for j := range tokens {
			tokens[j] = uint32(tag*1000 + uint64(i*16+j))
		}
		events[i] = map[string]any{
			"type": "BlockStored", "block_hashes": []uint64{tag<<16 | uint64(i) | 1<<63}, "parent_block_hash": nil,
			"token_ids": tokens, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil,
			"extra_keys": []any{nil}, "group_idx": 0, "kv_cache_spec_kind": "full_attention",
		}
	}
	var dp any
	if rank >= 0 {
		dp = rank
	}
	b, err := msgpack.Marshal([]any{1789095808.8378847 + float64(tag), events, dp})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeEngine is a vLLM-like publisher: a zmq4 PUB (binding or connecting) plus a replay ROUTER
// buffering every batch it "published", lost ones included.
type fakeEngine struct {
	t      testing.TB
	topic  string
	rank   int
	pubEP  string
	dial   bool
	pub    zmq4.Socket
	router zmq4.Socket

	mu     sync.Mutex
	seq    uint64
	buffer []buffered
	done   chan struct{}
}

type buffered struct {
	seq     uint64
	payload []byte
}

// engineOpts configures a fake engine. With Dial the PUB connects to PubEP (the link binds);
// otherwise it binds PubEP ("" = a free loopback port). Replay off means no ROUTER.
type engineOpts struct {
	PubEP  string
	Dial   bool
	Topic  string
	Rank   int
	Replay bool
	// ReplayEP is where the replay ROUTER listens ("" = a free loopback port).
	ReplayEP string
}

func newFakeEngine(t testing.TB, o engineOpts) *fakeEngine {
	t.Helper()
	e := &fakeEngine{t: t, topic: o.Topic, rank: o.Rank, pubEP: o.PubEP, dial: o.Dial, done: make(chan struct{})}
	if e.pubEP == "" {
		e.pubEP = "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))
	}
	e.openPub()
	if o.Replay {
		e.router = zmq4.NewRouter(context.Background(), zmq4.WithLogger(slog.NewLogLogger(testLogger(t).Handler(), slog.LevelDebug)))
		ep := o.ReplayEP
		if ep == "" {
			ep = "tcp://127.0.0.1:0"
		}
		if err := e.router.Listen(ep); err != nil {
			t.Fatal(err)
		}
		go e.serveReplay()
	}
	t.Cleanup(e.close)
	return e
}

func (e *fakeEngine) openPub() {
	e.pub = zmq4.NewPub(context.Background(), zmq4.WithDialerRetry(20*time.Millisecond), zmq4.WithDialerMaxRetries(-1),
		zmq4.WithLogger(slog.NewLogLogger(testLogger(e.t).Handler(), slog.LevelDebug)))
	var err error
	if e.dial {
		err = e.pub.Dial(e.pubEP)
	} else {
		err = e.pub.Listen(e.pubEP)
	}
	if err != nil {
		e.t.Fatalf("fake engine PUB %s: %v", e.pubEP, err)
	}
}

func (e *fakeEngine) close() {
	_ = e.pub.Close()
	if e.router != nil {
		_ = e.router.Close()
		<-e.done
	}
}

// ReplayEP is the replay socket's endpoint.
func (e *fakeEngine) ReplayEP() string { return "tcp://" + e.router.Addr().String() }

// publish publishes the next batch (n events) and returns its seq.
func (e *fakeEngine) publish(n int) uint64 { return e.emit(n, true) }

// lose advances the seq by one batch that subscribers never see; it stays replayable.
func (e *fakeEngine) lose(n int) uint64 { return e.emit(n, false) }

func (e *fakeEngine) emit(n int, send bool) uint64 {
	e.mu.Lock()
	seq := e.seq
	e.seq++
	payload := vllmBatch(e.t, seq, n, e.rank)
	e.buffer = append(e.buffer, buffered{seq, payload})
	e.mu.Unlock()
	if send {
		s := make([]byte, 8)
		binary.BigEndian.PutUint64(s, seq)
		if err := e.pub.SendMulti(zmq4.NewMsgFrom([]byte(e.topic), s, payload)); err != nil {
			e.t.Errorf("publish seq %d: %v", seq, err)
		}
	}
	return seq
}

// forget drops seqs from the replay buffer (batches the engine can no longer replay).
func (e *fakeEngine) forget(seqs ...uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := e.buffer[:0]
	for _, b := range e.buffer {
		drop := false
		for _, s := range seqs {
			drop = drop || b.seq == s
		}
		if !drop {
			kept = append(kept, b)
		}
	}
	e.buffer = kept
}

// restart simulates a new engine process: seq back to 0, empty replay buffer; with reconnect
// the PUB socket is closed and opened again (the link's connection drops).
func (e *fakeEngine) restart(reconnect bool) {
	e.mu.Lock()
	e.seq, e.buffer = 0, nil
	e.mu.Unlock()
	if reconnect {
		_ = e.pub.Close()
		e.openPub()
	}
}

// payloadOf is what the engine published with seq (in its current life).
func (e *fakeEngine) payloadOf(seq uint64) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.buffer {
		if b.seq == seq {
			return b.payload
		}
	}
	return nil
}

func (e *fakeEngine) serveReplay() {
	defer close(e.done)
	for {
		msg, err := e.router.Recv()
		if err != nil {
			if errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "closed") {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			e.t.Errorf("replay request: want [identity, empty, seq], got %d frames", len(msg.Frames))
			continue
		}
		id, from := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		e.mu.Lock()
		var out []buffered
		for _, b := range e.buffer {
			if b.seq >= from {
				out = append(out, b)
			}
		}
		e.mu.Unlock()
		for _, b := range out {
			s := make([]byte, 8)
			binary.BigEndian.PutUint64(s, b.seq)
			_ = e.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte(e.topic), s, b.payload))
		}
		end := make([]byte, 8)
		binary.BigEndian.PutUint64(end, math.MaxUint64)
		_ = e.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte{}, end, []byte{}))
	}
}

// warmUp publishes batches until the link forwarded at least one of them, so the subscription
// is known to be live; the slow-joiner losses before it are replayed (or forwarded as a jump).
func warmUp(t testing.TB, e *fakeEngine, c *consumer, key string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for len(c.records(key)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("link forwarded nothing of engine %s within %v", key, waitLimit)
		}
		e.publish(2)
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// seqs lists the records' seqs.
func seqs(recs []kvRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.seq()
	}
	return out
}

// upTo returns 0..n-1.
func upTo(n uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i)
	}
	return out
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func itoa(n int) string { return strconv.Itoa(n) }
