package config

import (
	"fmt"
	"slices"
)

// The schema: which keys each mapping of a document has, in documentation
// order, and which Document field each key's value decodes into, using the
// generic walks of walk.go.
var (
	documentKeys  = []string{"workers", "buckets", "default_policy", "models"}
	modelKeys     = []string{"default_policy"}
	stageKeys     = []string{"plain", "prefill", "decode"}
	engineKeys    = []string{"id", "url", "models", "role", "bootstrap_port", "labels", "kv_events_endpoint", "kv_replay_endpoint", "metrics_url", "dp_size", "lora_adapters"}
	bucketKeys    = []string{"id", "rank", "models", "limits", "max_context_tokens", "groups"}
	limitsKeys    = []string{"min", "max"}
	groupsKeys    = []string{"plain", "pd"}
	pdKeys        = []string{"prefill", "decode"}
	groupKeys     = []string{"worker_ids", "policy"}
	admissionKeys = keysOf(admissionCaps, func(c admissionCap) string { return c.key })
	policyKeys    = append([]string{"type", "admission"}, keysOf(policySettings, func(s policySetting) string { return s.key })...)
)

// document decodes the whole tree; a missing (empty) document is the empty
// Document.
func (d *decoder) document(n *node) *Document {
	doc := &Document{}
	if n == nil || n.kind == kindNull {
		return doc
	}
	d.object(n, "", documentKeys, func(key string, v *node, p string) {
		switch key {
		case "workers":
			doc.Engines = listOf(d, v, p, "a list", d.engine)
		case "buckets":
			doc.Buckets = listOf(d, v, p, "a list", d.bucket)
		case "default_policy":
			doc.DefaultPolicy = d.stagePolicies(v, p)
		case "models":
			doc.Models = mapOf(d, v, p, "a mapping of model id to settings", d.model)
		}
	})
	return doc
}

func (d *decoder) model(n *node, p string) ModelSpec {
	m := objectOf(d, n, p, modelKeys, func(m *ModelSpec, _ string, v *node, vp string) {
		m.DefaultPolicy = d.stagePolicies(v, vp)
	})
	if m == nil {
		return ModelSpec{}
	}
	return *m
}

func (d *decoder) stagePolicies(n *node, p string) *StagePolicies {
	return objectOf(d, n, p, stageKeys, func(s *StagePolicies, key string, v *node, vp string) {
		pol := d.policy(v, vp)
		switch key {
		case StagePlain:
			s.Plain = pol
		case StagePrefill:
			s.Prefill = pol
		case StageDecode:
			s.Decode = pol
		}
	})
}

func (d *decoder) engine(n *node, p string) EngineSpec {
	var w EngineSpec
	d.object(n, p, engineKeys, func(key string, v *node, vp string) {
		switch key {
		case "id":
			w.ID, _ = d.str(v, vp)
		case "url":
			w.URL, _ = d.str(v, vp)
		case "models":
			w.Models = d.strList(v, vp)
		case "role":
			w.Role, _ = d.str(v, vp)
		case "bootstrap_port":
			if port, ok := d.intIn(v, vp, 1, 65535, portRule); ok {
				w.BootstrapPort = uint32(port)
			}
		case "labels":
			w.Labels = mapOf(d, v, vp, "a mapping of strings", func(lv *node, lp string) string {
				s, _ := d.str(lv, lp)
				return s
			})
		case "kv_events_endpoint":
			w.KVEventsEndpoint, _ = d.str(v, vp)
		case "kv_replay_endpoint":
			w.KVReplayEndpoint, _ = d.str(v, vp)
		case "metrics_url":
			w.MetricsURL, _ = d.str(v, vp)
		case "dp_size":
			if n, ok := d.intIn(v, vp, 0, maxDPSize, dpSizeRule); ok {
				w.DPSize = int32(n)
			}
		case "lora_adapters":
			w.LoRAAdapters = d.strList(v, vp)
		}
	})
	return w
}

func (d *decoder) bucket(n *node, p string) BucketSpec {
	var b BucketSpec
	d.object(n, p, bucketKeys, func(key string, v *node, vp string) {
		switch key {
		case "id":
			b.ID, _ = d.str(v, vp)
		case "rank":
			b.Rank, _ = d.int(v, vp)
		case "models":
			b.Models = d.strList(v, vp)
		case "limits":
			if l := objectOf(d, v, vp, limitsKeys, d.limits); l != nil {
				b.Limits = *l
			}
		case "max_context_tokens":
			b.MaxContextTokens = opt(d.int(v, vp))
		case "groups":
			if g := objectOf(d, v, vp, groupsKeys, d.groups); g != nil {
				b.Groups = *g
			}
		}
	})
	return b
}

func (d *decoder) limits(l *Limits, key string, v *node, p string) {
	if key == "min" {
		l.Min, _ = d.int(v, p)
		return
	}
	l.Max = opt(d.int(v, p))
}

func (d *decoder) groups(g *GroupsSpec, key string, v *node, p string) {
	if key == "plain" {
		g.Plain = d.group(v, p)
		return
	}
	if v.kind == kindNull {
		g.PD = &PDSpec{}
		return
	}
	g.PD = objectOf(d, v, p, pdKeys, func(pd *PDSpec, key string, sv *node, sp string) {
		if key == StagePrefill {
			pd.Prefill = d.group(sv, sp)
		} else {
			pd.Decode = d.group(sv, sp)
		}
	})
}

// group decodes a group; an empty (null) group means every engine with the
// inherited policy.
func (d *decoder) group(n *node, p string) *GroupSpec {
	if n.kind == kindNull {
		return &GroupSpec{}
	}
	return objectOf(d, n, p, groupKeys, func(g *GroupSpec, key string, v *node, vp string) {
		if key == "worker_ids" {
			if ids := d.strList(v, vp); ids != nil {
				g.EngineIDs = &ids
			}
			return
		}
		g.Policy = d.policy(v, vp)
	})
}

func (d *decoder) policy(n *node, p string) *PolicySpec {
	switch n.kind {
	case kindNull:
		return nil
	case kindScalar:
		if msg, ok := droppedTypes[foldKey(n.text)]; ok {
			d.reject(p, n, fmt.Sprintf("policy %q %s", n.text, msg))
			return nil
		}
		if slices.Contains(PolicyTypes(), n.text) {
			d.reject(p, n, fmt.Sprintf("must be a mapping; write {type: %s}", n.text))
			return nil
		}
	}
	return objectOf(d, n, p, policyKeys, func(pol *PolicySpec, key string, v *node, vp string) {
		switch key {
		case "type":
			pol.Type, _ = d.str(v, vp)
		case "admission":
			pol.Admission = d.admission(v, vp)
		default:
			for _, s := range policySettings {
				if s.key == key {
					s.decode(d, v, vp, pol)
				}
			}
		}
	})
}

func (d *decoder) admission(n *node, p string) *AdmissionSpec {
	return objectOf(d, n, p, admissionKeys, func(a *AdmissionSpec, key string, v *node, vp string) {
		for _, c := range admissionCaps {
			if c.key == key {
				*c.field(a) = opt(d.int(v, vp))
			}
		}
	})
}

// keysOf lists the keys of a table's entries, in its order.
func keysOf[T any](table []T, key func(T) string) []string {
	out := make([]string, len(table))
	for i, e := range table {
		out[i] = key(e)
	}
	return out
}
