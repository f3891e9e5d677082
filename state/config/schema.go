package config

import (
	"fmt"
	"slices"
)

// The schema: the keys of each mapping of a document, in documentation
// order, and which Document field each key's value decodes into, using the
// generic walks of walk.go. The optional settings of a policy and the caps
// of its admission are in settings.go.

var documentFields = []field[Document]{
	{"workers", func(d *decoder, doc *Document, v *node, p string) { doc.Engines = listOf(d, v, p, "a list", d.engine) }},
	{"buckets", func(d *decoder, doc *Document, v *node, p string) { doc.Buckets = listOf(d, v, p, "a list", d.bucket) }},
	{"default_policy", func(d *decoder, doc *Document, v *node, p string) { doc.DefaultPolicy = d.stagePolicies(v, p) }},
	{"models", func(d *decoder, doc *Document, v *node, p string) {
		doc.Models = mapOf(d, v, p, "a mapping of model id to settings", d.model)
	}},
	ttftSLOField,
	shardsField,
}

// documentKeys are the top-level keys.
var documentKeys = keysOf(documentFields)

var modelFields = []field[ModelSpec]{
	{"default_policy", func(d *decoder, m *ModelSpec, v *node, p string) { m.DefaultPolicy = d.stagePolicies(v, p) }},
}

var stageFields = []field[StagePolicies]{
	{StagePlain, func(d *decoder, s *StagePolicies, v *node, p string) { s.Plain = d.policy(v, p) }},
	{StagePrefill, func(d *decoder, s *StagePolicies, v *node, p string) { s.Prefill = d.policy(v, p) }},
	{StageDecode, func(d *decoder, s *StagePolicies, v *node, p string) { s.Decode = d.policy(v, p) }},
}

var engineFields = []field[EngineSpec]{
	{"id", func(d *decoder, w *EngineSpec, v *node, p string) { w.ID, _ = d.str(v, p) }},
	{"url", func(d *decoder, w *EngineSpec, v *node, p string) { w.URL, _ = d.str(v, p) }},
	{"models", func(d *decoder, w *EngineSpec, v *node, p string) { w.Models = d.strList(v, p) }},
	{"role", func(d *decoder, w *EngineSpec, v *node, p string) { w.Role, _ = d.str(v, p) }},
	{"bootstrap_port", func(d *decoder, w *EngineSpec, v *node, p string) {
		if port, ok := d.intIn(v, p, 1, 65535, portRule); ok {
			w.BootstrapPort = uint32(port)
		}
	}},
	{"labels", func(d *decoder, w *EngineSpec, v *node, p string) {
		w.Labels = mapOf(d, v, p, "a mapping of strings", func(lv *node, lp string) string {
			s, _ := d.str(lv, lp)
			return s
		})
	}},
	{"kv_events_endpoint", func(d *decoder, w *EngineSpec, v *node, p string) { w.KVEventsEndpoint, _ = d.str(v, p) }},
	{"kv_replay_endpoint", func(d *decoder, w *EngineSpec, v *node, p string) { w.KVReplayEndpoint, _ = d.str(v, p) }},
	{"metrics_url", func(d *decoder, w *EngineSpec, v *node, p string) { w.MetricsURL, _ = d.str(v, p) }},
	{"dp_size", func(d *decoder, w *EngineSpec, v *node, p string) {
		if n, ok := d.intIn(v, p, 0, maxDPSize, dpSizeRule); ok {
			w.DPSize = int32(n)
		}
	}},
	{"lora_adapters", func(d *decoder, w *EngineSpec, v *node, p string) { w.LoRAAdapters = d.strList(v, p) }},
}

var bucketFields = []field[BucketSpec]{
	{"id", func(d *decoder, b *BucketSpec, v *node, p string) { b.ID, _ = d.str(v, p) }},
	{"rank", func(d *decoder, b *BucketSpec, v *node, p string) { b.Rank, _ = d.int(v, p) }},
	{"models", func(d *decoder, b *BucketSpec, v *node, p string) { b.Models = d.strList(v, p) }},
	{"limits", func(d *decoder, b *BucketSpec, v *node, p string) {
		if l := objectOf(d, v, p, limitsFields); l != nil {
			b.Limits = *l
		}
	}},
	{"max_context_tokens", func(d *decoder, b *BucketSpec, v *node, p string) { b.MaxContextTokens = opt(d.int(v, p)) }},
	{"groups", func(d *decoder, b *BucketSpec, v *node, p string) {
		if g := objectOf(d, v, p, groupsFields); g != nil {
			b.Groups = *g
		}
	}},
}

var limitsFields = []field[Limits]{
	{"min", func(d *decoder, l *Limits, v *node, p string) { l.Min, _ = d.int(v, p) }},
	{"max", func(d *decoder, l *Limits, v *node, p string) { l.Max = opt(d.int(v, p)) }},
}

var groupsFields = []field[GroupsSpec]{
	{"plain", func(d *decoder, g *GroupsSpec, v *node, p string) { g.Plain = d.group(v, p) }},
	{"pd", func(d *decoder, g *GroupsSpec, v *node, p string) {
		if v.kind == kindNull {
			g.PD = &PDSpec{}
			return
		}
		g.PD = objectOf(d, v, p, pdFields)
	}},
}

var pdFields = []field[PDSpec]{
	{StagePrefill, func(d *decoder, pd *PDSpec, v *node, p string) { pd.Prefill = d.group(v, p) }},
	{StageDecode, func(d *decoder, pd *PDSpec, v *node, p string) { pd.Decode = d.group(v, p) }},
}

var groupFields = []field[GroupSpec]{
	{"worker_ids", func(d *decoder, g *GroupSpec, v *node, p string) {
		if ids := d.strList(v, p); ids != nil {
			g.EngineIDs = &ids
		}
	}},
	{"policy", func(d *decoder, g *GroupSpec, v *node, p string) { g.Policy = d.policy(v, p) }},
}

// policyFields are type, admission and the settings of settings.go.
var policyFields = append([]field[PolicySpec]{
	{"type", func(d *decoder, pol *PolicySpec, v *node, p string) { pol.Type, _ = d.str(v, p) }},
	{"admission", func(d *decoder, pol *PolicySpec, v *node, p string) {
		pol.Admission = objectOf(d, v, p, admissionFields)
	}},
}, settingFields()...)

func settingFields() []field[PolicySpec] {
	out := make([]field[PolicySpec], len(policySettings))
	for i, s := range policySettings {
		out[i] = s.field
	}
	return out
}

// admissionFields are the caps of settings.go.
var admissionFields = capFields()

func capFields() []field[AdmissionSpec] {
	out := make([]field[AdmissionSpec], len(admissionCaps))
	for i, c := range admissionCaps {
		out[i] = field[AdmissionSpec]{c.key, func(d *decoder, a *AdmissionSpec, v *node, p string) { *c.limit(a) = opt(d.int(v, p)) }}
	}
	return out
}

// document decodes the whole tree; a missing (empty) document is the empty
// Document.
func (d *decoder) document(n *node) *Document {
	doc := &Document{}
	if n == nil || n.kind == kindNull {
		return doc
	}
	fields(d, n, "", documentFields, doc)
	return doc
}

// model decodes a model's settings; null means none.
func (d *decoder) model(n *node, p string) ModelSpec {
	if m := objectOf(d, n, p, modelFields); m != nil {
		return *m
	}
	return ModelSpec{}
}

func (d *decoder) stagePolicies(n *node, p string) *StagePolicies {
	return objectOf(d, n, p, stageFields)
}

// engine decodes one entry of workers, which must be a mapping.
func (d *decoder) engine(n *node, p string) EngineSpec {
	var w EngineSpec
	fields(d, n, p, engineFields, &w)
	return w
}

// bucket decodes one entry of buckets, which must be a mapping.
func (d *decoder) bucket(n *node, p string) BucketSpec {
	var b BucketSpec
	fields(d, n, p, bucketFields, &b)
	return b
}

// group decodes a group; an empty (null) group means every engine with the
// inherited policy.
func (d *decoder) group(n *node, p string) *GroupSpec {
	if n.kind == kindNull {
		return &GroupSpec{}
	}
	return objectOf(d, n, p, groupFields)
}

// policy decodes a policy mapping; a bare type name, or a dropped one, is
// rejected with what to write instead.
func (d *decoder) policy(n *node, p string) *PolicySpec {
	if n.kind == kindScalar {
		if msg, ok := droppedTypes[foldKey(n.text)]; ok {
			d.reject(p, n, fmt.Sprintf("policy %q %s", n.text, msg))
			return nil
		}
		if slices.Contains(PolicyTypes(), n.text) {
			d.reject(p, n, fmt.Sprintf("must be a mapping; write {type: %s}", n.text))
			return nil
		}
	}
	return objectOf(d, n, p, policyFields)
}
