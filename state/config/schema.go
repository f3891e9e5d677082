package config

import (
	"fmt"
	"slices"
)

// Allowed keys of each mapping in the schema, in documentation order.
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

func (d *decoder) document(n *node) *Document {
	doc := &Document{}
	if n == nil || n.kind == kindNull {
		return doc
	}
	d.object(n, "", documentKeys, func(key string, v *node, p string) {
		switch key {
		case "workers":
			ws := []EngineSpec{}
			if d.list(v, p, func(_ int, it *node, ip string) { ws = append(ws, d.engine(it, ip)) }) {
				doc.Engines = ws
			}
		case "buckets":
			bs := []BucketSpec{}
			if d.list(v, p, func(_ int, it *node, ip string) { bs = append(bs, d.bucket(it, ip)) }) {
				doc.Buckets = bs
			}
		case "default_policy":
			doc.DefaultPolicy = d.stagePolicies(v, p)
		case "models":
			doc.Models = d.models(v, p)
		}
	})
	return doc
}

func (d *decoder) models(n *node, p string) map[string]ModelSpec {
	if n.kind == kindNull {
		return nil
	}
	if n.kind != kindMap {
		d.mismatch(p, n, "a mapping of model id to settings")
		return nil
	}
	for _, dup := range n.dups {
		d.add(mapKey(p, dup.key), dup.line, fmt.Sprintf("duplicate key; it is first set at line %d, keep one", dup.first))
	}
	if len(n.pairs) == 0 {
		return nil
	}
	out := make(map[string]ModelSpec, len(n.pairs))
	for _, pr := range n.pairs {
		mp := mapKey(p, pr.key)
		d.lines[mp] = pr.line
		var m ModelSpec
		if pr.value.kind != kindNull {
			d.object(pr.value, mp, modelKeys, func(_ string, v *node, vp string) {
				m.DefaultPolicy = d.stagePolicies(v, vp)
			})
		}
		out[pr.key] = m
	}
	return out
}

func (d *decoder) stagePolicies(n *node, p string) *StagePolicies {
	if n.kind == kindNull {
		return nil
	}
	s := &StagePolicies{}
	if !d.object(n, p, stageKeys, func(key string, v *node, vp string) {
		pol := d.policy(v, vp)
		switch key {
		case StagePlain:
			s.Plain = pol
		case StagePrefill:
			s.Prefill = pol
		case StageDecode:
			s.Decode = pol
		}
	}) {
		return nil
	}
	return s
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
			w.Models, _ = d.strList(v, vp)
		case "role":
			w.Role, _ = d.str(v, vp)
		case "bootstrap_port":
			if port, ok := d.int(v, vp); ok {
				if port < 1 || port > 65535 {
					d.reject(vp, v, "must be a port number between 1 and 65535")
					return
				}
				w.BootstrapPort = uint32(port)
			}
		case "labels":
			w.Labels = d.labels(v, vp)
		case "kv_events_endpoint":
			w.KVEventsEndpoint, _ = d.str(v, vp)
		case "kv_replay_endpoint":
			w.KVReplayEndpoint, _ = d.str(v, vp)
		case "metrics_url":
			w.MetricsURL, _ = d.str(v, vp)
		case "dp_size":
			if n, ok := d.int(v, vp); ok {
				if n < 0 || n > maxDPSize {
					d.reject(vp, v, fmt.Sprintf("must be between 0 and %d", maxDPSize))
					return
				}
				w.DPSize = int32(n)
			}
		case "lora_adapters":
			w.LoRAAdapters, _ = d.strList(v, vp)
		}
	})
	return w
}

func (d *decoder) labels(n *node, p string) map[string]string {
	if n.kind == kindNull {
		return nil
	}
	if n.kind != kindMap {
		d.mismatch(p, n, "a mapping of strings")
		return nil
	}
	for _, dup := range n.dups {
		d.add(mapKey(p, dup.key), dup.line, fmt.Sprintf("duplicate key; it is first set at line %d, keep one", dup.first))
	}
	if len(n.pairs) == 0 {
		return nil
	}
	out := make(map[string]string, len(n.pairs))
	for _, pr := range n.pairs {
		lp := mapKey(p, pr.key)
		d.lines[lp] = pr.line
		v, _ := d.str(pr.value, lp)
		out[pr.key] = v
	}
	return out
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
			b.Models, _ = d.strList(v, vp)
		case "limits":
			if v.kind == kindNull {
				return
			}
			d.object(v, vp, limitsKeys, func(key string, lv *node, lp string) {
				if key == "min" {
					b.Limits.Min, _ = d.int(lv, lp)
				} else {
					b.Limits.Max = d.intPtr(lv, lp)
				}
			})
		case "max_context_tokens":
			b.MaxContextTokens = d.intPtr(v, vp)
		case "groups":
			if v.kind == kindNull {
				return
			}
			d.object(v, vp, groupsKeys, func(key string, gv *node, gp string) {
				if key == "plain" {
					b.Groups.Plain = d.group(gv, gp)
					return
				}
				if gv.kind == kindNull {
					b.Groups.PD = &PDSpec{}
					return
				}
				pd := &PDSpec{}
				if d.object(gv, gp, pdKeys, func(key string, sv *node, sp string) {
					if key == StagePrefill {
						pd.Prefill = d.group(sv, sp)
					} else {
						pd.Decode = d.group(sv, sp)
					}
				}) {
					b.Groups.PD = pd
				}
			})
		}
	})
	return b
}

// group decodes a group; an empty (null) group means every engine with the
// inherited policy.
func (d *decoder) group(n *node, p string) *GroupSpec {
	g := &GroupSpec{}
	if n.kind == kindNull {
		return g
	}
	if !d.object(n, p, groupKeys, func(key string, v *node, vp string) {
		if key == "worker_ids" {
			if ids, ok := d.strList(v, vp); ok {
				g.EngineIDs = &ids
			}
			return
		}
		g.Policy = d.policy(v, vp)
	}) {
		return nil
	}
	return g
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
			pol.MinMatchTokens = d.intPtr(v, vp)
		case "min_match_ratio":
			pol.MinMatchRatio = d.floatPtr(v, vp)
		case "candidate_min":
			pol.CandidateMin = d.intPtr(v, vp)
		case "candidate_ratio":
			pol.CandidateRatio = d.floatPtr(v, vp)
		case "candidate_max":
			pol.CandidateMax = d.intPtr(v, vp)
		case "switch_margin_tokens":
			pol.SwitchMarginTokens = d.intPtr(v, vp)
		case "pressure_guard":
			pol.PressureGuard = d.boolPtr(v, vp)
		case "guard_absolute_tokens":
			pol.GuardAbsoluteTokens = d.intPtr(v, vp)
		case "guard_absolute_ms":
			pol.GuardAbsoluteMillis = d.intPtr(v, vp)
		case "guard_factor":
			pol.GuardFactor = d.floatPtr(v, vp)
		case "queue_limit":
			pol.QueueLimit = d.intPtr(v, vp)
		case "saturation_floor":
			pol.SaturationFloor = d.intPtr(v, vp)
		case "miss_choices":
			pol.MissChoices = d.intPtr(v, vp)
		case "idle_timeout":
			pol.IdleTimeout = d.durationPtr(v, vp)
		case "fallback":
			pol.Fallback = d.strPtr(v, vp)
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
			a.MaxRunningRequests = d.intPtr(v, vp)
		case "max_waiting_requests":
			a.MaxWaitingRequests = d.intPtr(v, vp)
		case "max_kv_tokens":
			a.MaxKVTokens = d.intPtr(v, vp)
		case "max_pending_prefill_tokens":
			a.MaxPendingPrefillTokens = d.intPtr(v, vp)
		case "max_inflight_requests":
			a.MaxInflightRequests = d.intPtr(v, vp)
		}
	}) {
		return nil
	}
	return a
}
