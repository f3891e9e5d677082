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
	admissionKeys = []string{"max_running_requests", "max_waiting_requests", "max_kv_tokens",
		"max_pending_prefill_tokens", "max_inflight_requests"}
	policyKeys = []string{"type", "admission", "min_match_tokens", "min_match_ratio",
		"candidate_min", "candidate_ratio", "candidate_max", "switch_margin_tokens",
		"pressure_guard", "guard_absolute_tokens", "guard_absolute_ms", "guard_factor",
		"queue_limit", "saturation_floor", "miss_choices", "idle_timeout", "fallback"}
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
	pol := &PolicySpec{}
	if !d.object(n, p, policyKeys, func(key string, v *node, vp string) {
		switch key {
		case "type":
			pol.Type, _ = d.str(v, vp)
		case "admission":
			pol.Admission = d.admission(v, vp)
		case "min_match_tokens":
			pol.MinMatchTokens = opt(d.int(v, vp))
		case "min_match_ratio":
			pol.MinMatchRatio = opt(d.float(v, vp))
		case "candidate_min":
			pol.CandidateMin = opt(d.int(v, vp))
		case "candidate_ratio":
			pol.CandidateRatio = opt(d.float(v, vp))
		case "candidate_max":
			pol.CandidateMax = opt(d.int(v, vp))
		case "switch_margin_tokens":
			pol.SwitchMarginTokens = opt(d.int(v, vp))
		case "pressure_guard":
			pol.PressureGuard = opt(d.bool(v, vp))
		case "guard_absolute_tokens":
			pol.GuardAbsoluteTokens = opt(d.int(v, vp))
		case "guard_absolute_ms":
			pol.GuardAbsoluteMillis = opt(d.int(v, vp))
		case "guard_factor":
			pol.GuardFactor = opt(d.float(v, vp))
		case "queue_limit":
			pol.QueueLimit = opt(d.int(v, vp))
		case "saturation_floor":
			pol.SaturationFloor = opt(d.int(v, vp))
		case "miss_choices":
			pol.MissChoices = opt(d.int(v, vp))
		case "idle_timeout":
			pol.IdleTimeout = opt(d.duration(v, vp))
		case "fallback":
			pol.Fallback = opt(d.str(v, vp))
		}
	}) {
		return nil
	}
	return pol
}

func (d *decoder) admission(n *node, p string) *AdmissionSpec {
	if n.kind == kindNull {
		return nil
	}
	a := &AdmissionSpec{}
	if !d.object(n, p, admissionKeys, func(key string, v *node, vp string) {
		switch key {
		case "max_running_requests":
			a.MaxRunningRequests = opt(d.int(v, vp))
		case "max_waiting_requests":
			a.MaxWaitingRequests = opt(d.int(v, vp))
		case "max_kv_tokens":
			a.MaxKVTokens = opt(d.int(v, vp))
		case "max_pending_prefill_tokens":
			a.MaxPendingPrefillTokens = opt(d.int(v, vp))
		case "max_inflight_requests":
			a.MaxInflightRequests = opt(d.int(v, vp))
		}
	}) {
		return nil
	}
	return a
}
