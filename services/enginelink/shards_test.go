package enginelink_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/services/enginelink"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/pgstore"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

// TestShardTopics: with -shards-config, an engine of a sharded model publishes its KV records
// on <kv-topic>.<shard> and an engine of an unsharded model on <kv-topic>; neither topic
// carries the other's records.
func TestShardTopics(t *testing.T) {
	forEachBroker(t, func(t *testing.T, brokers []string) {
		doc := filepath.Join(t.TempDir(), "cfg.yaml")
		if err := os.WriteFile(doc, []byte("shards:\n  - {id: a, models: [ma]}\n  - {id: b, models: [mb]}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e1, e2 := newFakeEngine(t, engineOpts{}), newFakeEngine(t, engineOpts{})
		cfg := testConfig(brokers)
		cfg.ShardsConfig = doc
		cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "ma", KVEventsEndpoint: e1.pubEP}, {ID: "e2", Model: "mc", KVEventsEndpoint: e2.pubEP}}
		sharded, plain := consume(t, brokers, cfg.KVTopic+".a"), consume(t, brokers, cfg.KVTopic)
		runLink(t, cfg)
		warmUp(t, e1, sharded, "e1")
		warmUp(t, e2, plain, "e2")
		if n := len(sharded.records("e2")); n != 0 {
			t.Errorf("%d records of the unsharded engine e2 on shard a's topic", n)
		}
		if n := len(plain.records("e1")); n != 0 {
			t.Errorf("%d records of shard a's engine e1 on the unsharded topic", n)
		}
		if r := sharded.records("e1"); r[0].Headers["sluice-model"] != "ma" {
			t.Errorf("shard a record headers %v, want sluice-model ma", r[0].Headers)
		}
	})
}

func TestShardsConfigErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("shards: [{id: a, models: [m]}, {id: b, models: [m]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{{filepath.Join(t.TempDir(), "missing.yaml"), "-shards-config"}, {bad, `already belongs to shard "a"`}} {
		cfg := testConfig([]string{"127.0.0.1:1"})
		cfg.ShardsConfig = c.path
		cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m"}}
		if _, err := enginelink.New(testLogger(t), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with -shards-config %s = %v, want an error containing %q", c.path, err, c.want)
		}
	}
}

// TestShardMapFollowsFile: the link follows edits of -shards-config. Engine e1's model moves
// from shard a to shard b and then out of every shard; after each change its records go to the
// new topic, none of them after the first one there goes to the old topic, and the link's
// metrics name the version and count the moves.
func TestShardMapFollowsFile(t *testing.T) {
	forEachBroker(t, func(t *testing.T, brokers []string) {
		doc := filepath.Join(t.TempDir(), "cfg.yaml")
		write := func(body string) {
			t.Helper()
			// Through a rename, as an editor or a config-map update writes it.
			tmp := doc + ".tmp"
			if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, doc); err != nil {
				t.Fatal(err)
			}
		}
		write("shards:\n  - {id: a, models: [m]}\n  - {id: b, models: [x]}\n")
		e1 := newFakeEngine(t, engineOpts{})
		cfg := testConfig(brokers)
		cfg.ShardsConfig, cfg.ShardsPoll = doc, 20*time.Millisecond
		cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: e1.pubEP}}
		onA, onB, plain := consume(t, brokers, cfg.KVTopic+".a"), consume(t, brokers, cfg.KVTopic+".b"), consume(t, brokers, cfg.KVTopic)
		l := runLink(t, cfg)
		warmUp(t, e1, onA, "e1")

		write("shards:\n  - {id: b, models: [m, x]}\n")
		followMove(t, e1, onA, onB)
		if v := metricValue(t, l.Registry(), "sluice_enginelink_shard_map_version", nil); v != 2 {
			t.Errorf("sluice_enginelink_shard_map_version = %v after one edit, want 2", v)
		}

		write("shards:\n  - {id: b, models: [x]}\n")
		followMove(t, e1, onB, plain)
		if v := metricValue(t, l.Registry(), "sluice_enginelink_shard_map_moves_total", nil); v != 2 {
			t.Errorf("sluice_enginelink_shard_map_moves_total = %v, want 2 (m to b, m out of every shard)", v)
		}
		if n := len(plain.records("e1")) + len(onB.records("e1")); n == 0 {
			t.Fatal("no records after the moves")
		}

		// An invalid edit keeps the map in force.
		write("shards:\n  - {id: a, models: [m]}\n  - {id: a, models: [m]}\n")
		time.Sleep(10 * cfg.ShardsPoll)
		before := len(plain.records("e1"))
		e1.publish(1)
		waitFor(t, "a record on the unsharded topic after an invalid edit", func() bool { return len(plain.records("e1")) > before })
	})
}

// TestShardMapFollowsPostgres: the link reads the shard map from the deciders' Postgres store
// and follows a change stored there (as the admin API's ApplyConfig stores it): the model's
// records move from shard a's topic to shard b's on the real broker.
func TestShardMapFollowsPostgres(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	dsn := pgtest.SchemaDSN(t)
	ctx := context.Background()
	seed, err := config.Parse([]byte("shards:\n  - {id: a, models: [m]}\n  - {id: b, models: [other]}\n"), config.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgstore.Open(ctx, testLogger(t), pgstore.Config{DSN: dsn, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)

	e1 := newFakeEngine(t, engineOpts{})
	cfg := testConfig(brokers)
	cfg.ShardsPostgresDSN = dsn
	cfg.Engines = []enginelink.EngineSpec{{ID: "e1", Model: "m", KVEventsEndpoint: e1.pubEP}}
	onA, onB := consume(t, brokers, cfg.KVTopic+".a"), consume(t, brokers, cfg.KVTopic+".b")
	l := runLink(t, cfg)
	warmUp(t, e1, onA, "e1")

	moved := seed.Clone()
	moved.Shards[0].Models, moved.Shards[1].Models = []string{"other0"}, []string{"m", "other"}
	snap, err := admin.Apply(config.WithAuthor(ctx, "test"), moved, admin.Current().Version)
	if err != nil {
		t.Fatal(err)
	}
	followMove(t, e1, onA, onB)
	if v := metricValue(t, l.Registry(), "sluice_enginelink_shard_map_version", nil); v != float64(snap.Version) {
		t.Errorf("sluice_enginelink_shard_map_version = %v, want the stored version %d", v, snap.Version)
	}
}

// followMove publishes until e1's records reach to, then more, and checks that every record on
// from precedes (by seq) every record on to and that from got nothing after the move.
func followMove(t *testing.T, e1 *fakeEngine, from, to *consumer) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for len(to.records("e1")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no record of e1 on the new shard's topic within %v of the change", waitLimit)
		}
		e1.publish(1)
		time.Sleep(10 * time.Millisecond)
	}
	last := e1.publish(5)
	waitFor(t, "the last record on the new topic", func() bool {
		r := to.records("e1")
		return r[len(r)-1].seq() >= last
	})
	oldSeqs, newSeqs := seqs(from.records("e1")), seqs(to.records("e1"))
	if len(oldSeqs) > 0 && slices.Max(oldSeqs) >= slices.Min(newSeqs) {
		t.Errorf("old topic has seqs up to %d, new topic from %d: records went to the old shard after the move (old %v, new %v)",
			slices.Max(oldSeqs), slices.Min(newSeqs), oldSeqs, newSeqs)
	}
}
