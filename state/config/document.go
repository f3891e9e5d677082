package config

import (
	"maps"
	"slices"
)

// Engine roles, which are also the stages a group serves. A plain bucket's
// group is StagePlain; a PD bucket has a StagePrefill and a StageDecode group.
const (
	StagePlain   = "plain"
	StagePrefill = "prefill"
	StageDecode  = "decode"

	RolePlain   = StagePlain
	RolePrefill = StagePrefill
	RoleDecode  = StageDecode
)

// IDs of the buckets [DefaultBuckets] returns.
const (
	bucketPlain = "plain"
	bucketPD    = "pd"
)

// Document is a whole configuration. Its zero value is valid: no engine list
// (engine ids are checked against the live registry), the default buckets and
// power-of-two everywhere.
//
// Decode documents with [Parse], not with encoding/json or yaml directly:
// only Parse rejects unknown and dropped keys.
type Document struct {
	// Engines, when non-nil, is the complete list of engines that groups may
	// name; an explicit empty list is an error. When nil, engine ids are
	// checked at run time against the registry.
	Engines []EngineSpec `json:"workers,omitempty" yaml:"workers,omitempty"`
	// Buckets is the bucket set. Nil means [DefaultBuckets]; an explicit
	// empty list is an error.
	Buckets []BucketSpec `json:"buckets,omitempty" yaml:"buckets,omitempty"`
	// DefaultPolicy is the per-stage policy of groups that attach none.
	DefaultPolicy *StagePolicies `json:"default_policy,omitempty" yaml:"default_policy,omitempty"`
	// Models holds per-model overrides of DefaultPolicy, keyed by model id.
	Models map[string]ModelSpec `json:"models,omitempty" yaml:"models,omitempty"`
	// TTFTSLO, when set, configures the time-to-first-token preference of
	// the bucket order (ttftslo.go); nil is off.
	TTFTSLO *TTFTSLOSpec `json:"ttft_slo,omitempty" yaml:"ttft_slo,omitempty"`
	// Shards, when set, splits the models among model-sharded deciders
	// (shards.go); nil runs every decider unsharded.
	Shards []ShardSpec `json:"shards,omitempty" yaml:"shards,omitempty"`
}

// IsEmpty reports whether d sets nothing at all: what an empty body, {}, null
// or a file of comments parses to. Such a document is valid (it means the
// default buckets over the registry's engines), but stores refuse to write
// one with [EmptyDocumentError]: it is almost always a mistake that would
// wipe the configuration.
func (d *Document) IsEmpty() bool {
	return d == nil || (d.Engines == nil && d.Buckets == nil && d.DefaultPolicy == nil && d.Models == nil && d.TTFTSLO == nil && d.Shards == nil)
}

// ModelSpec holds settings for one model.
type ModelSpec struct {
	// DefaultPolicy overrides the document's DefaultPolicy, stage by stage,
	// for this model's groups that attach no policy.
	DefaultPolicy *StagePolicies `json:"default_policy,omitempty" yaml:"default_policy,omitempty"`
}

// StagePolicies holds one optional policy per stage; nil means "not set here".
type StagePolicies struct {
	// Plain applies to groups of plain buckets.
	Plain *PolicySpec `json:"plain,omitempty" yaml:"plain,omitempty"`
	// Prefill applies to the prefill groups of PD buckets.
	Prefill *PolicySpec `json:"prefill,omitempty" yaml:"prefill,omitempty"`
	// Decode applies to the decode groups of PD buckets; cache_aware is not
	// allowed here.
	Decode *PolicySpec `json:"decode,omitempty" yaml:"decode,omitempty"`
}

// For returns the policy set for stage, or nil. A nil receiver has none.
func (s *StagePolicies) For(stage string) *PolicySpec {
	if s == nil {
		return nil
	}
	switch stage {
	case StagePlain:
		return s.Plain
	case StagePrefill:
		return s.Prefill
	case StageDecode:
		return s.Decode
	}
	return nil
}

// EngineSpec declares one engine (an entry of the document's `workers` list).
type EngineSpec struct {
	// ID is the engine's stable, unique id; groups refer to it.
	ID string `json:"id" yaml:"id"`
	// URL is the engine's absolute http or https base URL.
	URL string `json:"url" yaml:"url"`
	// Models lists the model ids the engine serves; at least one.
	Models []string `json:"models" yaml:"models"`
	// Role is RolePlain, RolePrefill or RoleDecode.
	Role string `json:"role" yaml:"role"`
	// BootstrapPort is a prefill engine's PD bootstrap port; 0 means unset.
	// Only prefill engines may set it.
	BootstrapPort uint32 `json:"bootstrap_port,omitempty" yaml:"bootstrap_port,omitempty"`
	// Labels are free-form key/value pairs for operators and metrics.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	// KVEventsEndpoint is where the engine publishes KV-cache events over
	// ZMQ, for enginelink's fleet mode: "tcp://host:port" (the link
	// connects), or "bind:tcp://host:port" (the link binds there and the
	// engine connects, told apart by its topic). Rank r uses port + r.
	// Empty means the engine publishes none.
	KVEventsEndpoint string `json:"kv_events_endpoint,omitempty" yaml:"kv_events_endpoint,omitempty"`
	// KVReplayEndpoint is the engine's ZMQ replay socket (vLLM
	// replay_endpoint); empty means seq gaps cannot be replayed.
	KVReplayEndpoint string `json:"kv_replay_endpoint,omitempty" yaml:"kv_replay_endpoint,omitempty"`
	// MetricsURL is the engine's Prometheus metrics URL; empty means
	// URL + "/metrics".
	MetricsURL string `json:"metrics_url,omitempty" yaml:"metrics_url,omitempty"`
	// DPSize is the engine's data-parallel size; 0 or 1 when not data
	// parallel.
	DPSize int32 `json:"dp_size,omitempty" yaml:"dp_size,omitempty"`
	// LoRAAdapters are the LoRA adapters the engine serves under their own
	// model names; a request naming one is served in the buckets of the
	// engine's first model, among the engines declaring it.
	LoRAAdapters []string `json:"lora_adapters,omitempty" yaml:"lora_adapters,omitempty"`
}

// BucketSpec is one bucket: a request-length range and the plain group or the
// prefill/decode pair of groups that serve it.
type BucketSpec struct {
	// ID is unique, at most 128 characters of [A-Za-z0-9._-].
	ID string `json:"id" yaml:"id"`
	// Rank breaks ties between buckets of equal capacity; lower first.
	Rank int64 `json:"rank,omitempty" yaml:"rank,omitempty"`
	// Models restricts the bucket to these model ids; nil means every model.
	Models []string `json:"models,omitempty" yaml:"models,omitempty"`
	// Limits is the inclusive input-token range.
	Limits Limits `json:"limits,omitzero" yaml:"limits,omitempty"`
	// MaxContextTokens bounds input plus requested output; nil is unbounded.
	MaxContextTokens *int64 `json:"max_context_tokens,omitempty" yaml:"max_context_tokens,omitempty"`
	// Groups holds exactly one of a plain group or a PD pair.
	Groups GroupsSpec `json:"groups" yaml:"groups"`
}

// Limits is an inclusive input-token range.
type Limits struct {
	// Min is the smallest input length served; >= 0.
	Min int64 `json:"min,omitempty" yaml:"min,omitempty"`
	// Max is the largest input length served; nil is unbounded.
	Max *int64 `json:"max,omitempty" yaml:"max,omitempty"`
}

// GroupsSpec holds a bucket's groups: exactly one of Plain or PD is set.
type GroupsSpec struct {
	// Plain is the single group of a plain bucket; it takes plain engines.
	Plain *GroupSpec `json:"plain,omitempty" yaml:"plain,omitempty"`
	// PD is the prefill/decode pair of a disaggregated bucket.
	PD *PDSpec `json:"pd,omitempty" yaml:"pd,omitempty"`
}

// PDSpec is a disaggregated bucket's pair of groups; both are required.
type PDSpec struct {
	// Prefill takes prefill engines.
	Prefill *GroupSpec `json:"prefill,omitempty" yaml:"prefill,omitempty"`
	// Decode takes decode engines.
	Decode *GroupSpec `json:"decode,omitempty" yaml:"decode,omitempty"`
}

// GroupSpec is one engine group: its membership and its policy.
type GroupSpec struct {
	// EngineIDs (key `worker_ids`) restricts membership. Nil means every healthy engine of the
	// requested model and the group's role; an explicit empty list means no
	// engines.
	EngineIDs *[]string `json:"worker_ids,omitempty" yaml:"worker_ids,omitempty"`
	// Policy is the group's policy; nil inherits (see [Document.PolicyFor]).
	Policy *PolicySpec `json:"policy,omitempty" yaml:"policy,omitempty"`
}

// DefaultBuckets returns the bucket set used when a document has none: a
// plain bucket (rank 0) and a PD bucket (rank 1), unlimited, over every
// engine, with no attached policy. Each call returns fresh values.
func DefaultBuckets() []BucketSpec {
	return []BucketSpec{
		{ID: bucketPlain, Rank: 0, Groups: GroupsSpec{Plain: &GroupSpec{}}},
		{ID: bucketPD, Rank: 1, Groups: GroupsSpec{PD: &PDSpec{Prefill: &GroupSpec{}, Decode: &GroupSpec{}}}},
	}
}

// EffectiveBuckets returns the document's buckets, or [DefaultBuckets] when
// it sets none. The result shares memory with d; do not modify it.
func (d *Document) EffectiveBuckets() []BucketSpec {
	if d == nil || d.Buckets == nil {
		return DefaultBuckets()
	}
	return d.Buckets
}

// PolicyFor returns the policy that governs group g (which may be nil) of a
// bucket serving model at stage. The first one set wins: the group's own
// policy, models[model].default_policy[stage], default_policy[stage], then
// [DefaultPolicy]. The result is a deep copy.
func (d *Document) PolicyFor(model, stage string, g *GroupSpec) PolicySpec {
	if g != nil && g.Policy != nil {
		return g.Policy.Clone()
	}
	if d != nil {
		if m, ok := d.Models[model]; ok {
			if p := m.DefaultPolicy.For(stage); p != nil {
				return p.Clone()
			}
		}
		if p := d.DefaultPolicy.For(stage); p != nil {
			return p.Clone()
		}
	}
	return DefaultPolicy(stage)
}

// Clone returns a deep copy of d; nil yields nil.
func (d *Document) Clone() *Document {
	if d == nil {
		return nil
	}
	out := &Document{DefaultPolicy: d.DefaultPolicy.clone(), TTFTSLO: d.TTFTSLO.clone(), Shards: cloneShards(d.Shards)}
	if d.Engines != nil {
		out.Engines = make([]EngineSpec, len(d.Engines))
		for i, w := range d.Engines {
			w.Models = slices.Clone(w.Models)
			w.Labels = maps.Clone(w.Labels)
			w.LoRAAdapters = slices.Clone(w.LoRAAdapters)
			out.Engines[i] = w
		}
	}
	if d.Buckets != nil {
		out.Buckets = make([]BucketSpec, len(d.Buckets))
		for i, b := range d.Buckets {
			out.Buckets[i] = b.Clone()
		}
	}
	if d.Models != nil {
		out.Models = make(map[string]ModelSpec, len(d.Models))
		for k, m := range d.Models {
			out.Models[k] = ModelSpec{DefaultPolicy: m.DefaultPolicy.clone()}
		}
	}
	return out
}

// clone returns a deep copy of s; nil yields nil.
func (s *StagePolicies) clone() *StagePolicies {
	if s == nil {
		return nil
	}
	return &StagePolicies{Plain: s.Plain.clonePtr(), Prefill: s.Prefill.clonePtr(), Decode: s.Decode.clonePtr()}
}

// Clone returns a deep copy of b.
func (b BucketSpec) Clone() BucketSpec {
	b.Models = slices.Clone(b.Models)
	b.Limits.Max = clonePtr(b.Limits.Max)
	b.MaxContextTokens = clonePtr(b.MaxContextTokens)
	b.Groups.Plain = b.Groups.Plain.clone()
	if b.Groups.PD != nil {
		b.Groups.PD = &PDSpec{Prefill: b.Groups.PD.Prefill.clone(), Decode: b.Groups.PD.Decode.clone()}
	}
	return b
}

// clone returns a deep copy of g; nil yields nil.
func (g *GroupSpec) clone() *GroupSpec {
	if g == nil {
		return nil
	}
	out := &GroupSpec{Policy: g.Policy.clonePtr()}
	if g.EngineIDs != nil {
		ids := slices.Clone(*g.EngineIDs)
		if ids == nil {
			ids = []string{}
		}
		out.EngineIDs = &ids
	}
	return out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
