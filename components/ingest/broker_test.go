package ingest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/slots"
)

// Integration tests against the real Apache Kafka broker scripts/test.sh starts.

func TestBrokerEndToEnd(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	loadTopic, kvTopic := topicName(t, "load"), topicName(t, "kv")
	lp, kp := producer(t, brokers, loadTopic), producer(t, brokers, kvTopic)
	now := time.Now()
	// Create the topics before the consumers start (first produce auto-creates).
	produce(t, lp, loadProto(t, &sluicev1.LoadReport{EngineId: "e1", Epoch: 1, Seq: 1, CapturedAt: timestamppb.New(now), RunningRequests: 3}))
	produce(t, kp, kvProto(t, stored("e1", 0, 1, 1, 100, 2)))

	p := newPair(t, brokers, loadTopic, kvTopic, t.TempDir())
	runBG(t, p.load.Run)
	runBG(t, p.kv.Run)

	produce(t, lp,
		&kgo.Record{Key: []byte("e1"), Value: []byte{0x0a, 0xff}},                                                                  // truncated protobuf
		loadProto(t, &sluicev1.LoadReport{EngineId: "e1", Epoch: 1, Seq: 1, CapturedAt: timestamppb.New(now), RunningRequests: 9}), // duplicate
		loadProto(t, &sluicev1.LoadReport{EngineId: "e1", Epoch: 1, Seq: 2, CapturedAt: timestamppb.New(now), RunningRequests: 4}),
		loadProto(t, &sluicev1.LoadReport{EngineId: "e2", Epoch: 1, Seq: 1}), // no captured_at: malformed
	)
	bad := stored("e1", 0, 1, 2, 500, 2)
	bad.Events[0].GetBlockStored().BlockSize = 3 // token mismatch: the event is skipped, the batch counts
	produce(t, kp,
		&kgo.Record{Key: []byte("e1"), Value: []byte("\xff\xff\xff")},
		kvProto(t, bad),
	)
	produce(t, kp,
		kvProto(t, stored("e1", 0, 1, 3, 200, 3)),
		msgpackRecord("e1", "1", "4", vllmBatch(t, 0, []uint64{1 << 63, 1<<63 + 1}, make([]uint32, 32))),
		kvProto(t, removed("e1", 0, 1, 5, 100)),
	)
	idx := p.kv.Index().(*fakeIndex)
	waitFor(t, 30*time.Second, "KV applied", func() bool { return sumOffsets(p.kv.Offsets()) == 6 })
	waitFor(t, 30*time.Second, "load applied", func() bool { return sumOffsets(p.load.Offsets()) == 5 })
	if got := idx.count(); got != 6 {
		t.Errorf("blocks = %d, want 6 (2 + 3 + 2 - 1)", got)
	}
	s, _ := p.slots.Lookup("e1")
	// Judged a second after the reports' capture: on a freshly started broker the first records
	// can take longer than the 5 s freshness window to arrive, which this test is not about.
	if v, ok := p.table.SnapshotAt(now.Add(time.Second)).View(s); !ok || v.Running != 4 {
		t.Errorf("e1 view = %+v, %v; want running 4", v, ok)
	}
	for _, c := range []struct {
		stream *stream
		kind   string
	}{{p.load.s, "malformed_protobuf"}, {p.load.s, "malformed_report"}, {p.kv.s, "malformed_protobuf"}, {p.kv.s, "token_count_mismatch"}} {
		if got := testutil.ToFloat64(c.stream.m.bad.WithLabelValues(c.kind)); got != 1 {
			t.Errorf("%s bad{%s} = %v, want 1", c.stream.name, c.kind, got)
		}
	}
	if got := testutil.ToFloat64(p.load.s.m.skipped.WithLabelValues("duplicate")); got != 1 {
		t.Errorf("load skipped{duplicate} = %v, want 1", got)
	}
	if err := p.kv.Healthy(); err != nil {
		t.Errorf("Healthy = %v", err)
	}
}

func TestBrokerRestartMatchesReplay(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	checkRestart(t, brokers, topicName(t, "kv"), 6000)
}

// TestBrokerNonGoProducer produces vLLM msgpack batches with Python's
// kafka-python client and checks that they are consumed.
func TestBrokerNonGoProducer(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	python := pythonWithKafka(t)
	topic := topicName(t, "kv")
	kp := producer(t, brokers, topic)
	produce(t, kp, kvProto(t, stored("go-engine", 0, 1, 1, 100, 1))) // creates the topic

	p := newPair(t, brokers, "unused", topic, t.TempDir())
	runBG(t, p.kv.Run)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, filepath.Join("testdata", "produce_vllm.py"), strings.Join(brokers, ","), topic).CombinedOutput()
	if err != nil {
		t.Fatalf("python producer: %v\n%s", err, out)
	}
	t.Logf("python: %s", out)
	waitFor(t, 30*time.Second, "python records consumed", func() bool { return sumOffsets(p.kv.Offsets()) == 5 })
	idx := p.kv.Index().(*fakeIndex)
	got := idx.blocks[fakeKey{"py-engine", 0}]
	if _, ok := got[15760518052499183552]; !ok || len(got) != 2 {
		t.Errorf("py-engine blocks = %v, want 15760518052499183552 and 2^64-5", got)
	}
	if _, ok := got[1<<64-5]; !ok {
		t.Errorf("py-engine blocks = %v, want 2^64-5", got)
	}
	if got := testutil.ToFloat64(p.kv.s.m.bad.WithLabelValues("malformed_msgpack")); got != 1 {
		t.Errorf("bad{malformed_msgpack} = %v, want 1", got)
	}
}

// pythonWithKafka returns a Python interpreter with kafka-python and msgpack,
// from a virtualenv it creates once under ${SLUICE_CACHE:-~/.cache/sluice}.
// It fails the test in CI when it cannot, and skips elsewhere.
func pythonWithKafka(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("SLUICE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "sluice")
	}
	venv := filepath.Join(cache, "python-kafka-venv")
	python := filepath.Join(venv, "bin", "python")
	check := exec.Command(python, "-c", "import kafka, msgpack")
	if check.Run() == nil {
		return python
	}
	fail := func(format string, args ...any) {
		t.Helper()
		if testenv.InCI() {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	sys, err := exec.LookPath("python3")
	if err != nil {
		fail("python3 not found: install Python 3 to run the non-Go producer test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, sys, "-m", "venv", "--clear", venv).CombinedOutput(); err != nil {
		fail("create virtualenv %s: %v\n%s", venv, err, out)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(venv, "bin", "pip"), "install", "-q",
		"kafka-python==3.0.12", "msgpack==1.2.4").CombinedOutput(); err != nil {
		fail("pip install kafka-python msgpack into %s: %v\n%s", venv, err, out)
	}
	return python
}

// TestOutageKafkaRestart stops the broker mid-stream and starts it again:
// the consumer must resume by itself and end with exactly what a replay of
// the whole topic builds, every record applied once.
func TestOutageKafkaRestart(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := topicName(t, "kv")
	w := newWorkload(t, 6, 2, 99)
	kp := producer(t, brokers, topic)
	produce(t, kp, w.records(2000)...)

	p := newPairIndex(t, brokers, "unused", topic, t.TempDir(), true)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- p.kv.Run(ctx) }()
	waitFor(t, 30*time.Second, "first records", func() bool { return sumOffsets(p.kv.Offsets()) >= 2000 })

	testenv.StopKafka(t)
	time.Sleep(3 * time.Second)
	select {
	case err := <-runErr:
		t.Fatalf("Run returned during the outage: %v", err)
	default:
	}
	testenv.StartKafka(t)
	produce(t, kp, w.records(2000)...)

	sum, err := Replay(context.Background(), testLogger(t), ReplayConfig{Brokers: brokers, Topic: topic, Stream: StreamKV, Slots: p.slots})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 4000 {
		t.Errorf("replay read %d records, want 4000", sum.Records)
	}
	waitFor(t, 90*time.Second, "tail after restart", func() bool { return sumOffsets(p.kv.Offsets()) >= 4000 })
	if got, want := p.kv.Index().Digest(), sum.Digest; got != want {
		t.Errorf("digest after outage %x, replay %x", got, want)
	}
	if got, want := p.kv.Stats(), sum.KV; got != want {
		t.Errorf("stats after outage %+v, replay %+v (a record applied twice or lost)", got, want)
	}
	if err := p.kv.Healthy(); err != nil {
		t.Errorf("Healthy after restart = %v", err)
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

// logLines is a slog handler that keeps every record's message, at every level.
type logLines struct {
	mu    *sync.Mutex
	lines *[]string
}

func (h logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h logLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines = append(*h.lines, r.Message)
	return nil
}
func (h logLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logLines) WithGroup(string) slog.Handler      { return h }

// TestIdleFetchKeepsConnection: an idle partition's fetches are answered empty after MaxWait
// and the partition reader keeps its connection. kafka-go's reader took MaxWait as its own read
// deadline and asked the broker to wait three quarters of it, so with a short MaxWait (10 ms
// here, 100 ms by default) a broker answer a few milliseconds late dropped the connection ("i/o
// timeout") and the reader dialled again while records waited: 53 such drops in 5 s at 10 ms on
// the 2-vCPU test machine, and ingest-lag tails of hundreds of milliseconds on a busy host
// (BENCHMARKS.md, "Model shards on one machine"). The reader now gets a second beyond MaxWait.
func TestIdleFetchKeepsConnection(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := topicName(t, "kv")
	cl := producer(t, brokers, topic)
	produce(t, cl, kvProto(t, stored("e1", 0, 1, 1, 100, 2)))
	var mu sync.Mutex
	var lines []string
	cfg := KVConfig{Config: fastConfig(brokers, topic)}
	cfg.MaxWait = 10 * time.Millisecond
	k, err := NewKVIngester(slog.New(logLines{&mu, &lines}), cfg, newFakeIndex(slots.NewTable()), slots.NewTable(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	runBG(t, k.Run)
	waitFor(t, 30*time.Second, "the first record", func() bool { return sumOffsets(k.Offsets()) == 1 })
	time.Sleep(3 * time.Second) // 4 idle partitions, about 300 empty fetches each
	produce(t, cl, kvProto(t, stored("e1", 0, 1, 2, 200, 2)))
	waitFor(t, 30*time.Second, "the record after the idle time", func() bool { return sumOffsets(k.Offsets()) == 2 })
	mu.Lock()
	defer mu.Unlock()
	var drops []string
	for _, l := range lines {
		if strings.Contains(l, "kafka reader") && strings.Contains(l, "timeout") {
			drops = append(drops, l)
		}
	}
	if len(drops) > 0 {
		t.Errorf("%d partition-reader timeouts while idle with MaxWait 10ms, want none; first: %s", len(drops), drops[0])
	}
}
