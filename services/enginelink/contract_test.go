package enginelink_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/components/ingest"
	"github.com/sluicehq/sluice/services/enginelink"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/slots"
)

// runIngester runs the decider's real KV consumer (components/ingest with the real prefix index)
// on topic until the test ends.
func runIngester(t *testing.T, brokers []string, topic string) *ingest.KVIngester {
	t.Helper()
	idx, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := ingest.NewKVIngester(testLogger(t), ingest.KVConfig{Config: ingest.Config{Brokers: brokers, Topic: topic}},
		idx, slots.NewTable(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("ingest Run: %v", err)
		}
	})
	return k
}

// TestDeciderIngestsTheLinksRecords is the contract test with the decider's consumer: every
// forwarded record decodes and applies (no bad records, no rejected events); a replayed gap leaves
// the engine certain; a gap the engine could not replay makes it uncertain.
func TestDeciderIngestsTheLinksRecords(t *testing.T) {
	brokers := startBroker(t)
	eng := newFakeEngine(t, engineOpts{Replay: true})
	cfg := testConfig(brokers)
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP, KVReplayEndpoint: eng.ReplayEP()}}
	c := consume(t, brokers, cfg.KVTopic)
	runLink(t, cfg)
	k := runIngester(t, brokers, cfg.KVTopic)

	warmUp(t, eng, c, "e1")
	eng.lose(4)
	eng.lose(4)
	last := eng.publish(4)
	waitFor(t, "every batch applied", func() bool { return k.Stats().Batches == int64(last+1) })
	st := k.Stats()
	if st.Gaps != 0 || st.RejectedEvents != 0 || k.Uncertain("e1") {
		t.Fatalf("after a replayed gap: gaps %d, rejected events %d, uncertain %v; want 0, 0, false", st.Gaps, st.RejectedEvents, k.Uncertain("e1"))
	}
	if st.BlocksStored == 0 {
		t.Fatal("no block stored")
	}

	lost := eng.lose(1)
	eng.forget(lost)
	last = eng.publish(1)
	waitFor(t, "the batch after the unrecoverable gap applied", func() bool { return k.Stats().Batches == int64(last) })
	if !k.Uncertain("e1") {
		t.Error("engine certain after an unrecoverable gap; the decider must see the jump")
	}
}

// TestDeciderSeesRestartAsNewEpoch: the link's new epoch after an engine restart makes the
// decider's consumer drop the engine's old blocks (an epoch reset), and because the new epoch
// starts complete from seq 0 the engine is not uncertain.
func TestDeciderSeesRestartAsNewEpoch(t *testing.T) {
	brokers := startBroker(t)
	cfg := testConfig(brokers)
	cfg.KVBind = "tcp://127.0.0.1:" + itoa(freePort(t))
	opts := engineOpts{PubEP: cfg.KVBind, Dial: true, Topic: "kv@e1@m", Replay: true, ReplayEP: "tcp://127.0.0.1:" + itoa(freePort(t))}
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: "bind", KVReplayEndpoint: opts.ReplayEP}}
	c := consume(t, brokers, cfg.KVTopic)
	runLink(t, cfg)
	k := runIngester(t, brokers, cfg.KVTopic)
	eng := newFakeEngine(t, opts)
	warmUp(t, eng, c, "e1")
	oldLast := eng.seq - 1
	waitFor(t, "warm-up forwarded", func() bool { r := c.records("e1"); return r[len(r)-1].seq() == oldLast })
	oldEpoch := c.records("e1")[0].epoch()

	eng.restart(false)
	// The new life's first batches never reach the link, and are more than the old life had:
	// its seq does not go backwards, the replay buffer's payloads tell the restart.
	for range oldLast + 3 {
		eng.lose(2)
	}
	last := eng.publish(2)
	waitFor(t, "the new life forwarded", func() bool {
		r := c.records("e1")
		return r[len(r)-1].seq() == last && r[len(r)-1].epoch() != oldEpoch
	})
	waitFor(t, "everything applied", func() bool { return k.Stats().Batches == int64(len(c.records("e1"))) })
	var newer []kvRecord
	for _, r := range c.records("e1") {
		if r.epoch() != oldEpoch {
			newer = append(newer, r)
		}
	}
	if diff := cmp.Diff(upTo(last+1), seqs(newer)); diff != "" {
		t.Errorf("new epoch's seqs mismatch (-want +got):\n%s", diff)
	}
	st := k.Stats()
	if st.EpochResets != 1 || st.Gaps != 0 || k.Uncertain("e1") {
		t.Errorf("after the restart: epoch resets %d, gaps %d, uncertain %v; want 1, 0, false", st.EpochResets, st.Gaps, k.Uncertain("e1"))
	}
}
