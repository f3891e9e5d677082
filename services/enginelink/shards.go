package enginelink

import (
	"fmt"
	"os"

	"github.com/sluicehq/sluice/state/config"
)

// Model shards (docs/decisions.md, "Model-sharded deciders"): with -shards-config, the link
// reads the shards list of the configuration document the deciders load and publishes each
// engine's KV records and load reports to its model's shard topics (<topic>.<shard>); an
// engine whose model no shard lists keeps the unsuffixed topics. The file is read once, at
// start: moving a model to another shard means restarting its links.

// loadShardMap reads path's shards list into model -> shard id; an empty path means none.
func loadShardMap(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-shards-config: %w", err)
	}
	doc, err := config.Parse(raw, config.FormatAuto)
	if err != nil {
		return nil, fmt.Errorf("-shards-config %s: %w", path, err)
	}
	m := map[string]string{}
	for _, s := range doc.Shards {
		for _, model := range s.Models {
			m[model] = s.ID
		}
	}
	return m, nil
}

// kvTopic is the KV topic of spec's model's shard.
func (l *Link) kvTopic(spec EngineSpec) string {
	return config.ShardTopic(l.cfg.KVTopic, l.shardOf[spec.Model])
}

// loadTopic is the load topic of spec's model's shard.
func (l *Link) loadTopic(spec EngineSpec) string {
	return config.ShardTopic(l.cfg.LoadTopic, l.shardOf[spec.Model])
}
