package policy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// Pick reasons of ttft_aware.
const (
	// ReasonLeastTTFT: the candidate with the least estimated time to first token.
	ReasonLeastTTFT = "least_ttft"
	// ReasonHotSpotGuard: the best estimate's batch was full, and an engine that admits at once
	// was within the margin of it.
	ReasonHotSpotGuard = "hot_spot_guard"
)

// Where a candidate's queue-ahead figure came from (TTFTParts.QueueFrom).
const (
	QueueFromReport   = "reported pending prefill"
	QueueFromWaiting  = "waiting requests × typical_request_tokens"
	QueueFromInFlight = "in-flight × typical_request_tokens (load unknown)"
)

// ttftAware (configuration name ttft_aware) estimates, for every candidate, the request's time
// to first token there, adds the duplicate-prefill cost, and picks the least cost
// (docs/decisions.md, "ttft_aware"):
//
//	cost = estimate + duplicate prefill (duplicateCost: the prefix another candidate holds,
//	       prefilled again here, priced by this engine's prefill load)
//	estimate = max(queue ahead, slot wait) + own prefill
//	queue ahead = pending prefill tokens ahead / engine prefill rate
//	slot wait = slots it waits for × W / slots, on an engine without a free slot for it
//	own prefill = (input − matched prefix on the engine) / (engine prefill rate / DP ranks)
//
// The pending tokens are the report's waiting uncached tokens less what the engine prefilled
// since the report at its rate, plus the dispatches since the report and those still in
// transit at it (see inTransit), each at the uncached tokens this policy picked it with (this
// request's, for a dispatch it does not remember).
// Without them (basic report) they are waiting requests ×
// typical_request_tokens; without a fresh report, router-local in-flight ×
// typical_request_tokens. An engine without a measured rate is assumed to prefill as fast per
// rank as the median of the candidates that measured one (peerRankRate), and only when none
// has, default_prefill_tokens_per_s per rank. W is the mean time a request stays on the engine by
// Little's law (in-flight / recent dispatch rate; see slotWait). The hot-spot guard: when the
// best cost's engine has no batch slot for the request (see estimate), the best
// engine that admits at once wins if its cost is within hot_spot_margin_ms. Costs
// compare in whole milliseconds; ties: fewer uncached tokens, fewer in flight, engine id.
// Admission runs in that order until an engine passes. Plain and prefill groups only.
type ttftAware struct {
	deps   Deps
	limits admission.Limits
	s      config.TTFTAwareSettings
	source PrefixSource // nil without KV ingestion: every engine is cold
	picks  recentPicks  // the uncached tokens of this policy's recent picks, per engine
	// sent remembers the prompts this policy dispatched until the KV index can show them
	// (dispatchedPrefixes); used with source only.
	sent *dispatchedPrefixes
}

var _ Policy = (*ttftAware)(nil)

func newTTFTAware(deps Deps, limits admission.Limits, s config.TTFTAwareSettings, source PrefixSource) *ttftAware {
	return &ttftAware{deps: deps, limits: limits, s: s, source: source, sent: newDispatchedPrefixes()}
}

// Name implements Policy.
func (p *ttftAware) Name() string { return config.PolicyTTFTAware }

// ttftCand is one candidate's estimate.
type ttftCand struct {
	w                 *registry.Engine
	o                 observation
	matched, uncached int64
	sent              int64 // of matched, tokens this policy sent the engine that the KV index does not show yet
	queueTokens       int64
	reported          int64   // pending prefill tokens the report showed (native view)
	drained           int64   // of them, what the engine prefilled since the report at rate
	dispatched        int64   // tokens of the dispatches since the report
	transit           int64   // tokens of the dispatches before the report it does not count (in transit)
	rate              float64 // engine prefill tokens/s used
	ranks             int64   // DP ranks (1 without a fresh view)
	queue, own        float64 // seconds
	slotWait          float64 // seconds; 0 unless full and a residence time could be measured
	residence         float64 // seconds per request on the engine (Little's law); 0 unknown
	est               float64 // seconds
	estMillis         int64   // est in whole milliseconds
	held              int64   // tokens of the request's prefix another candidate holds and this one lacks
	load              float64 // the engine's prefill load from this policy's picks (offered / rate); with held only
	price             float64 // workPrice(load): waiting per second of added prefill work there
	dup               float64 // seconds: the duplicate-prefill cost of held, price × held's prefill time
	costMillis        int64   // est + dup in whole milliseconds, what comparisons read
	queueFrom         string
	rateDefault       bool
	ratePeers         bool   // rate is the peers' median per rank (peerRankRate)
	full              bool   // no free batch slot for this request (see estimate)
	limit             string // the admission cap that refused it; "" if not refused (or not checked)
}

func (c *ttftCand) refused() bool { return c.limit != "" }

// Pick implements Policy.
func (p *ttftAware) Pick(ctx context.Context, engines []*registry.Engine, req Request) (Pick, error) {
	if len(engines) == 0 {
		return Pick{}, ErrNoCandidates
	}
	if req.Stage == registry.RoleDecode {
		return Pick{}, fmt.Errorf("ttft_aware on a decode group: %w", ErrInvalidConfiguration)
	}
	res := prefixResult{Status: prefixNoTokens}
	if p.source != nil {
		var err error
		if res, err = req.Prefix.lookup(ctx, p.source, req.namespace(), req.TokenIDs); err != nil {
			return Pick{}, fmt.Errorf("prefix lookup: %w", err)
		}
	}
	snap := p.deps.Load.Snapshot()
	if req.Trace != nil {
		req.Trace.Now = snap.Now()
		req.Trace.Prefix = res.Status
	}

	var buf [64]ttftCand
	var cs []ttftCand
	if len(engines) <= len(buf) {
		cs = buf[:len(engines)] // zero already: filled in place, never copied
	} else {
		cs = make([]ttftCand, len(engines))
	}
	for i, w := range engines {
		cs[i].w = w
	}
	if res.Status == prefixHit {
		for _, m := range res.Matches {
			if m.Tokens <= 0 {
				continue
			}
			for i := range cs {
				if cs[i].w.Slot == m.Engine {
					cs[i].matched = max(cs[i].matched, min(m.Tokens, req.InputTokens))
					break
				}
			}
		}
	}
	// What this policy sent an engine counts as held there once the engine reaches this
	// request in its queue, before its KV events can say so (dispatchedPrefixes).
	var chain []uint64
	var chainBuf [256]uint64
	if p.source != nil && res.Status != prefixUnavailable && len(req.TokenIDs) >= dispatchedChunk {
		chain = p.sent.chain(req.namespace(), req.TokenIDs, chainBuf[:0])
		var sentBuf [64]int64
		sent := sentBuf[:0]
		if len(engines) > len(sentBuf) {
			sent = make([]int64, 0, len(engines))
		}
		sent = sent[:len(engines)]
		p.sent.matched(chain, engines, snap.Now(), sent)
		for i := range cs {
			if m := min(sent[i], req.InputTokens); m > cs[i].matched {
				cs[i].sent, cs[i].matched = m-cs[i].matched, m
			}
		}
	}
	peers := peerRankRate(snap, engines)
	for i := range cs {
		p.estimate(snap, &cs[i], req.InputTokens, peers)
	}

	var rejections []Rejection
	margin := int64(p.s.HotSpotMarginMillis)
	for {
		p.duplicateCost(cs, snap.Now())
		best := -1
		for i := range cs {
			if !cs[i].refused() && (best < 0 || lessTTFT(&cs[i], &cs[best])) {
				best = i
			}
		}
		if best < 0 {
			p.trace(&req, cs, -1, res.Status, "")
			return Pick{}, &RejectedError{Rejections: rejections, Exhausted: len(rejections) > 1}
		}
		chosen, reason := best, ReasonLeastTTFT
		if margin > 0 && cs[best].full {
			alt := -1
			for i := range cs {
				c := &cs[i]
				if !c.refused() && !c.full && c.costMillis <= satAdd(cs[best].costMillis, margin) && (alt < 0 || lessTTFT(c, &cs[alt])) {
					alt = i
				}
			}
			if alt >= 0 {
				chosen, reason = alt, ReasonHotSpotGuard
			}
		}
		c := &cs[chosen]
		if limit := p.limits.Check(c.o.metrics()); limit != "" {
			c.limit = limit
			rejections = append(rejections, Rejection{EngineID: c.w.ID, Limit: limit})
			continue
		}
		p.picks.record(c.w.Slot, snap.Now(), c.uncached)
		if chain != nil && !req.DryRun {
			// Until its first token is due, twice over, and the events' way to the index.
			life := min(seconds(2*c.est), dispatchedMaxLife) + dispatchedGrace
			p.sent.record(chain, c.w.Slot, snap.Now(), snap.Now().Add(life))
		}
		if req.Trace != nil {
			guard := ""
			if reason == ReasonHotSpotGuard {
				guard = cs[best].w.ID
			}
			p.trace(&req, cs, chosen, res.Status, guard)
		}
		return Pick{Engine: c.w, Reason: reason}, nil
	}
}

// peerRankRate is the median per-rank prefill rate among engines whose fresh view has measured
// one; 0 when none has, or when all have (then no candidate reads it, and a Pick sorts nothing).
// The engine's own view decides which rate a candidate uses, in estimate. A rate is measured from the work an engine did between two reports, so
// an engine that has not prefilled since it started has none; assumed to run at
// default_prefill_tokens_per_s, a fleet much faster than that default never chose it (its
// estimate was the default's, tens of times the others'), so it never measured a rate: at a
// fifth of its capacity, a fleet of four engines fifty times faster than the default sent every
// request to the two that had, and hit 3.8 % of the prompt tokens where sglang-router hit 5.2 %.
// The engines of one group serve one model as peers, so their measured rate is the better guess.
func peerRankRate(snap loadtable.Snapshot, engines []*registry.Engine) float64 {
	var buf [64]float64
	rates := buf[:0]
	for _, w := range engines {
		if v := snap.ViewRef(w.Slot); v != nil && v.PrefillRate > 0 {
			rates = append(rates, v.PrefillRate/float64(max(v.Ranks, 1)))
		}
	}
	if len(rates) == 0 || len(rates) == len(engines) {
		return 0 // none measured, or nobody needs the peers' rate
	}
	slices.Sort(rates)
	if n := len(rates); n%2 == 0 {
		return (rates[n/2-1] + rates[n/2]) / 2
	}
	return rates[len(rates)/2]
}

// estimate fills c's estimate from snap; c.w and c.matched are set. peers is peerRankRate's
// answer for the candidates.
func (p *ttftAware) estimate(snap loadtable.Snapshot, c *ttftCand, input int64, peers float64) {
	now := snap.Now()
	c.uncached = max(input-c.matched, 0)
	// Each dispatch since the report is assumed to cost what this request would there.
	p.deps.observeInto(&c.o, snap, c.w, c.uncached)
	ranks := int64(1)
	if c.o.known {
		ranks = max(int64(c.o.report.Ranks), 1)
	}
	c.ranks = ranks
	switch {
	case c.o.known && c.o.report.PrefillRate > 0:
		c.rate = c.o.report.PrefillRate
	case peers > 0:
		c.rate, c.ratePeers = peers*float64(ranks), true
	default:
		c.rate, c.rateDefault = float64(p.s.DefaultPrefillTokensPerSec)*float64(ranks), true
	}
	switch {
	case c.o.native():
		// The report's pending prefill drains at the engine's rate from its capture, less what
		// is still pending now; the dispatches since the report come on top, each at its own
		// uncached tokens as this policy picked it (this request's for any it did not pick), and
		// so do the dispatches still in transit at the capture, at its latest picks before it.
		c.reported = c.o.report.WaitingUncachedTokens
		if age := c.o.report.Age(now).Seconds(); age > 0 && c.reported > 0 {
			c.drained = min(c.reported, int64(math.Min(c.rate*age, float64(math.MaxInt64/2))))
		}
		if c.o.since > 0 || c.o.transit > 0 {
			c.dispatched, c.transit = p.picks.tokensSince(c.w.Slot, c.o.report.CapturedAt, c.o.since, c.o.transit, c.uncached)
		}
		c.queueTokens, c.queueFrom = satAdd(satAdd(c.reported-c.drained, c.dispatched), c.transit), QueueFromReport
	case c.o.known:
		c.queueTokens, c.queueFrom = satMul(max(c.o.load.waiting, 0), p.s.TypicalRequestTokens), QueueFromWaiting
	default:
		c.queueTokens, c.queueFrom = satMul(max(c.o.inflight, 0), p.s.TypicalRequestTokens), QueueFromInFlight
	}
	// The queue drains on every rank at once; this request prefills on one of them.
	c.queue = float64(c.queueTokens) / c.rate
	c.own = float64(c.uncached) * float64(ranks) / c.rate
	// Would the request wait for a batch slot? Native: when the requests ahead of it (waiting,
	// each needing a slot) and itself outnumber the free slots; a waiting request on an engine
	// with free slots waits for prefill, which the queue ahead already counts. Basic view (no
	// slot count): whenever requests wait.
	if c.o.known {
		if c.o.report.Native {
			c.full = satAdd(c.o.load.waiting, 1) > c.o.report.MaxRunningRequests-c.o.load.running
		} else {
			c.full = c.o.load.waiting > 0
		}
	}
	if c.full {
		c.slotWait, c.residence = p.slotWait(now, c)
	}
	// The prefill queue drains while the request waits for its slot: the longer wait counts.
	c.est = math.Max(c.queue, c.slotWait) + c.own
	c.estMillis = millis(c.est)
	c.costMillis = c.estMillis
}

// millis is s seconds in whole milliseconds, saturating (+Inf included).
func millis(s float64) int64 {
	if ms := s * 1e3; ms < math.MaxInt64 {
		return int64(ms)
	}
	return math.MaxInt64
}

// duplicateCost charges every unrefused candidate for the part of the request's prefix that
// another unrefused candidate already holds (docs/decisions.md, "ttft_aware", duplicate
// prefill): placing the request there makes the fleet prefill those tokens a second time, and
// that work delays the requests that queue behind it on that engine, priced by the engine's
// prefill load (workPrice). The candidate with the deepest match pays nothing; without prefix
// data nobody does.
func (p *ttftAware) duplicateCost(cs []ttftCand, now time.Time) {
	var deepest int64
	for i := range cs {
		c := &cs[i]
		c.held, c.load, c.price, c.dup, c.costMillis = 0, 0, 0, 0, c.estMillis
		if !c.refused() {
			deepest = max(deepest, c.matched)
		}
	}
	if deepest == 0 {
		return
	}
	p.picks.mu.Lock()
	defer p.picks.mu.Unlock()
	for i := range cs {
		c := &cs[i]
		if c.refused() || c.matched >= deepest {
			continue
		}
		c.held = deepest - c.matched
		c.load = p.picks.offeredLocked(c.w.Slot, now) / c.rate
		if c.price = workPrice(c.load); c.price > 0 {
			c.dup = c.price * float64(c.held) * float64(c.ranks) / c.rate
			c.costMillis = millis(c.est + c.dup)
		}
	}
}

// workPrice is the waiting time that one second of added prefill work costs the requests
// queued behind it on an engine whose prefill load is rho (offered work / capacity): for one
// FCFS server with Poisson arrivals (M/M/1) the mean number waiting is rho² / (1 − rho), and
// its derivative rho (2 − rho) / (1 − rho)² is the waiting added per unit of work. An engine
// offered more than it prefills (rho ≥ 1) has no steady state: its queue only grows, and work
// added there is priced +Inf.
func workPrice(rho float64) float64 {
	switch {
	case !(rho > 0): // NaN included
		return 0
	case rho >= 1:
		return math.Inf(1)
	}
	return rho * (2 - rho) / ((1 - rho) * (1 - rho))
}

// residenceWindow is the longest span dispatches are counted over to measure an engine's
// arrival rate; the in-flight tracker remembers the last 64 per engine, so the span is halved
// until fewer than 64 fall in it.
const residenceWindow = 64 * time.Second

// slotWait estimates how long a request without a free batch slot on c's engine waits for one:
// the requests waiting ahead of it and itself (waiting + 1) need slots, the free ones go to the
// first of them (native view), the rest must free up, and slots free at the rate slots / W, where W is the mean time a request spends on the
// engine by Little's law, W = in-flight / arrival rate (this router's leases and dispatches).
// W includes queueing, so the wait is an upper estimate. It returns 0, 0 when W cannot be
// measured (nothing in flight or no recent dispatch); the hot-spot guard still applies then.
func (p *ttftAware) slotWait(now time.Time, c *ttftCand) (wait, residence float64) {
	if c.o.inflight <= 0 {
		return 0, 0
	}
	span := residenceWindow
	n := p.deps.InFlight.DispatchesSince(c.w.Slot, now.Add(-span))
	for n >= 64 && span > time.Millisecond {
		span /= 2
		n = p.deps.InFlight.DispatchesSince(c.w.Slot, now.Add(-span))
	}
	if n <= 0 {
		return 0, 0
	}
	residence = float64(c.o.inflight) * span.Seconds() / float64(n)
	slots, need := c.o.load.running, max(c.o.load.waiting, 0)+1
	if c.o.report.Native {
		// The free slots go to the first requests in line; it waits for the rest.
		slots = c.o.report.MaxRunningRequests
		need = max(need-max(slots-c.o.load.running, 0), 1)
	}
	slots = max(slots, 1)
	return float64(need) * residence / float64(slots), residence
}

// lessTTFT orders candidates by cost (estimate + duplicate prefill; the estimate alone for
// TTFTEstimator) in whole milliseconds (finer differences are below
// what rates measured from microsecond counters and 500 ms reports resolve), then uncached
// tokens, then router-local in-flight, then engine id.
func lessTTFT(a, b *ttftCand) bool {
	if a.costMillis != b.costMillis {
		return a.costMillis < b.costMillis
	}
	if a.uncached != b.uncached {
		return a.uncached < b.uncached
	}
	if a.o.inflight != b.o.inflight {
		return a.o.inflight < b.o.inflight
	}
	return a.w.ID < b.w.ID
}

// seconds converts s seconds to a Duration, saturating.
func seconds(s float64) time.Duration {
	if d := s * float64(time.Second); d < math.MaxInt64 {
		return time.Duration(d)
	}
	return math.MaxInt64
}

// trace records every candidate with its estimate; chosen < 0 when every one was refused.
func (p *ttftAware) trace(req *Request, cs []ttftCand, chosen int, status PrefixStatus, guardedFrom string) {
	t := req.Trace
	if t == nil {
		return
	}
	for i := range cs {
		c := &cs[i]
		note := "estimated"
		switch {
		case i == chosen:
			note = "selected"
		case c.refused():
			note = "refused"
		}
		t.note(c.w, c.o, c.limit, note+"; "+c.describe())
		n := &t.Candidates[len(t.Candidates)-1]
		n.MatchedTokens, n.UncachedTokens = c.matched, c.uncached
		n.TTFT = TTFTParts{Estimate: seconds(c.est), Queue: seconds(c.queue), SlotWait: seconds(c.slotWait), OwnPrefill: seconds(c.own),
			QueueTokens: c.queueTokens, Rate: c.rate, RateDefault: c.rateDefault, QueueFrom: c.queueFrom, BatchFull: c.full}
	}
	var b strings.Builder
	switch {
	case chosen < 0:
		b.WriteString("every candidate refused by admission")
	case guardedFrom != "":
		fmt.Fprintf(&b, "hot-spot guard: %s had the least estimate but no free batch slot; %s has one within %d ms",
			guardedFrom, cs[chosen].w.ID, p.s.HotSpotMarginMillis)
	default:
		b.WriteString("least estimated time to first token (queue ahead + own uncached prefill) + duplicate-prefill cost")
	}
	switch {
	case p.source == nil:
		b.WriteString("; no KV index: every engine treated as cold (matched 0)")
	case status == prefixUnavailable:
		b.WriteString("; prefix index unavailable: every engine treated as cold (matched 0)")
	case status == prefixNoTokens:
		b.WriteString("; no token ids: every engine treated as cold (matched 0)")
	}
	t.setDetail(b.String())
}

// describe is the candidate's estimate and its parts, for explain output.
func (c *ttftCand) describe() string {
	rate := "reported"
	switch {
	case c.rateDefault:
		rate = "default_prefill_tokens_per_s"
	case c.ratePeers:
		rate = "none measured here: the median per rank of the engines that measured one"
	}
	r := func(x float64) time.Duration { return seconds(x).Round(time.Microsecond) }
	s := fmt.Sprintf("ttft %v = queue %v (%d tokens ahead: %s) + slot wait %v + own prefill %v (%d uncached, %d matched) at %.0f tokens/s (%s)",
		r(c.est), r(c.queue), c.queueTokens, c.queueFrom, r(c.slotWait), r(c.own), c.uncached, c.matched, c.rate, rate)
	if c.sent > 0 {
		s += fmt.Sprintf("; %d of the matched tokens were sent here by this router and are not in the KV index yet (prefilled before this request, first come first served)", c.sent)
	}
	if c.queueFrom == QueueFromReport {
		s += fmt.Sprintf("; ahead = %d reported − %d prefilled since + %d dispatched since", c.reported, c.drained, c.dispatched)
		if c.o.transit > 0 {
			s += fmt.Sprintf(" + %d in transit at the report (%d dispatches before it the engine did not count)", c.transit, c.o.transit)
		}
	}
	switch {
	case c.held > 0 && math.IsInf(c.price, 1):
		s += fmt.Sprintf("; + duplicate prefill unbounded (%d tokens another candidate holds, prefilled again here at prefill load %.2f: offered more than it prefills) = cost unbounded",
			c.held, c.load)
	case c.held > 0:
		s += fmt.Sprintf("; + duplicate prefill %v (%d tokens another candidate holds, prefilled again here: %v × %.2f s of waiting per second of work at prefill load %.2f) = cost %v",
			r(c.dup), c.held, r(float64(c.held)*float64(c.ranks)/c.rate), c.price, c.load, r(c.est+c.dup))
	}
	if c.full {
		if c.residence > 0 {
			s += fmt.Sprintf("; would queue for a batch slot: slot wait from %v per request on the engine (Little's law)",
				seconds(c.residence).Round(time.Millisecond))
		} else {
			s += "; would queue for a batch slot: slot wait unknown (nothing in flight here)"
		}
	}
	return s
}

// picksKept is how many recent picks per engine the policy remembers (as many as the in-flight
// tracker's dispatch times).
const picksKept = 64

// recentPicks remembers, per engine, when this policy picked it and the pick's uncached tokens
// there, so that a dispatch since a load report costs what it really adds to the engine's
// pending prefill. Safe for concurrent use.
type recentPicks struct {
	mu sync.Mutex
	by []*pickRing // indexed by slot (slots are small dense integers)
}

type pickRing struct {
	at     [picksKept]time.Time
	tokens [picksKept]int64
	n, pos int
	sum    int64 // the tokens of the n picks held
}

func (r *recentPicks) record(s slots.Slot, at time.Time, tokens int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if int(s) >= len(r.by) {
		r.by = append(r.by, make([]*pickRing, int(s)+1-len(r.by))...)
	}
	ring := r.by[s]
	if ring == nil {
		ring = &pickRing{}
		r.by[s] = ring
	}
	tokens = max(tokens, 0)
	if ring.n == picksKept {
		ring.sum -= ring.tokens[ring.pos]
	}
	ring.at[ring.pos], ring.tokens[ring.pos] = at, tokens
	ring.sum = satAdd(ring.sum, tokens)
	ring.pos = (ring.pos + 1) % picksKept
	ring.n = min(ring.n+1, picksKept)
}

// offeredLocked is the prefill load this policy's picks offered s, in uncached tokens per
// second: the tokens of the picks it remembers after the oldest, over the time from the oldest
// to now. Counting the last picks rather than a fixed span keeps the measure on the engine's
// own time scale (a fleet ten times faster fills the memory ten times sooner). 0 when it
// cannot be measured: fewer than two picks, or all of them at this instant.
func (r *recentPicks) offeredLocked(s slots.Slot, now time.Time) float64 {
	ring := r.ring(s)
	if ring == nil || ring.n < 2 {
		return 0
	}
	oldest := (ring.pos - ring.n + picksKept) % picksKept
	span := now.Sub(ring.at[oldest]).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(ring.sum-ring.tokens[oldest]) / span
}

// tokensSince sums the uncached tokens of the latest d picks of s made at or after since, and
// apart those of the latest transit picks made before it (the dispatches still in transit to
// the engine at a report captured at since); picks it does not remember (another policy's, or
// older than its memory) cost fallback each.
func (r *recentPicks) tokensSince(s slots.Slot, since time.Time, d, transit, fallback int64) (after, before int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var seen, seenBefore int64
	if ring := r.ring(s); ring != nil {
		for i := 0; i < ring.n && (seen < d || seenBefore < transit); i++ {
			j := (ring.pos - 1 - i + picksKept) % picksKept
			switch {
			case !ring.at[j].Before(since): // at the capture instant counts: see sinceReport
				if seen < d {
					after = satAdd(after, ring.tokens[j])
					seen++
				}
			case seenBefore < transit:
				before = satAdd(before, ring.tokens[j])
				seenBefore++
			default: // the rest are older still
				i = ring.n
			}
		}
	}
	fallback = max(fallback, 0)
	return satAdd(after, satMul(d-seen, fallback)), satAdd(before, satMul(transit-seenBefore, fallback))
}

// ring is s's pick ring, nil if s was never picked; r.mu is held.
func (r *recentPicks) ring(s slots.Slot) *pickRing {
	if int(s) < len(r.by) {
		return r.by[s]
	}
	return nil
}
