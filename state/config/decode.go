package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
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

// decoder walks a generic tree against the schema, building a Document and
// recording every structural problem. A null value counts as absent.
type decoder struct {
	problems []Problem
	// discarded lists paths whose values were dropped for having the wrong
	// shape; validation problems they cause are not reported twice.
	discarded []string
	// lines maps each visited path to its source line.
	lines map[string]int
}

func (d *decoder) add(path string, line int, msg string) {
	d.problems = append(d.problems, Problem{Path: path, Message: withLine(msg, line)})
}

func (d *decoder) reject(path string, n *node, msg string) {
	d.add(path, n.line, msg)
	d.discarded = append(d.discarded, path)
}

func (d *decoder) mismatch(path string, n *node, want string) {
	d.reject(path, n, fmt.Sprintf("must be %s, not %s", want, n.describe()))
}

// object checks that n is a mapping whose keys are all in keys, calling set
// for each allowed key. Unknown and dropped keys are reported.
func (d *decoder) object(n *node, path string, keys []string, set func(key string, v *node, p string)) bool {
	if n.kind != kindMap {
		d.mismatch(path, n, "a mapping")
		return false
	}
	for _, dup := range n.dups {
		d.add(join(path, dup.key), dup.line, fmt.Sprintf("duplicate key; it is first set at line %d, keep one", dup.first))
	}
	for _, pr := range n.pairs {
		p := join(path, pr.key)
		d.lines[p] = pr.line
		if slices.Contains(keys, pr.key) {
			set(pr.key, pr.value, p)
			continue
		}
		if probs, ok := droppedKey(pr.key, pr.value, p); ok {
			d.problems = append(d.problems, probs...)
			continue
		}
		d.add(p, pr.line, unknownKey(pr.key, keys))
	}
	return true
}

// unknownKey suggests the closest allowed key, or lists them all.
func unknownKey(key string, keys []string) string {
	best, bestDist := "", 3
	for _, k := range keys {
		if dist := editDistance(foldKey(key), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key; did you mean %q?", best)
	}
	return "unknown key; valid keys here are " + strings.Join(keys, ", ")
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (d *decoder) str(n *node, p string) (string, bool) {
	switch n.kind {
	case kindNull:
		return "", false
	case kindScalar:
		return n.text, true
	}
	d.mismatch(p, n, "a string")
	return "", false
}

func (d *decoder) strPtr(n *node, p string) *string {
	if s, ok := d.str(n, p); ok {
		return &s
	}
	return nil
}

func (d *decoder) int(n *node, p string) (int64, bool) {
	if n.kind == kindNull {
		return 0, false
	}
	if n.kind == kindScalar {
		switch n.styp {
		case scalarInt:
			if !n.intOK {
				d.reject(p, n, "integer out of range")
				return 0, false
			}
			return n.i, true
		case scalarFloat:
			if n.f == math.Trunc(n.f) && n.f >= math.MinInt64 && n.f < math.MaxInt64 {
				return int64(n.f), true
			}
		}
	}
	d.mismatch(p, n, "an integer")
	return 0, false
}

func (d *decoder) intPtr(n *node, p string) *int64 {
	if v, ok := d.int(n, p); ok {
		return &v
	}
	return nil
}

func (d *decoder) floatPtr(n *node, p string) *float64 {
	if n.kind == kindNull {
		return nil
	}
	if n.kind == kindScalar {
		switch n.styp {
		case scalarInt:
			if n.intOK {
				f := float64(n.i)
				return &f
			}
		case scalarFloat:
			if math.IsNaN(n.f) || math.IsInf(n.f, 0) {
				d.reject(p, n, "must be a finite number")
				return nil
			}
			f := n.f
			return &f
		}
	}
	d.mismatch(p, n, "a number")
	return nil
}

func (d *decoder) boolPtr(n *node, p string) *bool {
	if n.kind == kindNull {
		return nil
	}
	if n.kind == kindScalar && n.styp == scalarBool {
		b := n.b
		return &b
	}
	d.mismatch(p, n, "true or false")
	return nil
}

func (d *decoder) durationPtr(n *node, p string) *Duration {
	if n.kind == kindNull {
		return nil
	}
	if n.kind == kindScalar && n.styp == scalarString {
		v, err := time.ParseDuration(n.text)
		if err == nil {
			return &Duration{v}
		}
	}
	d.reject(p, n, `must be a Go duration string such as "600s"`)
	return nil
}

// strList decodes a list of strings. A bad item keeps its index with an
// empty placeholder so later paths stay aligned. An empty list is non-nil.
func (d *decoder) strList(n *node, p string) ([]string, bool) {
	if n.kind == kindNull {
		return nil, false
	}
	if n.kind != kindSeq {
		d.mismatch(p, n, "a list of strings")
		return nil, false
	}
	out := make([]string, 0, len(n.items))
	for i, it := range n.items {
		ip := index(p, i)
		d.lines[ip] = it.line
		s, ok := d.str(it, ip)
		if !ok && it.kind == kindNull {
			d.mismatch(ip, it, "a string")
		}
		out = append(out, s)
	}
	return out, true
}

// list calls item for each element of a sequence.
func (d *decoder) list(n *node, p string, item func(i int, it *node, ip string)) bool {
	if n.kind == kindNull {
		return false
	}
	if n.kind != kindSeq {
		d.mismatch(p, n, "a list")
		return false
	}
	for i, it := range n.items {
		ip := index(p, i)
		d.lines[ip] = it.line
		item(i, it, ip)
	}
	return true
}

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

// lineFor returns the source line of path or of its nearest recorded
// ancestor, or 0.
func (d *decoder) lineFor(path string) int {
	for {
		if l, ok := d.lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// covers reports whether a validation problem at path is a consequence of a
// value the schema walk already rejected: the path itself, anything below
// it, or its parent (e.g. "set exactly one of plain or pd").
func (d *decoder) covers(path string) bool {
	for _, r := range d.discarded {
		if path == r || strings.HasPrefix(path, r+".") || strings.HasPrefix(path, r+"[") || path == parentPath(r) {
			return true
		}
	}
	return false
}

// Path construction. Identifier-like keys join with '.', other map keys and
// indexes use brackets: buckets[1].groups.pd, models["org/model"].
func join(path, key string) string {
	if !isIdent(key) {
		return mapKey(path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func mapKey(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func identRune(c rune) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !identRune(c) {
			return false
		}
	}
	return true
}

// parentPath strips the last segment of a path built by join, mapKey or
// index. A quoted key cannot contain `["` unescaped, so the last `["` starts
// the final segment when the path ends in `"]`.
func parentPath(path string) string {
	switch {
	case strings.HasSuffix(path, `"]`):
		return path[:strings.LastIndex(path, `["`)]
	case strings.HasSuffix(path, "]"):
		return path[:strings.LastIndex(path, "[")]
	}
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}
