package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/state/loadtable"
)

// Peer baselines: reference routing rules of the routers sluice is compared with, run inside
// the harness only (they are not product policies and the decider never sees them). A
// -policies entry "peer:NAME" routes every request of its run by the baseline NAME instead of
// the decider; the request then goes to the picked engine exactly as a decider pick does (same
// engine model, same KV-event and load feedback into the decider's state, which the baselines
// that read engine state read from). Each baseline is written from the router's published
// description, cited on its type, not from its code; where the description leaves a detail
// open the comment says what was chosen.
//
// What each baseline sees is what its router sees:
//   - sglang_cache_aware, least_load, round_robin, power_of_two: only their own history, the
//     requests they routed and the completions of those (a proxy's in-flight counts);
//   - llmd and dynamo: the engines' KV events and load reports through the same lagged
//     feedback sluice's policies get (the decider state's KV prefix index and load table),
//     plus, for dynamo, its own tracking of the sequences it routed (as Dynamo's router does).

// peerPrefix marks a -policies entry naming a baseline.
const peerPrefix = "peer:"

// maxPeerEngines bounds the fleet a baseline routes over (tenant bit sets are one uint64).
const maxPeerEngines = 64

// peerNames are the baselines, for flag help and validation.
var peerNames = []string{"sglang_cache_aware", "llmd", "dynamo", "least_load", "round_robin", "power_of_two"}

// isPeer reports whether a -policies entry names a baseline.
func isPeer(p string) bool { return strings.HasPrefix(p, peerPrefix) }

// peerArrival is one request as the harness hands it to a baseline.
type peerArrival struct {
	now    time.Time
	tokens []uint32
	// chain is the prompt's block hash chain at the engines' block size (one hash per full
	// block, each covering every token before it).
	chain []uint64
}

// baseline is a harness-only routing rule.
type baseline interface {
	// pick returns the index of the engine a to go to.
	pick(a *peerArrival) int
	// routed tells the baseline a went to engine i as run.
	routed(i int, a *peerArrival, run *engine.SimRun)
	// finished tells it that run, routed to engine i, has finished.
	finished(i int, run *engine.SimRun)
}

// peerEnv is what the harness offers the baselines that read engine state.
type peerEnv struct {
	n         int
	blockSize int
	rng       *rand.Rand
	// overlap sets out[i] to the prompt tokens engine i holds by the (lagged) KV index.
	overlap func(tokens []uint32, out []int64)
	// load is engine i's load by the (lagged) load table; false when unknown.
	load func(i int) (loadtable.View, bool)
}

// newBaseline builds the baseline named by the -policies entry p (with its "peer:" prefix).
func newBaseline(p string, env peerEnv) (baseline, error) {
	if env.n > maxPeerEngines {
		return nil, fmt.Errorf("%s: at most %d engines", p, maxPeerEngines)
	}
	switch strings.TrimPrefix(p, peerPrefix) {
	case "sglang_cache_aware":
		return newSGLangCacheAware(env, defaultSGLangConfig()), nil
	case "llmd":
		return &llmdScorer{env: env, wPrefix: 3, wQueue: 2, wKV: 2, overlap: make([]int64, env.n), scores: make([]float64, env.n)}, nil
	case "dynamo":
		return newDynamo(env, 1, 0), nil
	case "least_load":
		return &leastLoad{inflight: newInflight(env.n), rng: env.rng}, nil
	case "round_robin":
		return &peerRoundRobin{n: env.n}, nil
	case "power_of_two":
		return &peerPowerOfTwo{inflight: newInflight(env.n), rng: env.rng}, nil
	}
	return nil, fmt.Errorf("unknown baseline %q (known: %s%s)", p, peerPrefix, strings.Join(peerNames, ", "+peerPrefix))
}

// inflight counts the requests a router sent to each engine that have not finished: what a
// proxy knows of load without asking the engines.
type inflight []int

func newInflight(n int) *inflight { x := make(inflight, n); return &x }

func (c *inflight) routed(i int, _ *peerArrival, _ *engine.SimRun) { (*c)[i]++ }
func (c *inflight) finished(i int, _ *engine.SimRun)               { (*c)[i]-- }

// argminRandom is the index of the least of vals, ties broken uniformly by rng.
func argminRandom(vals []float64, rng *rand.Rand) int {
	best, ties := 0, 0
	for i, v := range vals {
		switch {
		case i == 0 || v < vals[best]:
			best, ties = i, 1
		case v == vals[best]:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// --- plain references ----------------------------------------------------------------------

// peerRoundRobin sends request k to engine k mod n.
type peerRoundRobin struct{ n, next int }

func (r *peerRoundRobin) pick(*peerArrival) int {
	i := r.next % r.n
	r.next++
	return i
}
func (*peerRoundRobin) routed(int, *peerArrival, *engine.SimRun) {}
func (*peerRoundRobin) finished(int, *engine.SimRun)             {}

// leastLoad sends each request to the engine with the fewest of the router's requests in
// flight (ties uniformly at random): the classic least-connections proxy rule.
type leastLoad struct {
	*inflight
	rng *rand.Rand
	buf []float64
}

func (l *leastLoad) pick(*peerArrival) int {
	l.buf = l.buf[:0]
	for _, c := range *l.inflight {
		l.buf = append(l.buf, float64(c))
	}
	return argminRandom(l.buf, l.rng)
}

// peerPowerOfTwo is the power of two choices (Mitzenmacher): sample two distinct engines
// uniformly, send to the one with fewer of the router's requests in flight (the first on a
// tie). Its load signal is the router's own in-flight count, as SGLang's and vLLM's routers'
// power_of_two policies use.
type peerPowerOfTwo struct {
	*inflight
	rng *rand.Rand
}

func (p *peerPowerOfTwo) pick(*peerArrival) int {
	n := len(*p.inflight)
	if n == 1 {
		return 0
	}
	a := p.rng.IntN(n)
	b := p.rng.IntN(n - 1)
	if b >= a {
		b++
	}
	if (*p.inflight)[b] < (*p.inflight)[a] {
		return b
	}
	return a
}

// --- SGLang router cache_aware ---------------------------------------------------------------

// sglangConfig is the SGLang router's cache_aware settings (sgl-router / sglang_router,
// `--cache-threshold`, `--balance-abs-threshold`, `--balance-rel-threshold`,
// `--eviction-interval`, `--max-tree-size`).
type sglangConfig struct {
	CacheThreshold   float64
	BalanceAbs       int
	BalanceRel       float64
	EvictionInterval time.Duration
	// MaxTreeSize is per worker, in tokens here (the router counts characters of the text).
	MaxTreeSize int
}

// defaultSGLangConfig is the router's documented defaults: cache threshold 0.3, balance
// thresholds 64 (absolute) and 1.5 (relative), eviction every 120 s down to 2^26 per worker.
func defaultSGLangConfig() sglangConfig {
	return sglangConfig{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, EvictionInterval: 120 * time.Second, MaxTreeSize: 1 << 26}
}

// sglangCacheAware is the SGLang router's cache_aware policy as its published description
// states it (sgl-router's "Cache-Aware Load Balancing Router" description and SGLang router
// docs; the same rule and defaults 0.3 / 64 / 1.5 in the SMG and vLLM router docs): the router
// keeps an approximate radix tree per worker of the requests IT has sent there — never the
// engines' KV events — and for each request:
//
//  1. if the load is imbalanced — (max load − min load) > balance_abs_threshold AND
//     max load > balance_rel_threshold × min load, load being the router's own count of
//     requests in flight per worker — it sends the request to the least-loaded worker;
//  2. otherwise it matches the request's prefix against the tree: if the longest match over
//     the prompt length exceeds cache_threshold, the worker holding that match gets it;
//     else the worker with the smallest tree (the most spare cache, by the router's guess);
//  3. either way the request is inserted into the chosen worker's tree, and a periodic
//     eviction (every eviction_interval) trims each worker's tree to max_tree_size by LRU
//     leaves.
//
// The router's tree is over characters of the request text; the harness has token ids, so
// this tree is over the prompt's tokens at the engines' block granularity (a node per full
// block, keyed by the block's chained hash): a match is whole blocks, the rate is matched
// tokens over prompt tokens. Ties (equal deepest match) go to the worker that touched the
// deepest node most recently; equal loads or tree sizes to the lowest index. The description
// leaves both open. (Some later router versions send a low match to the least-loaded worker
// instead of the smallest tree; this follows the description.) The eviction defaults are the
// router's launch defaults (120 s, 2^26); at these sizes a one-hour replay never evicts.
type sglangCacheAware struct {
	cfg      sglangConfig
	bs       int
	inflight inflight
	tree     map[uint64]*sgNode
	size     []int // tokens per worker tree
	lastEvic time.Time
}

// sgNode is one block of the approximate tree: the workers whose tree holds it and when each
// last inserted or matched through it.
type sgNode struct {
	mask  uint64
	depth int32
	last  []time.Time
}

func newSGLangCacheAware(env peerEnv, cfg sglangConfig) *sglangCacheAware {
	return &sglangCacheAware{cfg: cfg, bs: env.blockSize, inflight: make(inflight, env.n), tree: map[uint64]*sgNode{},
		size: make([]int, env.n)}
}

func (s *sglangCacheAware) pick(a *peerArrival) int {
	if s.lastEvic.IsZero() {
		s.lastEvic = a.now
	}
	for s.cfg.EvictionInterval > 0 && !a.now.Before(s.lastEvic.Add(s.cfg.EvictionInterval)) {
		s.evict()
		s.lastEvic = s.lastEvic.Add(s.cfg.EvictionInterval)
	}
	minL, maxL, minI := s.inflight[0], s.inflight[0], 0
	for i, l := range s.inflight {
		if l < minL {
			minL, minI = l, i
		}
		maxL = max(maxL, l)
	}
	if maxL-minL > s.cfg.BalanceAbs && float64(maxL) > s.cfg.BalanceRel*float64(minL) {
		return minI
	}
	matched, tenant := s.match(a.chain)
	if len(a.tokens) > 0 && float64(matched*s.bs)/float64(len(a.tokens)) > s.cfg.CacheThreshold {
		return tenant
	}
	smallest := 0
	for i, sz := range s.size {
		if sz < s.size[smallest] {
			smallest = i
		}
	}
	return smallest
}

// match is the deepest block any worker's tree holds along chain, and that worker.
func (s *sglangCacheAware) match(chain []uint64) (blocks, tenant int) {
	live := ^uint64(0)
	var deepest *sgNode
	for _, h := range chain {
		nd := s.tree[h]
		if nd == nil || nd.mask&live == 0 {
			break
		}
		live &= nd.mask
		deepest = nd
		blocks++
	}
	if deepest == nil {
		return 0, 0
	}
	tenant = -1
	for i := range s.size {
		if live&(1<<i) != 0 && (tenant < 0 || deepest.last[i].After(deepest.last[tenant])) {
			tenant = i
		}
	}
	return blocks, tenant
}

func (s *sglangCacheAware) routed(i int, a *peerArrival, _ *engine.SimRun) {
	s.inflight[i]++
	bit := uint64(1) << i
	for d, h := range a.chain {
		nd := s.tree[h]
		if nd == nil {
			nd = &sgNode{depth: int32(d), last: make([]time.Time, len(s.size))}
			s.tree[h] = nd
		}
		if nd.mask&bit == 0 {
			nd.mask |= bit
			s.size[i] += s.bs
		}
		nd.last[i] = a.now
	}
}

func (s *sglangCacheAware) finished(i int, _ *engine.SimRun) { s.inflight[i]-- }

// evict trims every worker's tree above MaxTreeSize to it, least recently used first; among
// equally recent nodes the deepest goes first, so a node never outlives its descendants (every
// insert touches the whole path) and what is evicted are leaves.
func (s *sglangCacheAware) evict() {
	for t, sz := range s.size {
		if sz <= s.cfg.MaxTreeSize {
			continue
		}
		bit := uint64(1) << t
		type entry struct {
			h     uint64
			last  time.Time
			depth int32
		}
		var es []entry
		for h, nd := range s.tree {
			if nd.mask&bit != 0 {
				es = append(es, entry{h, nd.last[t], nd.depth})
			}
		}
		sort.Slice(es, func(x, y int) bool {
			if !es[x].last.Equal(es[y].last) {
				return es[x].last.Before(es[y].last)
			}
			if es[x].depth != es[y].depth {
				return es[x].depth > es[y].depth
			}
			return es[x].h < es[y].h
		})
		for _, e := range es {
			if s.size[t] <= s.cfg.MaxTreeSize {
				break
			}
			nd := s.tree[e.h]
			nd.mask &^= bit
			if nd.mask == 0 {
				delete(s.tree, e.h)
			}
			s.size[t] -= s.bs
		}
	}
}

// --- llm-d inference scheduler -------------------------------------------------------------

// llmdScorer is the llm-d inference scheduler's default scheduling profile (llm-d docs,
// "Request Scheduler" / inference-scheduling well-lit path; the Gateway API Inference
// Extension EPP scorers it builds on): filter → score → pick, with three weighted scorers and
// the max-score picker:
//
//   - prefix-cache scorer, weight 3: the fraction of the request's blocks the endpoint holds
//     (here the precise mode, from the engines' KV events: the lagged KV index);
//   - queue scorer, weight 2: the endpoint's waiting queue min-max normalised across the
//     candidates, (max − q) / (max − min), 1 for every endpoint when all queues are equal;
//   - kv-cache-utilization scorer, weight 2: 1 − KV cache usage (used / capacity tokens);
//
// the endpoint with the highest weighted sum wins, ties uniformly at random. Queue and KV
// usage come from the engines' load reports as the decider's load table holds them (an
// endpoint with no fresh report scores as idle and empty, as a pod whose metrics are unknown
// would not be filtered here).
type llmdScorer struct {
	env                  peerEnv
	wPrefix, wQueue, wKV float64
	overlap              []int64
	scores               []float64
}

func (l *llmdScorer) pick(a *peerArrival) int {
	n := l.env.n
	l.env.overlap(a.tokens, l.overlap)
	blocks := len(a.tokens) / l.env.blockSize
	minQ, maxQ := int64(math.MaxInt64), int64(0)
	queues := make([]int64, n)
	util := make([]float64, n)
	for i := range n {
		if v, ok := l.env.load(i); ok {
			queues[i] = v.Waiting
			if v.KVCapacityTokens > 0 {
				util[i] = min(float64(v.KVUsedTokens)/float64(v.KVCapacityTokens), 1)
			}
		}
		minQ, maxQ = min(minQ, queues[i]), max(maxQ, queues[i])
	}
	for i := range n {
		prefix := 0.0
		if blocks > 0 {
			prefix = float64(l.overlap[i]/int64(l.env.blockSize)) / float64(blocks)
		}
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-queues[i]) / float64(maxQ-minQ)
		}
		// argminRandom picks the least, so the scores are negated.
		l.scores[i] = -(l.wPrefix*prefix + l.wQueue*queue + l.wKV*(1-util[i]))
	}
	return argminRandom(l.scores, l.env.rng)
}
func (*llmdScorer) routed(int, *peerArrival, *engine.SimRun) {}
func (*llmdScorer) finished(int, *engine.SimRun)             {}

// --- NVIDIA Dynamo KV router ---------------------------------------------------------------

// dynamoRouter is NVIDIA Dynamo's KV router (Dynamo docs, "KV Router" / "Routing Concepts",
// "Cost Calculation"): for each worker
//
//	prefill_blocks = (active prefill tokens + the request's tokens not in the worker's
//	                  cache by the KV index) / block size
//	decode_blocks  = the worker's active blocks + the request's blocks not among them
//	cost           = kv_overlap_score_weight × prefill_blocks + decode_blocks
//
// and the router takes the lowest cost (router_temperature 0, the default; ties at random) or,
// with a temperature, samples by softmax over the normalised cost logits. The overlap comes
// from the engines' KV events (the lagged KV index); the active prefill and decode load is the
// router's own tracking of the sequences it routed, as Dynamo's slot tracker does: a request's
// uncached prompt tokens count as prefill load until its first token, and its blocks as
// active until it finishes, blocks shared by a worker's active sequences counted once
// (router_assume_kv_reuse, default on). Defaults: weight 1, temperature 0.
type dynamoRouter struct {
	env         peerEnv
	weight      float64
	temperature float64
	// active[i] counts, per block hash, engine i's active sequences holding the block.
	active []map[uint64]int
	// prefill[i] is engine i's sequences still in prefill, with their predicted prefill tokens.
	prefill  [][]dynPrefill
	overlap  []int64
	costs    []float64
	uncached []int64 // per engine, for routed
	chains   map[*engine.SimRun][]uint64
}

type dynPrefill struct {
	run    *engine.SimRun
	tokens int64
}

func newDynamo(env peerEnv, weight, temperature float64) *dynamoRouter {
	d := &dynamoRouter{env: env, weight: weight, temperature: temperature, active: make([]map[uint64]int, env.n),
		prefill: make([][]dynPrefill, env.n), overlap: make([]int64, env.n), costs: make([]float64, env.n), uncached: make([]int64, env.n),
		chains: map[*engine.SimRun][]uint64{}}
	for i := range d.active {
		d.active[i] = map[uint64]int{}
	}
	return d
}

// cost fills d.costs for a and returns them.
func (d *dynamoRouter) cost(a *peerArrival) []float64 {
	bs := float64(d.env.blockSize)
	d.env.overlap(a.tokens, d.overlap)
	for i := range d.env.n {
		// Prefill ends at the first token, which the router sees on the response stream.
		d.prefill[i] = slices.DeleteFunc(d.prefill[i], func(p dynPrefill) bool {
			return !p.run.FirstToken.IsZero() && !p.run.FirstToken.After(a.now)
		})
		var activePrefill int64
		for _, p := range d.prefill[i] {
			activePrefill += p.tokens
		}
		d.uncached[i] = max(int64(len(a.tokens))-d.overlap[i], 0)
		newBlocks := 0
		for _, h := range a.chain {
			if d.active[i][h] == 0 {
				newBlocks++
			}
		}
		prefillBlocks := float64(activePrefill+d.uncached[i]) / bs
		decodeBlocks := float64(len(d.active[i]) + newBlocks)
		d.costs[i] = d.weight*prefillBlocks + decodeBlocks
	}
	return d.costs
}

func (d *dynamoRouter) pick(a *peerArrival) int {
	costs := d.cost(a)
	if d.temperature <= 0 {
		return argminRandom(costs, d.env.rng)
	}
	// Softmax over the negated costs normalised by the largest, at the temperature.
	hi := 0.0
	for _, c := range costs {
		hi = max(hi, math.Abs(c))
	}
	if hi == 0 {
		hi = 1
	}
	w := make([]float64, len(costs))
	var sum float64
	lo := math.Inf(1)
	for _, c := range costs {
		lo = min(lo, c)
	}
	for i, c := range costs {
		w[i] = math.Exp(-(c - lo) / hi / d.temperature)
		sum += w[i]
	}
	x := d.env.rng.Float64() * sum
	for i, v := range w {
		if x < v {
			return i
		}
		x -= v
	}
	return len(w) - 1
}

func (d *dynamoRouter) routed(i int, a *peerArrival, run *engine.SimRun) {
	for _, h := range a.chain {
		d.active[i][h]++
	}
	// pick ran cost for a just before, so uncached[i] is this request's prediction.
	d.prefill[i] = append(d.prefill[i], dynPrefill{run: run, tokens: d.uncached[i]})
	d.chains[run] = a.chain
}

func (d *dynamoRouter) finished(i int, run *engine.SimRun) {
	for _, h := range d.chains[run] {
		if d.active[i][h]--; d.active[i][h] <= 0 {
			delete(d.active[i], h)
		}
	}
	delete(d.chains, run)
	d.prefill[i] = slices.DeleteFunc(d.prefill[i], func(p dynPrefill) bool { return p.run == run })
}
