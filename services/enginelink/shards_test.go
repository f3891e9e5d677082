package enginelink_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/services/enginelink"
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
