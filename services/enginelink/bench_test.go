package enginelink_test

import (
	"encoding/binary"
	"math"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/services/enginelink"
)

// BenchmarkForwardVLLM16 publishes b.N vLLM batches of 16 map-form BlockStored events on a
// zmq4 PUB socket; the link receives, sequences and produces them (acks=all) until every one is
// acknowledged. It reports events/s and the p99 of ZMQ receive → Kafka ack (interpolated in
// sluice_enginelink_kafka_ack_latency_seconds, as histogram_quantile does). broker=kafka is the
// real broker of scripts/test.sh (run with SLUICE_TEST_RACE=0 and -cpu 1 for the recorded
// figures); broker=kfake the in-process one.
//
// rate=max publishes as fast as the PUB socket takes batches (throughput; the latency is then
// queueing); rate=18750 paces 18,750 batches/s = 300k events/s, the goal, and reports the latency
// at that load.
func BenchmarkForwardVLLM16(b *testing.B) {
	for _, rate := range []int{0, 18750} {
		name := "rate=max"
		if rate > 0 {
			name = "rate=" + itoa(rate)
		}
		b.Run("broker=kafka/"+name, func(b *testing.B) { benchForward(b, testenv.KafkaBrokers(b), rate) })
		b.Run("broker=kfake/"+name, func(b *testing.B) { benchForward(b, startBroker(b), rate) })
	}
}

func benchForward(b *testing.B, brokers []string, rate int) {
	b.ReportAllocs()
	eng := newFakeEngine(b, engineOpts{})
	cfg := testConfig(brokers)
	cfg.KVTopic = "bench.kv." + strings.NewReplacer("/", ".", "=", "-").Replace(b.Name()) + "." + itoa(int(time.Now().UnixNano()%1e9))
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP}}
	l := runLink(b, cfg)
	reg := l.Registry()
	acked := func() float64 {
		return metricValue(b, reg, "sluice_enginelink_kafka_records_acked_total", map[string]string{"topic": cfg.KVTopic})
	}
	// Warm up: the subscription is live and the topic exists once one record is acked.
	waitFor(b, "the first ack", func() bool {
		eng.publish(16)
		time.Sleep(5 * time.Millisecond)
		return acked() > 0
	})
	dropped := func() float64 {
		return metricValue(b, reg, "sluice_enginelink_kafka_records_dropped_total", map[string]string{"topic": cfg.KVTopic})
	}
	waitFor(b, "warm-up drained", func() bool {
		return acked()+dropped() >= metricValue(b, reg, "sluice_enginelink_kv_batches_forwarded_total", nil)
	})
	base, dropBase := acked(), dropped()
	hist0 := latencyBuckets(b, reg, cfg.KVTopic)
	payload := vllmBatch(b, 1, 16, 0)
	start := eng.seq
	seqs := make([]byte, 8*b.N) // the PUB queues frames: each message needs its own seq bytes

	b.ResetTimer()
	cpu0 := cpuTime(b)
	t0 := time.Now()
	for i := range b.N {
		if rate > 0 && i%64 == 0 {
			if ahead := time.Duration(float64(i)/float64(rate)*1e9) - time.Since(t0); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		seq := seqs[8*i : 8*i+8]
		binary.BigEndian.PutUint64(seq, start+uint64(i))
		if err := eng.pub.SendMulti(zmq4.NewMsgFrom(nil, seq, payload)); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for acked()-base+dropped()-dropBase < float64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("only %v of %d acked, %v dropped, after 2 minutes", acked()-base, b.N, dropped()-dropBase)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	// CPU of the whole test process (link, the in-process PUB publisher, the runtime) per
	// event: the figure the shared machine's load does not distort.
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(16*b.N), "cpu-us/event")
	if d := dropped() - dropBase; d > 0 {
		b.ReportMetric(d, "dropped")
	}
	b.ReportMetric(float64(16*b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "batches/s")
	b.ReportMetric(quantile(0.99, diffBuckets(latencyBuckets(b, reg, cfg.KVTopic), hist0))*1e3, "p99-ms")
	b.ReportMetric(quantile(0.50, diffBuckets(latencyBuckets(b, reg, cfg.KVTopic), hist0))*1e3, "p50-ms")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type bucket struct {
	upper float64
	count float64 // cumulative
}

func latencyBuckets(b *testing.B, reg prometheus.Gatherer, topic string) []bucket {
	fams, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "sluice_enginelink_kafka_ack_latency_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "topic" && lp.GetValue() == topic {
					var out []bucket
					for _, bk := range m.GetHistogram().GetBucket() {
						out = append(out, bucket{bk.GetUpperBound(), float64(bk.GetCumulativeCount())})
					}
					out = append(out, bucket{math.Inf(1), float64(m.GetHistogram().GetSampleCount())})
					return out
				}
			}
		}
	}
	return nil
}

func diffBuckets(now, before []bucket) []bucket {
	out := make([]bucket, len(now))
	for i := range now {
		out[i] = now[i]
		if i < len(before) {
			out[i].count -= before[i].count
		}
	}
	return out
}

// quantile interpolates linearly inside the bucket holding q, like PromQL's histogram_quantile.
func quantile(q float64, bs []bucket) float64 {
	sort.Slice(bs, func(i, j int) bool { return bs[i].upper < bs[j].upper })
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].count
	lower, prev := 0.0, 0.0
	for _, bk := range bs {
		if bk.count >= rank {
			if math.IsInf(bk.upper, 1) {
				return lower
			}
			return lower + (bk.upper-lower)*(rank-prev)/(bk.count-prev)
		}
		lower, prev = bk.upper, bk.count
	}
	return lower
}
