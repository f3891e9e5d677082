package enginelink_test

import (
	"bytes"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/services/enginelink"
)

// TestConnectForwardsPayloadUnchanged: the link dials the engine's publisher; every record is
// the payload frame unchanged with the contract headers, and the seqs are complete from 0
// (the slow-joiner losses are replayed at connect).
func TestConnectForwardsPayloadUnchanged(t *testing.T) {
	forEachBroker(t, func(t *testing.T, brokers []string) {
		eng := newFakeEngine(t, engineOpts{Replay: true, Rank: 0})
		cfg := testConfig(brokers)
		cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "qwen", KVEventsEndpoint: eng.pubEP,
			KVReplayEndpoint: eng.ReplayEP(), LoRAName: "ad1", CacheSalt: "s1"}}
		c := consume(t, brokers, cfg.KVTopic)
		l := runLink(t, cfg)

		warmUp(t, eng, c, "e1")
		last := eng.publish(16)
		waitFor(t, "all batches forwarded", func() bool {
			r := c.records("e1")
			return len(r) > 0 && r[len(r)-1].seq() == last
		})
		recs := c.records("e1")
		if diff := cmp.Diff(upTo(last+1), seqs(recs)); diff != "" {
			t.Fatalf("seqs mismatch (-want +got):\n%s", diff)
		}
		epoch := recs[0].epoch()
		for _, r := range recs {
			want := map[string]string{
				"sluice-format": "vllm.msgpack", "sluice-epoch": strconv.FormatUint(epoch, 10),
				"sluice-seq": strconv.FormatUint(r.seq(), 10), "sluice-model": "qwen", "sluice-dp-rank": "0",
				"sluice-lora": "ad1", "sluice-cache-salt": "s1",
			}
			if diff := cmp.Diff(want, r.Headers); diff != "" {
				t.Errorf("seq %d headers mismatch (-want +got):\n%s", r.seq(), diff)
			}
			if !bytes.Equal(r.Value, eng.payloadOf(r.seq())) {
				t.Errorf("seq %d: payload changed on the way", r.seq())
			}
		}
		if epoch == 0 {
			t.Error("epoch is 0")
		}
		if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_gap_batches_total", map[string]string{"outcome": "unrecovered"}); got != 0 {
			t.Errorf("unrecovered gap batches = %v, want 0 (everything was replayable)", got)
		}
	})
}

// TestGapIsReplayed: batches lost on the way are fetched from the replay socket and forwarded
// in order before the batch that revealed the gap.
func TestGapIsReplayed(t *testing.T) {
	forEachBroker(t, func(t *testing.T, brokers []string) {
		eng := newFakeEngine(t, engineOpts{Replay: true})
		cfg := testConfig(brokers)
		cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP, KVReplayEndpoint: eng.ReplayEP()}}
		c := consume(t, brokers, cfg.KVTopic)
		l := runLink(t, cfg)
		warmUp(t, eng, c, "e1")
		gapsBefore := metricValue(t, l.Registry(), "sluice_enginelink_kv_gaps_total", map[string]string{"kind": "seq_jump"})

		eng.lose(3)
		eng.lose(3)
		eng.lose(3)
		last := eng.publish(3)
		waitFor(t, "the batch after the gap", func() bool {
			r := c.records("e1")
			return len(r) > 0 && r[len(r)-1].seq() == last
		})
		if diff := cmp.Diff(upTo(last+1), seqs(c.records("e1"))); diff != "" {
			t.Fatalf("seqs mismatch (-want +got):\n%s", diff)
		}
		for _, r := range c.records("e1") {
			if !bytes.Equal(r.Value, eng.payloadOf(r.seq())) {
				t.Errorf("seq %d: payload differs from what the engine published", r.seq())
			}
		}
		if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_gaps_total", map[string]string{"kind": "seq_jump"}) - gapsBefore; got != 1 {
			t.Errorf("seq_jump gaps = %v, want 1", got)
		}
		if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_gap_batches_total", map[string]string{"kind": "seq_jump", "outcome": "replayed"}); got < 3 {
			t.Errorf("replayed gap batches = %v, want at least 3", got)
		}
		if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_gap_batches_total", map[string]string{"outcome": "unrecovered"}); got != 0 {
			t.Errorf("unrecovered gap batches = %v, want 0", got)
		}
	})
}

// TestUnrecoverableGapStaysVisible: what the engine can no longer replay is not papered over:
// the next batch is forwarded with its real seq, so the decider sees the jump.
func TestUnrecoverableGapStaysVisible(t *testing.T) {
	for _, tc := range []struct {
		name   string
		replay bool
	}{{"no replay socket", false}, {"replay buffer lost the batches", true}} {
		t.Run(tc.name, func(t *testing.T) {
			brokers := startBroker(t)
			eng := newFakeEngine(t, engineOpts{Replay: tc.replay})
			spec := enginelink.EngineSpec{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP}
			if tc.replay {
				spec.KVReplayEndpoint = eng.ReplayEP()
			}
			cfg := testConfig(brokers)
			cfg.Engines = []enginelink.EngineSpec{spec}
			c := consume(t, brokers, cfg.KVTopic)
			l := runLink(t, cfg)
			warmUp(t, eng, c, "e1")
			before := len(c.records("e1"))
			prev := c.records("e1")[before-1].seq()
			for range 10 { // everything published since the last forwarded batch is gone
				if s := eng.publish(1); s > prev {
					break
				}
			}
			waitFor(t, "warm-up batches forwarded", func() bool {
				r := c.records("e1")
				return r[len(r)-1].seq() == eng.seq-1
			})
			lostA, lostB := eng.lose(1), eng.lose(1)
			eng.forget(lostA, lostB)
			next := eng.publish(1)
			waitFor(t, "the batch after the gap", func() bool {
				r := c.records("e1")
				return r[len(r)-1].seq() == next
			})
			recs := c.records("e1")
			if got, want := recs[len(recs)-2].seq(), lostA-1; got != want {
				t.Errorf("batch before the jump has seq %d, want %d", got, want)
			}
			if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_gap_batches_total", map[string]string{"kind": "seq_jump", "outcome": "unrecovered"}); got != 2 {
				t.Errorf("unrecovered seq_jump batches = %v, want 2", got)
			}
		})
	}
}

// TestBindRoutesByTopicAndRank: engines connect to the link's bound socket; the topic
// kv@<id>@<model> names the engine, the batch's dp_rank the rank; unknown topics are counted.
func TestBindRoutesByTopicAndRank(t *testing.T) {
	brokers := startBroker(t)
	bind := "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg := testConfig(brokers)
	cfg.KVBind = bind
	cfg.Engines = []enginelink.EngineSpec{
		{ID: "e1", Model: "m1", KVEventsEndpoint: "bind"},
		{ID: "e2", Model: "m2", Engine: "sglang"}, // no endpoint: still accepted on the bound socket
	}
	c := consume(t, brokers, cfg.KVTopic)
	l := runLink(t, cfg)
	e1 := newFakeEngine(t, engineOpts{PubEP: bind, Dial: true, Topic: "kv@e1@m1", Rank: -1})
	e2 := newFakeEngine(t, engineOpts{PubEP: bind, Dial: true, Topic: "kv@e2@m2", Rank: 1})
	stranger := newFakeEngine(t, engineOpts{PubEP: bind, Dial: true, Topic: "kv@e9@m9", Rank: 0})
	warmUp(t, e1, c, "e1")
	warmUp(t, e2, c, "e2")
	waitFor(t, "the unknown topic counted", func() bool {
		stranger.publish(1)
		return metricValue(t, l.Registry(), "sluice_enginelink_kv_unknown_topic_total", nil) > 0
	})
	for _, tc := range []struct{ key, model, rank, format string }{
		{"e1", "m1", "0", "vllm.msgpack"}, {"e2", "m2", "1", "sglang.msgpack"},
	} {
		for _, r := range c.records(tc.key) {
			got := []string{r.Headers["sluice-model"], r.Headers["sluice-dp-rank"], r.Headers["sluice-format"]}
			if diff := cmp.Diff([]string{tc.model, tc.rank, tc.format}, got); diff != "" {
				t.Fatalf("%s seq %d model/rank/format mismatch (-want +got):\n%s", tc.key, r.seq(), diff)
			}
		}
	}
	if n := len(c.records("e9")); n != 0 {
		t.Errorf("%d records of the unknown engine forwarded", n)
	}
}

// TestRestartMintsNewEpoch: an engine whose seq goes back to 0 restarted: its records move
// to a newer epoch whose seqs start at 0 again.
func TestRestartMintsNewEpoch(t *testing.T) {
	for _, tc := range []struct {
		name string
		bind bool
	}{{"link binds", true}, {"link connects", false}} {
		t.Run(tc.name, func(t *testing.T) {
			brokers := startBroker(t)
			cfg := testConfig(brokers)
			opts := engineOpts{Replay: true, Topic: "kv@e1@m", ReplayEP: "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))}
			spec := enginelink.EngineSpec{ID: "e1", Model: "m", KVReplayEndpoint: opts.ReplayEP}
			if tc.bind {
				cfg.KVBind = "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))
				opts.PubEP, opts.Dial = cfg.KVBind, true
				spec.KVEventsEndpoint = "bind"
			} else {
				opts.PubEP = "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))
				spec.KVEventsEndpoint = opts.PubEP
			}
			cfg.Engines = []enginelink.EngineSpec{spec}
			c := consume(t, brokers, cfg.KVTopic)
			l := runLink(t, cfg)
			eng := newFakeEngine(t, opts)
			warmUp(t, eng, c, "e1")
			old := c.records("e1")[0].epoch()

			eng.restart(!tc.bind)
			eng.publish(1) // seq 0 of the new life: maybe lost (reconnect), then replayed
			waitFor(t, "records of the new epoch", func() bool {
				r := c.records("e1")
				if r[len(r)-1].epoch() != old {
					return true
				}
				eng.publish(1)
				return false
			})
			last := eng.publish(1)
			waitFor(t, "the last batch", func() bool {
				r := c.records("e1")
				return r[len(r)-1].seq() == last && r[len(r)-1].epoch() != old
			})
			var newer []kvRecord
			for _, r := range c.records("e1") {
				switch e := r.epoch(); {
				case e == old:
					if len(newer) > 0 {
						t.Fatalf("a record of the old epoch after the new one began (seq %d)", r.seq())
					}
				case e < old:
					t.Fatalf("epoch went backwards: %d after %d", e, old)
				default:
					newer = append(newer, r)
				}
			}
			if diff := cmp.Diff(upTo(last+1), seqs(newer)); diff != "" {
				t.Errorf("new epoch's seqs mismatch (-want +got):\n%s", diff)
			}
			if got := metricValue(t, l.Registry(), "sluice_enginelink_kv_epochs_total", map[string]string{"reason": "restart"}); got != 1 {
				t.Errorf("restart epochs = %v, want 1", got)
			}
		})
	}
}

// TestDPRanksConnect: a DP engine's ranks publish on ipc endpoints with vLLM's _dp<rank>
// suffix; each rank is one stream with its own seqs and rank header.
func TestDPRanksConnect(t *testing.T) {
	brokers := startBroker(t)
	base := "ipc://" + filepath.Join(t.TempDir(), "kv")
	r0 := newFakeEngine(t, engineOpts{PubEP: base, Rank: 0})
	r1 := newFakeEngine(t, engineOpts{PubEP: base + "_dp1", Rank: 1})
	cfg := testConfig(brokers)
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: base, DPSize: 2}}
	c := consume(t, brokers, cfg.KVTopic)
	runLink(t, cfg)
	byRank := func(rank string) []kvRecord {
		var out []kvRecord
		for _, r := range c.records("e1") {
			if r.Headers["sluice-dp-rank"] == rank {
				out = append(out, r)
			}
		}
		return out
	}
	waitFor(t, "both ranks forwarded", func() bool {
		if len(byRank("0")) == 0 {
			r0.publish(1)
		}
		if len(byRank("1")) == 0 {
			r1.publish(1)
		}
		return len(byRank("0")) > 0 && len(byRank("1")) > 0
	})
	for _, rank := range []string{"0", "1"} {
		rs := byRank(rank)
		for i := 1; i < len(rs); i++ {
			if rs[i].seq() <= rs[i-1].seq() {
				t.Errorf("rank %s: seq %d after %d", rank, rs[i].seq(), rs[i-1].seq())
			}
		}
		if rs[0].epoch() != c.records("e1")[0].epoch() {
			t.Errorf("rank %s has another epoch than rank 0", rank)
		}
	}
}

// TestTooLargeRecordIsDroppedAlone: a batch above -kafka-max-batch-bytes is dropped and counted
// as too_large (a visible seq gap for the decider), and the records around it still reach
// Kafka; before, kafka-go's MessageTooLargeError failed the whole produce call.
func TestTooLargeRecordIsDroppedAlone(t *testing.T) {
	forEachBroker(t, func(t *testing.T, brokers []string) {
		eng := newFakeEngine(t, engineOpts{})
		cfg := testConfig(brokers)
		cfg.KafkaMaxBatchBytes = 64 << 10
		cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: eng.pubEP}}
		c := consume(t, brokers, cfg.KVTopic)
		l := runLink(t, cfg)
		warmUp(t, eng, c, "e1")
		var want []uint64
		for range 3 {
			want = append(want, eng.publish(16))
		}
		big := eng.publish(400) // ~100 KB: above the 64 KiB bound
		for range 3 {
			want = append(want, eng.publish(16))
		}
		waitFor(t, "the batches around the big one forwarded", func() bool {
			r := c.records("e1")
			return len(r) > 0 && r[len(r)-1].seq() == want[len(want)-1]
		})
		var got []uint64
		for _, r := range c.records("e1") {
			if r.seq() >= want[0] {
				got = append(got, r.seq())
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("seqs on Kafka mismatch (-want +got), the big batch %d missing only:\n%s", big, diff)
		}
		if n := metricValue(t, l.Registry(), "sluice_enginelink_kafka_records_dropped_total", map[string]string{"reason": "too_large"}); n != 1 {
			t.Errorf("too_large drops = %v, want 1", n)
		}
	})
}
