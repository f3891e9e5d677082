package ingest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// gauge reads one sample of a gauge family from reg; ok is false when absent.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestOutageKafkaVisible stops the broker under a running KV ingester with
// the default health settings: the loss must show in
// sluice_ingest_broker_reachable and Healthy within 10 s (kafka-go's readers
// alone retry silently and never report it), and consumption must resume by
// itself soon after the broker returns.
func TestOutageKafkaVisible(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := topicName(t, "kv")
	w := newWorkload(t, 4, 1, 7)
	kp := producer(t, brokers, topic)
	produce(t, kp, w.records(200)...)

	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{Brokers: brokers, Topic: topic} // every other field at its default
	kv, err := NewKVIngester(testLogger(t), KVConfig{Config: cfg}, ix, slots.NewTable(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- kv.Run(ctx) }()
	reachable := func() float64 {
		v, _ := gauge(t, reg, "sluice_ingest_broker_reachable", map[string]string{"stream": "kv"})
		return v
	}
	waitFor(t, 30*time.Second, "first records", func() bool { return sumOffsets(kv.Offsets()) >= 200 })
	waitFor(t, 10*time.Second, "reachable = 1", func() bool { return reachable() == 1 })

	testenv.StopKafka(t)
	stopped := time.Now()
	waitFor(t, 10*time.Second, "sluice_ingest_broker_reachable = 0 after the broker stopped", func() bool { return reachable() == 0 })
	shown := time.Since(stopped)
	waitFor(t, 15*time.Second, "Healthy reports the lost broker", func() bool { return kv.Healthy() != nil })
	t.Logf("broker loss visible in metrics after %v, in Healthy after %v", shown.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))

	testenv.StartKafka(t)
	back := time.Now()
	produce(t, kp, w.records(200)...)
	produced := time.Since(back)
	waitFor(t, 30*time.Second, "consumption resumes", func() bool { return sumOffsets(kv.Offsets()) >= 400 })
	t.Logf("after the broker returned: produce acknowledged in %v, consumed %v after it", produced.Round(time.Millisecond),
		(time.Since(back) - produced).Round(time.Millisecond))
	waitFor(t, 10*time.Second, "Healthy again", func() bool { return kv.Healthy() == nil && reachable() == 1 })
	if lag, ok := gauge(t, reg, "sluice_ingest_lag_records", map[string]string{"stream": "kv"}); !ok || lag != 0 {
		t.Errorf("lag after catching up = %v (present %v), want 0", lag, ok)
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}
