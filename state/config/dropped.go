package config

// Messages for the options SGLang's router dropped (docs/decisions.md,
// "Dropped options"). Each says what replaces the option.
const (
	msgDroppedFused    = "removed; use cache_aware (prefix reuse) or power_of_two (load)"
	msgDroppedLegacy   = "removed; use session_aware or sticky"
	msgDroppedStable   = "removed; each PD bucket picks prefill and decode from its own groups"
	msgDroppedAffinity = "removed; only strict admitted-binding reuse remains (session_aware/sticky)"
	msgDroppedPrefix   = "removed; not equivalent to cache_aware's min_match_tokens gate — set policy type cache_aware with min_match_tokens"
	msgDroppedInFlight = "removed; use admission.max_inflight_requests"
	msgDroppedFilter   = "removed; set hard caps under policy.admission"
)

// droppedTypes maps removed policy type names to their replacement message.
var droppedTypes = map[string]string{
	"fused_score":          msgDroppedFused,
	"score_policy":         msgDroppedFused,
	"legacy_host_affinity": msgDroppedLegacy,
}

// droppedKeys maps removed option keys to their replacement message. Keys
// are matched after folding '-' to '_', so CLI spellings are caught too.
var droppedKeys = map[string]string{
	"fuse":                   msgDroppedFused,
	"fuse_terms":             msgDroppedFused,
	"fuse_weights":           msgDroppedFused,
	"fused_score":            msgDroppedFused,
	"score_policy":           msgDroppedFused,
	"legacy_host_affinity":   msgDroppedLegacy,
	"stable_pair":            msgDroppedStable,
	"affinity_mode":          msgDroppedAffinity,
	"prefix_cache_min_share": msgDroppedPrefix,
	"max_in_flight":          msgDroppedInFlight,
}

// droppedFilters maps values of the removed filter option.
var droppedFilters = map[string]string{
	"prefix_cache": msgDroppedPrefix,
	"overloaded":   msgDroppedInFlight,
}

// droppedKey reports the problems for a dropped key at path, or false when
// key is not a dropped option.
func droppedKey(key string, v *node, path string) ([]Problem, bool) {
	k := foldKey(key)
	if msg, ok := droppedKeys[k]; ok {
		return []Problem{{Path: path, Message: withLine(msg, v.line)}}, true
	}
	if k != "filter" {
		// An unknown key whose value names a removed policy type (for
		// example the CLI's decode_policy: legacy_host_affinity) gets the
		// replacement advice rather than a bare "unknown key".
		if v.kind == kindScalar {
			if msg, ok := droppedTypes[foldKey(v.text)]; ok {
				return []Problem{{Path: path, Message: withLine(msg, v.line)}}, true
			}
		}
		return nil, false
	}
	var out []Problem
	report := func(n *node, p string) {
		msg, ok := droppedFilters[foldKey(n.text)]
		if n.kind != kindScalar || !ok {
			msg = msgDroppedFilter
		}
		out = append(out, Problem{Path: p, Message: withLine(msg, n.line)})
	}
	if v.kind == kindSeq && len(v.items) > 0 {
		for i, it := range v.items {
			report(it, index(path, i))
		}
	} else {
		report(v, path)
	}
	return out, true
}
