package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// maxIDLen bounds bucket and engine ids; both appear in REST paths
// (/v1/admin/buckets/{id}, /v1/admin/engines/{id}), metrics labels and logs.
const maxIDLen = 128

// idRule is the rule bucket and engine ids follow, as problem messages state
// it: ids appear in REST paths, metrics labels and logs, so no '/', spaces or
// control characters.
const idRule = "must use only letters, digits, '.', '_' and '-'"

// checkID returns what is wrong with a bucket or engine id, or "".
func checkID(id, what string) string {
	switch {
	case id == "":
		return "required; give the " + what + " a unique id"
	case len(id) > maxIDLen:
		return fmt.Sprintf("must be at most %d characters", maxIDLen)
	case strings.IndexFunc(id, func(r rune) bool { return !idRune(r) }) >= 0:
		return idRule
	}
	return ""
}

// Validate checks every semantic rule and returns a [*ValidationError]
// listing all problems, or nil. A nil document is valid (all defaults).
// Engine ids named by groups are checked against Engines only when the
// document lists engines; otherwise they are checked at run time.
func (d *Document) Validate() error {
	if d == nil {
		return nil
	}
	v := &validator{}
	v.document(d)
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

type validator struct {
	problems []Problem
	engines  map[string]string // id → role, nil when the document lists none
}

func (v *validator) addf(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) document(d *Document) {
	v.engineList(d.Engines)
	if d.Buckets != nil && len(d.Buckets) == 0 {
		v.addf("buckets", "empty list; omit the key for the default plain and pd buckets")
	}
	ids := map[string]int{}
	for i, b := range d.Buckets {
		v.bucket(b, i, ids)
	}
	v.stagePolicies(d.DefaultPolicy, "default_policy")
	for _, name := range slices.Sorted(maps.Keys(d.Models)) {
		p := mapKey("models", name)
		if strings.TrimSpace(name) == "" {
			v.addf(p, "model id must not be empty; name the model these settings apply to")
		}
		v.stagePolicies(d.Models[name].DefaultPolicy, join(p, "default_policy"))
	}
	v.ttftSLO(d.TTFTSLO)
	v.shards(d.Shards)
}

func (v *validator) engineList(ws []EngineSpec) {
	if ws == nil {
		return
	}
	v.engines = map[string]string{}
	if len(ws) == 0 {
		v.addf("workers", "empty list; omit the key to check worker ids against the live registry instead")
		return
	}
	firstIndex := map[string]int{}
	// modelKind records, per model, the first engine serving it as plain
	// ("plain") or as prefill/decode ("pd"), to reject mixing the two.
	type seenAt struct {
		kind  string
		index int
	}
	modelKind := map[string]seenAt{}
	for i, w := range ws {
		p := index("workers", i)
		if v.uniqueID(firstIndex, "workers", "worker", w.ID, i) {
			v.engines[w.ID] = w.Role
		}
		if w.URL == "" {
			v.addf(join(p, "url"), `required; set the engine's base URL such as "http://10.0.0.5:30000"`)
		} else if !isHTTPURL(w.URL) {
			v.addf(join(p, "url"), `must be an absolute http or https URL such as "http://10.0.0.5:30000"`)
		}
		if len(w.Models) == 0 {
			v.addf(join(p, "models"), "required; list at least one model id the engine serves")
		}
		v.uniqueEntries(w.Models, join(p, "models"), modelEntries, nil)
		switch w.Role {
		case "":
			v.addf(join(p, "role"), "required; set plain, prefill or decode")
		case RolePlain, RolePrefill, RoleDecode:
			kind := "pd"
			if w.Role == RolePlain {
				kind = "plain"
			}
			for _, m := range w.Models {
				first, ok := modelKind[m]
				if !ok {
					modelKind[m] = seenAt{kind, i}
					continue
				}
				if first.kind != kind && first.kind != "reported" {
					v.addf(join(p, "role"), "model %q already has %s engines (workers[%d]); a model's engines must be all plain or all prefill/decode",
						m, map[string]string{"plain": "plain", "pd": "prefill/decode"}[first.kind], first.index)
					modelKind[m] = seenAt{"reported", i}
				}
			}
		default:
			v.addf(join(p, "role"), "unknown role %q; set plain, prefill or decode", w.Role)
		}
		if w.BootstrapPort != 0 {
			if w.Role != RolePrefill && isRole(w.Role) {
				v.addf(join(p, "bootstrap_port"), "only valid for prefill workers (role is %s); remove it", w.Role)
			} else if w.BootstrapPort > 65535 {
				v.addf(join(p, "bootstrap_port"), portRule)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(w.Labels)) {
			if k == "" {
				v.addf(mapKey(join(p, "labels"), k), "label key must not be empty")
			}
		}
		v.engineEndpoints(w, p)
	}
}

// maxDPSize bounds an engine's data-parallel size (ranks are ports base+r).
const maxDPSize = 1024

// Range rules that both the schema walk (of text) and Validate (of
// documents built in code) state.
const portRule = "must be a port number between 1 and 65535"

var dpSizeRule = fmt.Sprintf("must be between 0 and %d", maxDPSize)

// engineEndpoints checks the optional enginelink endpoints of an engine.
func (v *validator) engineEndpoints(w EngineSpec, p string) {
	if w.KVEventsEndpoint != "" {
		if err := checkZMQEndpoint(strings.TrimPrefix(w.KVEventsEndpoint, bindPrefix)); err != nil {
			v.addf(join(p, "kv_events_endpoint"), "%v (or bind:tcp://host:port for an engine that connects to enginelink's -kv-bind)", err)
		}
	}
	if w.KVReplayEndpoint != "" {
		if err := checkZMQEndpoint(w.KVReplayEndpoint); err != nil {
			v.addf(join(p, "kv_replay_endpoint"), "%v", err)
		}
		if w.KVEventsEndpoint == "" {
			v.addf(join(p, "kv_replay_endpoint"), "set without kv_events_endpoint; replay only fills gaps of an event stream, so set both or neither")
		}
	}
	if w.MetricsURL != "" && !isHTTPURL(w.MetricsURL) {
		v.addf(join(p, "metrics_url"), `must be an absolute http or https URL such as "http://10.0.0.5:30000/metrics"`)
	}
	if w.DPSize < 0 || w.DPSize > maxDPSize {
		v.addf(join(p, "dp_size"), "%s", dpSizeRule)
	}
	v.uniqueEntries(w.LoRAAdapters, join(p, "lora_adapters"), adapterEntries, nil)
	for i, a := range w.LoRAAdapters {
		if slices.Contains(w.Models, a) {
			v.addf(index(join(p, "lora_adapters"), i), "%q is also listed in models; list an adapter only under lora_adapters", a)
		}
	}
}

// bindPrefix marks a KV-events endpoint the link binds (engines connect to
// it) rather than connects to.
const bindPrefix = "bind:"

// checkZMQEndpoint reports whether ep is a ZMQ endpoint enginelink can use:
// tcp://host:port, ipc://path or inproc://name.
func checkZMQEndpoint(ep string) error {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok || rest == "" {
		return fmt.Errorf("%q is not a ZMQ endpoint; use tcp://host:port, ipc://path or inproc://name", ep)
	}
	switch scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil || host == "" {
			return fmt.Errorf("%q: want tcp://host:port (host may be * for an engine that binds)", ep)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port must be a number between 1 and 65535", ep)
		}
	case "ipc", "inproc":
	default:
		return fmt.Errorf("%q: unsupported transport %q; use tcp, ipc or inproc", ep, scheme)
	}
	return nil
}

// isHTTPURL reports whether s is an absolute http or https URL.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// uniqueID checks the id of entry i of the list at path list ("workers"),
// whose entries are each a what ("worker"): it must follow the id rule and
// not repeat an id in seen, where it is then recorded. It reports whether
// the id was recorded.
func (v *validator) uniqueID(seen map[string]int, list, what, id string, i int) bool {
	p := join(index(list, i), "id")
	first, dup := seen[id]
	switch msg := checkID(id, what); {
	case msg != "":
		v.addf(p, "%s", msg)
	case dup:
		v.addf(p, "duplicate %s id %q (also %s[%d]); %s ids must be unique", what, id, list, first, what)
	default:
		seen[id] = i
		return true
	}
	return false
}

// entryRule says when an entry of a list of names is empty, and how
// problems name its entries.
type entryRule struct {
	blank func(string) bool
	empty string // the problem of a blank entry
	noun  string // what a repeated entry is: duplicate <noun> "x"
}

var (
	modelEntries   = entryRule{blank: isBlank, empty: "model id must not be empty", noun: "model"}
	adapterEntries = entryRule{blank: isBlank, empty: "LoRA adapter id must not be empty", noun: "LoRA adapter"}
	// A group's worker ids are checked against the engine list, when the
	// document has one, or at run time: only "" is blank here.
	workerIDEntries = entryRule{blank: func(s string) bool { return s == "" }, empty: "worker id must not be empty", noun: "worker id"}
)

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// uniqueEntries checks that no entry of a list of names is blank or
// repeated, and calls each (when set) with every other entry.
func (v *validator) uniqueEntries(items []string, path string, r entryRule, each func(p, s string)) {
	first := map[string]int{}
	for i, s := range items {
		ip := index(path, i)
		if r.blank(s) {
			v.addf(ip, "%s", r.empty)
			continue
		}
		if j, dup := first[s]; dup {
			v.addf(ip, "duplicate %s %q (also at index %d); list it once", r.noun, s, j)
			continue
		}
		first[s] = i
		if each != nil {
			each(ip, s)
		}
	}
}

func (v *validator) bucket(b BucketSpec, i int, ids map[string]int) {
	p := index("buckets", i)
	v.uniqueID(ids, "buckets", "bucket", b.ID, i)
	if b.Models != nil && len(b.Models) == 0 {
		v.addf(join(p, "models"), "empty list; omit the key to serve every model")
	}
	v.uniqueEntries(b.Models, join(p, "models"), modelEntries, nil)
	lp := join(p, "limits")
	if b.Limits.Min < 0 {
		v.addf(join(lp, "min"), "must be >= 0")
	}
	if b.Limits.Max != nil && *b.Limits.Max < b.Limits.Min {
		v.addf(join(lp, "max"), "must be >= limits.min (%d); omit it for no upper bound", b.Limits.Min)
	}
	if c := b.MaxContextTokens; c != nil {
		if *c < 1 {
			v.addf(join(p, "max_context_tokens"), "must be >= 1; omit it for unbounded context")
		} else if *c < b.Limits.Min {
			v.addf(join(p, "max_context_tokens"), "is below limits.min (%d), so no request could ever fit; raise it or lower limits.min", b.Limits.Min)
		}
	}
	gp := join(p, "groups")
	switch g := b.Groups; {
	case g.Plain == nil && g.PD == nil:
		v.addf(gp, "required; set exactly one of plain or pd")
	case g.Plain != nil && g.PD != nil:
		v.addf(gp, "set exactly one of plain or pd, not both")
	case g.Plain != nil:
		v.group(g.Plain, join(gp, "plain"), StagePlain)
	default:
		pp := join(gp, "pd")
		if g.PD.Prefill == nil {
			v.addf(join(pp, "prefill"), "required; a pd bucket needs both prefill and decode groups")
		} else {
			v.group(g.PD.Prefill, join(pp, "prefill"), StagePrefill)
		}
		if g.PD.Decode == nil {
			v.addf(join(pp, "decode"), "required; a pd bucket needs both prefill and decode groups")
		} else {
			v.group(g.PD.Decode, join(pp, "decode"), StageDecode)
		}
	}
}

func idRune(r rune) bool {
	return r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func (v *validator) group(g *GroupSpec, p, stage string) {
	if g.EngineIDs != nil {
		v.uniqueEntries(*g.EngineIDs, join(p, "worker_ids"), workerIDEntries, func(ip, id string) {
			if v.engines == nil {
				return
			}
			role, ok := v.engines[id]
			switch {
			case !ok:
				v.addf(ip, "worker %q is not listed in workers; add it there or remove it from this group", id)
			case role != stage && isRole(role):
				v.addf(ip, "worker %q has role %s; a %s group takes %s engines", id, role, stage, stage)
			}
		})
	}
	v.policy(g.Policy, join(p, "policy"), stage)
}

func (v *validator) stagePolicies(s *StagePolicies, p string) {
	if s == nil {
		return
	}
	v.policy(s.Plain, join(p, StagePlain), StagePlain)
	v.policy(s.Prefill, join(p, StagePrefill), StagePrefill)
	v.policy(s.Decode, join(p, StageDecode), StageDecode)
}

func (v *validator) policy(pol *PolicySpec, p, stage string) {
	if pol == nil {
		return
	}
	tp := join(p, "type")
	known := slices.Contains(PolicyTypes(), pol.Type)
	switch {
	case pol.Type == "":
		v.addf(tp, "required; use one of %s", strings.Join(PolicyTypes(), ", "))
	case droppedTypes[pol.Type] != "":
		v.addf(tp, "type %q %s", pol.Type, droppedTypes[pol.Type])
	case !known:
		v.addf(tp, "unknown policy type %q; use one of %s", pol.Type, strings.Join(PolicyTypes(), ", "))
	case pol.Type == PolicyCacheAware && stage == StageDecode:
		v.addf(tp, "cache_aware needs prefill work; use power_of_two or load_based for decode")
	case pol.Type == PolicyTTFTAware && stage == StageDecode:
		v.addf(tp, "ttft_aware estimates prefill; use power_of_two or load_based for decode")
	}
	for _, s := range policySettings {
		if !s.isSet(pol) {
			continue
		}
		sp := join(p, s.key)
		if known && !slices.Contains(s.types, pol.Type) {
			switch {
			case s.guard:
				v.addf(sp, "pressure-guard tuning applies to cache_aware only (type is %s); remove it", pol.Type)
			case len(s.types) == 1:
				v.addf(sp, "only valid for type %s (type is %s)", s.types[0], pol.Type)
			default:
				v.addf(sp, "only valid for types %s (type is %s)", strings.Join(s.types, " and "), pol.Type)
			}
			continue
		}
		if msg := s.check(pol); msg != "" {
			v.addf(sp, "%s", msg)
		}
	}
	if a := pol.Admission; a != nil {
		ap := join(p, "admission")
		for _, c := range admissionCaps {
			if limit := *c.limit(a); limit != nil && *limit < 1 {
				v.addf(join(ap, c.key), "must be >= 1; omit it to leave this metric unchecked")
			}
		}
	}
}

// isRole reports whether r is an engine role.
func isRole(r string) bool { return r == RolePlain || r == RolePrefill || r == RoleDecode }
