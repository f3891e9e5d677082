package config

import (
	"net"
	"regexp"
	"slices"
	"strings"
)

// ShardSpec is one entry of the document's shards list: a set of models
// whose KV events and load reports travel on their own Kafka topics and
// whose Decide calls only that shard's deciders serve (docs/decisions.md,
// "Model-sharded deciders"). A model no shard lists is served by unsharded
// deciders only.
type ShardSpec struct {
	// ID names the shard: the decider's -shard flag and the suffix of its
	// topics (<topic>.<id>).
	ID string `json:"id" yaml:"id"`
	// Models are the model ids the shard owns; each model belongs to at
	// most one shard.
	Models []string `json:"models" yaml:"models"`
	// Deciders are the gRPC addresses (host:port) of the shard's replicas,
	// which a WRONG_SHARD refusal names and the gateway and clients route
	// to. Optional: without them a caller must be told the addresses.
	Deciders []string `json:"deciders,omitempty" yaml:"deciders,omitempty"`
}

// shardIDPattern keeps a shard id usable as a Kafka topic suffix.
var shardIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ShardTopic is the topic a shard's records travel on: base + "." + shard,
// or base itself for the unsharded "" shard.
func ShardTopic(base, shard string) string {
	if shard == "" {
		return base
	}
	return base + "." + shard
}

// ShardOf returns the shard owning model; ok is false when no shard lists
// it (or d is nil).
func (d *Document) ShardOf(model string) (ShardSpec, bool) {
	if d == nil {
		return ShardSpec{}, false
	}
	for _, s := range d.Shards {
		if slices.Contains(s.Models, model) {
			return s, true
		}
	}
	return ShardSpec{}, false
}

// Shard returns the shard named id.
func (d *Document) Shard(id string) (ShardSpec, bool) {
	if d == nil {
		return ShardSpec{}, false
	}
	for _, s := range d.Shards {
		if s.ID == id {
			return s, true
		}
	}
	return ShardSpec{}, false
}

// ShardIDs lists the shard ids in document order.
func (d *Document) ShardIDs() []string {
	if d == nil {
		return nil
	}
	ids := make([]string, len(d.Shards))
	for i, s := range d.Shards {
		ids[i] = s.ID
	}
	return ids
}

func cloneShards(ss []ShardSpec) []ShardSpec {
	if ss == nil {
		return nil
	}
	out := make([]ShardSpec, len(ss))
	for i, s := range ss {
		out[i] = ShardSpec{ID: s.ID, Models: slices.Clone(s.Models), Deciders: slices.Clone(s.Deciders)}
	}
	return out
}

var shardFields = []field[ShardSpec]{
	{"id", func(d *decoder, s *ShardSpec, v *node, p string) { s.ID, _ = d.str(v, p) }},
	{"models", func(d *decoder, s *ShardSpec, v *node, p string) { s.Models = d.strList(v, p) }},
	{"deciders", func(d *decoder, s *ShardSpec, v *node, p string) { s.Deciders = d.strList(v, p) }},
}

// shardsField is the document's shards key.
var shardsField = field[Document]{"shards", func(d *decoder, doc *Document, v *node, p string) {
	doc.Shards = listOf(d, v, p, "a list", func(n *node, p string) ShardSpec {
		var s ShardSpec
		fields(d, n, p, shardFields, &s)
		return s
	})
}}

// shards checks the shards list: ids unique and topic-safe, every shard
// owning at least one model, a model in at most one shard, decider
// addresses host:port.
func (v *validator) shards(ss []ShardSpec) {
	if ss == nil {
		return
	}
	if len(ss) == 0 {
		v.addf("shards", "empty list; omit the key to run unsharded deciders")
		return
	}
	ids := map[string]int{}
	owner := map[string]string{}
	for i, s := range ss {
		p := index("shards", i)
		switch {
		case !shardIDPattern.MatchString(s.ID):
			v.addf(join(p, "id"), "%q: want 1-64 letters, digits, '-' or '_' (it becomes a Kafka topic suffix)", s.ID)
		case ids[s.ID] > 0:
			v.addf(join(p, "id"), "duplicate shard id %q (also shards[%d]); give each shard its own id", s.ID, ids[s.ID]-1)
		default:
			ids[s.ID] = i + 1
		}
		if len(s.Models) == 0 {
			v.addf(join(p, "models"), "required: list the model ids this shard owns")
		}
		for j, m := range s.Models {
			mp := index(join(p, "models"), j)
			switch prev, dup := owner[m]; {
			case strings.TrimSpace(m) == "":
				v.addf(mp, "model id must not be empty")
			case dup:
				v.addf(mp, "model %q already belongs to shard %q; a model belongs to at most one shard", m, prev)
			default:
				owner[m] = s.ID
			}
		}
		for j, a := range s.Deciders {
			if _, _, err := net.SplitHostPort(a); err != nil {
				v.addf(index(join(p, "deciders"), j), "%q: want the host:port of a decider's gRPC listener", a)
			}
		}
	}
}
