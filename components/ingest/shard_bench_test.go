package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// cpuNow is the process's user + system CPU time.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The shard benchmark runs each shard's ingester in a process of its own, as a fleet runs one
// decider replica per shard: the test binary started again with shardChildEnv set runs one
// ingester (TestMain) and talks to the benchmark over its stdin and stdout.
const (
	shardChildEnv   = "SLUICE_SHARDBENCH_CHILD"   // "drain" or "lag"
	shardTopicEnv   = "SLUICE_SHARDBENCH_TOPIC"   // the shard's KV topic
	shardRecordsEnv = "SLUICE_SHARDBENCH_RECORDS" // drain: the backlog; lag: warm-up records
	shardWantEnv    = "SLUICE_SHARDBENCH_WANT"    // lag: records to time after the warm-up
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(shardChildEnv); mode != "" {
		if err := shardChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "shard child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// shardResult is what one shard process reports when it is done.
type shardResult struct {
	WallNS  int64   `json:"wall_ns"`  // drain: from "go" to the last backlog record applied
	CPUNS   int64   `json:"cpu_ns"`   // the process's CPU time over the same span
	Blocks  int64   `json:"blocks"`   // blocks stored in the shard's index
	LagsUS  []int64 `json:"lags_us"`  // lag: produce timestamp to applied, per record
	SchedUS []int64 `json:"sched_us"` // lag: how late a 1 ms sleep woke up, per sleep
	GCCPU   float64 `json:"gc_cpu"`   // lag: the GC's share of the process's CPU time
}

func shardChild(mode string) error {
	brokers := flagenv.List(os.Getenv(testenv.EnvKafkaBrokers))
	if len(brokers) == 0 {
		return errors.New("no brokers in the environment")
	}
	records, _ := strconv.Atoi(os.Getenv(shardRecordsEnv))
	want, _ := strconv.Atoi(os.Getenv(shardWantEnv))
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		return err
	}
	// The decider's defaults (Config's zero values) but the partition refresh, so a topic's
	// partitions are all read from the start.
	cfg := KVConfig{Config: Config{Brokers: brokers, Topic: os.Getenv(shardTopicEnv), PartitionRefresh: 500 * time.Millisecond}}
	cfg.MaxBytes = 64 << 20
	k, err := NewKVIngester(slog.New(slog.DiscardHandler), cfg, ix, slots.NewTable(), prometheus.NewRegistry())
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var lags []int64
	timing := false
	k.s.applied = func(m *kafka.Message) {
		d := time.Since(m.Time)
		mu.Lock()
		if timing {
			lags = append(lags, d.Microseconds())
		}
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	in := bufio.NewReader(os.Stdin)
	applied := func() int64 { return sumOffsets(k.Offsets()) }
	waitUntil := func(timeout time.Duration, cond func() bool) error {
		deadline := time.Now().Add(timeout)
		for !cond() {
			select {
			case err := <-done:
				return fmt.Errorf("ingester stopped: %w", err)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out after %v (%d records applied)", timeout, applied())
			}
		}
		return nil
	}
	var res shardResult
	switch mode {
	case "drain":
		fmt.Println("ready")
		if _, err := in.ReadString('\n'); err != nil {
			return err
		}
		cpu0, t0 := cpuNow(), time.Now()
		go func() { done <- k.Run(ctx) }()
		if err := waitUntil(5*time.Minute, func() bool { return applied() >= int64(records) }); err != nil {
			return err
		}
		res.WallNS, res.CPUNS = time.Since(t0).Nanoseconds(), (cpuNow() - cpu0).Nanoseconds()
	case "lag":
		go func() { done <- k.Run(ctx) }()
		if err := waitUntil(time.Minute, func() bool { return applied() >= int64(records) }); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		mu.Lock()
		timing = true
		mu.Unlock()
		stopProbe := make(chan struct{})
		probed := make(chan []int64)
		go func() { probed <- schedProbe(stopProbe) }()
		cpu0 := cpuNow()
		gc0, busy0 := gcCPU()
		fmt.Println("ready")
		if err := waitUntil(2*time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(lags) >= want }); err != nil {
			return err
		}
		cpu := cpuNow() - cpu0
		close(stopProbe)
		res.SchedUS, res.CPUNS = <-probed, cpu.Nanoseconds()
		gc1, busy1 := gcCPU()
		res.GCCPU = (gc1 - gc0) / max(busy1-busy0, 1e-9)
		mu.Lock()
		res.LagsUS = lags
		mu.Unlock()
	default:
		return fmt.Errorf("%s=%q: want drain or lag", shardChildEnv, mode)
	}
	res.Blocks = k.Stats().BlocksStored
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// schedProbe sleeps 1 ms at a time until stop and returns how late each sleep woke up: the
// process's wait for a CPU, which every record's hops between threads also pay.
func schedProbe(stop <-chan struct{}) []int64 {
	var late []int64
	for {
		select {
		case <-stop:
			return late
		default:
		}
		t0 := time.Now()
		time.Sleep(time.Millisecond)
		late = append(late, (time.Since(t0) - time.Millisecond).Microseconds())
	}
}

// gcCPU returns, in seconds so far, the CPU time the GC used (mark assists, dedicated workers,
// pauses; not the idle-time mark workers, which only use CPUs nothing else wanted) and the CPU
// time the process used (all but idle), both runtime/metrics' estimates.
func gcCPU() (gc, busy float64) {
	s := []rtmetrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"},
	}
	rtmetrics.Read(s)
	v := func(i int) float64 {
		if s[i].Value.Kind() != rtmetrics.KindFloat64 {
			return 0
		}
		return s[i].Value.Float64()
	}
	return v(0) - v(1), v(2) - v(3)
}

// produceRTTs collects the time from writing each produce request to the broker to reading its
// answer (kgo's HookBrokerE2E): the broker's part of the acknowledgement.
type produceRTTs struct {
	mu sync.Mutex
	d  []time.Duration
}

func (h *produceRTTs) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != 0 || e2e.Err() != nil { // 0 is Produce
		return
	}
	h.mu.Lock()
	h.d = append(h.d, e2e.DurationE2E())
	h.mu.Unlock()
}

// brokerCPU is the CPU time the test broker's JVM has used so far, when scripts/test.sh started
// it (its pid file is in SLUICE_TEST_KAFKA_STATE), and false otherwise.
func brokerCPU() (time.Duration, bool) {
	pid, err := os.ReadFile(os.Getenv("SLUICE_TEST_KAFKA_STATE") + "/kafka.pid")
	if err != nil || os.Getenv("SLUICE_TEST_KAFKA_STATE") == "" {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command's closing parenthesis; utime and stime are the 12th and 13th,
	// in clock ticks of 1/100 s (USER_HZ on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, true
}

// shardProc is one running shard process.
type shardProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startShardProc(b *testing.B, mode, topic string, records, want int) *shardProc {
	b.Helper()
	c := proctest.StartChild(b, true, shardChildEnv+"="+mode, shardTopicEnv+"="+topic,
		shardRecordsEnv+"="+strconv.Itoa(records), shardWantEnv+"="+strconv.Itoa(want))
	p := &shardProc{cmd: c.Cmd, in: c.Stdin, out: bufio.NewReader(c.Stdout)}
	return p
}

func (p *shardProc) ready(b *testing.B) {
	b.Helper()
	line, err := p.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		b.Fatalf("shard process: want ready, got %q (%v)", line, err)
	}
}

func (p *shardProc) result(b *testing.B) shardResult {
	b.Helper()
	var r shardResult
	if err := json.NewDecoder(p.out).Decode(&r); err != nil {
		b.Fatalf("shard process result: %v", err)
	}
	if err := p.cmd.Wait(); err != nil {
		b.Fatalf("shard process: %v", err)
	}
	return r
}

// BenchmarkShardedIngest runs 1, 2, 3 and 4 model shards on one machine against the real broker,
// each shard's KV ingester (with its own real prefix index, at the decider's consumer defaults)
// in a process of its own on its own topic, as docs/decisions.md "Model-sharded deciders" lays
// them out. It reports
//   - events/s: all shards together draining a backlog of 20k records of 8 events per shard (from
//     "go" to the last shard done); shard-events/s, the median shard's own rate; cpu-us/event, the
//     shard processes' CPU time per event over that drain;
//   - lag-p50-ms / lag-p99-ms / lag-max-ms: produce timestamp to application over every shard's
//     records, each shard fed 1,000 records of 10 events per second (10k events/s per shard) for
//     3 s at once by this process; ack-p99-ms, the broker's acknowledgement of those records as
//     this process saw it; sched-p99-ms, how late a 1 ms sleep woke up in the worst shard process
//     (the wait for a CPU, which is the machine's, not the code's); gc-cpu-%, the GC's share of
//     the shard processes' CPU over the lag phase; lag-cpu-us/event, their CPU per event there.
//
// Each shard must store exactly its own topic's blocks. Run it several times (-count 1 in a
// loop, interleaved with BenchmarkIngestLag) for rounds.
func BenchmarkShardedIngest(b *testing.B) {
	brokers := benchBrokers(b)
	const maxShards, backlog, eventsPer = 4, 20_000, 8
	topics := make([]string, maxShards)
	for s := range topics {
		topics[s] = topicName(b, fmt.Sprintf("kv.s%d", s))
		produceShard(b, producer(b, brokers, topics[s]), s, backlog, eventsPer)
	}
	for _, n := range []int{1, 2, 3, 4} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			for range b.N {
				drain(b, topics[:n], backlog, eventsPer)
				shardLag(b, brokers, n)
			}
		})
	}
}

// produceShard writes records batches of eventsPer events from 16 engines of shard s.
func produceShard(b *testing.B, cl *kgo.Client, s, records, eventsPer int) {
	const engines = 16
	seqs := make([]uint64, engines)
	batch := make([]*kgo.Record, 0, 1000)
	for i := range records {
		e := i % engines
		seqs[e]++
		batch = append(batch, benchBatch(b, fmt.Sprintf("s%d-engine-%d", s, e), seqs[e], eventsPer))
		if len(batch) == cap(batch) || i == records-1 {
			produce(b, cl, batch...)
			batch = batch[:0]
		}
	}
}

// drain consumes every shard's backlog from the start, all shard processes at once.
func drain(b *testing.B, topics []string, records, eventsPer int) {
	procs := make([]*shardProc, len(topics))
	for i, t := range topics {
		procs[i] = startShardProc(b, "drain", t, records, 0)
	}
	for _, p := range procs {
		p.ready(b)
	}
	bcpu0, bok := brokerCPU()
	for _, p := range procs {
		if _, err := io.WriteString(p.in, "go\n"); err != nil {
			b.Fatal(err)
		}
	}
	var wall, cpu time.Duration
	rates := make([]float64, len(procs))
	for i, p := range procs {
		r := p.result(b)
		if r.Blocks != int64(records*eventsPer) {
			b.Fatalf("shard %d stored %d blocks, want exactly its own topic's %d", i, r.Blocks, records*eventsPer)
		}
		wall = max(wall, time.Duration(r.WallNS))
		cpu += time.Duration(r.CPUNS)
		rates[i] = float64(records*eventsPer) / time.Duration(r.WallNS).Seconds()
	}
	bcpu1, _ := brokerCPU()
	slices.Sort(rates)
	events := float64(len(topics) * records * eventsPer)
	if bok {
		b.ReportMetric(float64((bcpu1-bcpu0).Microseconds())/events, "broker-cpu-us/event")
	}
	b.ReportMetric(events/wall.Seconds(), "events/s")
	b.ReportMetric(rates[len(rates)/2], "shard-events/s")
	b.ReportMetric(float64(cpu.Microseconds())/events, "cpu-us/event")
}

// shardLag feeds n fresh shard topics at a fixed rate at once and reports the produce-to-apply
// delay over all their records.
func shardLag(b *testing.B, brokers []string, n int) {
	const eventsPer, perTick, ticks = 10, 10, 300 // 10 records per 10 ms: 1,000 records/s per shard
	var rtts produceRTTs
	clients := make([]*kgo.Client, n)
	procs := make([]*shardProc, n)
	for i := range n {
		topic := topicName(b, fmt.Sprintf("lag.s%d", i))
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
			kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Millisecond),
			kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.WithHooks(&rtts))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		clients[i] = cl
		// Warm up with every engine key the run uses (seq 1), so each partition it writes to
		// has been read once before the clock starts.
		for j := range perTick {
			produce(b, clients[i], benchBatch(b, fmt.Sprintf("lag-s%d-e%d", i, j), 1, 1))
		}
		procs[i] = startShardProc(b, "lag", topic, perTick, ticks*perTick)
	}
	for _, p := range procs {
		p.ready(b)
	}
	var mu sync.Mutex
	var acks []time.Duration
	bcpu0, bok := brokerCPU()
	tick := time.NewTicker(10 * time.Millisecond)
	var wg sync.WaitGroup
	seq := uint64(1)
	for range ticks {
		<-tick.C
		seq++
		for i, cl := range clients {
			for j := range perTick {
				r := benchBatch(b, fmt.Sprintf("lag-s%d-e%d", i, j), seq, eventsPer)
				wg.Add(1)
				cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						b.Error(err)
					}
					d := time.Since(r.Timestamp)
					mu.Lock()
					acks = append(acks, d)
					mu.Unlock()
				})
			}
		}
	}
	tick.Stop()
	wg.Wait()
	if bcpu1, _ := brokerCPU(); bok {
		b.ReportMetric(float64((bcpu1-bcpu0).Microseconds())/float64(n*ticks*perTick*eventsPer), "lag-broker-cpu-us/event")
	}
	var lags, sched []int64
	var cpu time.Duration
	var gc float64
	for i, p := range procs {
		r := p.result(b)
		if r.Blocks != int64(perTick+ticks*perTick*eventsPer) {
			b.Fatalf("shard %d stored %d blocks, want exactly its own topic's %d", i, r.Blocks, perTick+ticks*perTick*eventsPer)
		}
		lags = append(lags, r.LagsUS...)
		slices.Sort(r.SchedUS)
		if len(r.SchedUS) > 0 {
			sched = append(sched, r.SchedUS[len(r.SchedUS)*99/100])
		}
		cpu += time.Duration(r.CPUNS)
		gc += r.GCCPU * float64(r.CPUNS)
	}
	slices.Sort(lags)
	slices.Sort(acks)
	ms := func(us int64) float64 { return float64(us) / 1000 }
	b.ReportMetric(ms(lags[len(lags)/2]), "lag-p50-ms")
	b.ReportMetric(ms(lags[len(lags)*99/100]), "lag-p99-ms")
	b.ReportMetric(ms(lags[len(lags)-1]), "lag-max-ms")
	b.ReportMetric(ms(acks[len(acks)*99/100].Microseconds()), "ack-p99-ms")
	rtts.mu.Lock()
	slices.Sort(rtts.d)
	if len(rtts.d) > 0 {
		b.ReportMetric(ms(rtts.d[len(rtts.d)*99/100].Microseconds()), "broker-p99-ms")
	}
	rtts.mu.Unlock()
	if len(sched) > 0 {
		b.ReportMetric(ms(slices.Max(sched)), "sched-p99-ms")
	}
	b.ReportMetric(100*gc/float64(cpu), "gc-cpu-%")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*ticks*perTick*eventsPer), "lag-cpu-us/event")
}
