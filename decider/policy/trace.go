package policy

import (
	"time"

	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// Trace records what one policy invocation considered, for Decide's explain output. It is only
// allocated when the caller asked for an explanation.
type Trace struct {
	// Now is the time load ages are measured against (the policy's snapshot time).
	Now time.Time
	// Candidates lists the engines the policy looked at, in the order it evaluated them.
	Candidates []CandidateNote
	// Prefix is what the prefix lookup found, for cache-aware policies (0 when not looked up).
	Prefix PrefixStatus
	// Detail is a one-line summary of the decision path (which gate or fallback applied).
	Detail string
}

// CandidateNote is one engine as the policy saw it.
type CandidateNote struct {
	EngineID  string
	LoadKnown bool
	Load      loadtable.View
	LoadAge   time.Duration
	InFlight  int64
	// DispatchesSinceReport is how many dispatches this router made to the engine after Load
	// was captured; policies compare Load with these folded in (0 when the load is unknown).
	DispatchesSinceReport int64
	// InTransitAtReport is how many of this router's dispatches made before Load was captured
	// had not reached the engine then (leases acquired before the capture beyond the engine's
	// running + waiting); policies fold them in like the dispatches since (0 when unknown).
	InTransitAtReport int64
	// Rejection is the admission cap that refused the engine; empty if admitted or not checked.
	Rejection string
	// MatchedTokens and UncachedTokens describe a prefix holder (cache-aware policies only).
	MatchedTokens  int64
	UncachedTokens int64
	// Note says what the policy did with the engine ("sampled", "selected", "tie", ...).
	Note string
	// TTFT is the estimate and its parts (ttft_aware only; zero otherwise).
	TTFT TTFTParts
}

// TTFTParts is one candidate's estimated time to first token under ttft_aware: Estimate =
// Queue + SlotWait + OwnPrefill.
type TTFTParts struct {
	Estimate, Queue, SlotWait, OwnPrefill time.Duration
	// QueueTokens are the pending prefill tokens ahead (dispatches since the report and in
	// transit at it included),
	// from QueueFrom: the report, waiting requests × typical_request_tokens (basic report), or
	// in-flight × typical_request_tokens (load unknown: stale, missing or rank-incomplete).
	QueueTokens int64
	QueueFrom   string
	// Rate is the engine's prefill throughput used, tokens/s; RateDefault when none was
	// reported and default_prefill_tokens_per_s × ranks was assumed.
	Rate        float64
	RateDefault bool
	// BatchFull: the engine would queue the request (waiting requests or no free batch slot).
	BatchFull bool
}

// note appends a candidate observation; a nil trace records nothing.
func (t *Trace) note(w *registry.Engine, o observation, rejection, note string) {
	if t == nil {
		return
	}
	c := CandidateNote{EngineID: w.ID, LoadKnown: o.known, InFlight: o.inflight, DispatchesSinceReport: o.since,
		InTransitAtReport: o.transit,
		Rejection:         rejection, Note: note}
	if o.known {
		c.Load = *o.report
		c.LoadAge = o.report.Age(t.Now)
	}
	t.Candidates = append(t.Candidates, c)
}

// noteHolder appends a prefix holder with its matched and uncached tokens; rc, when set, flags
// holders whose residency is uncertain.
func (t *Trace) noteHolder(h holder, input int64, rejection, note string, rc residencyChecker) {
	if t == nil {
		return
	}
	if rc != nil && rc.residencyUncertain(h.w.ID) {
		note += ", residency uncertain (KV event gap)"
	}
	t.note(h.w, h.o, rejection, note)
	c := &t.Candidates[len(t.Candidates)-1]
	c.MatchedTokens, c.UncachedTokens = input-h.uncached, h.uncached
}

// setDetail records the decision path; a nil trace records nothing.
func (t *Trace) setDetail(s string) {
	if t != nil {
		t.Detail = s
	}
}
