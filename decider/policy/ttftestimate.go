package policy

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// TTFTEstimator predicts a request's time to first token on a set of engines with ttft_aware's
// estimate (ttftaware.go; docs/decisions.md, "ttft_aware"), outside any policy: the decider's
// TTFT-target ordering of buckets asks it for each bucket's least estimate, whatever policy the
// bucket's groups run. It reads live load, in-flight and prefix state through the Deps it was
// built with, and is safe for concurrent use.
type TTFTEstimator struct {
	p *ttftAware
}

// NewTTFTEstimator returns an estimator using s's default prefill rate and typical request
// size (s.HotSpotMarginMillis is not used) and deps.Prefix for prefix matches (nil: every
// engine cold).
func NewTTFTEstimator(deps Deps, s config.TTFTAwareSettings) *TTFTEstimator {
	return &TTFTEstimator{p: newTTFTAware(deps, admission.Limits{}, s, deps.Prefix)}
}

// TTFTPrediction is the least estimate among a set of engines.
type TTFTPrediction struct {
	// Engine is the engine the least estimate belongs to.
	Engine *registry.Engine
	// MatchedTokens and UncachedTokens are the request's prefix match on Engine and what is
	// left to prefill there.
	MatchedTokens, UncachedTokens int64
	// TTFT is the estimate and its parts on Engine.
	TTFT TTFTParts
	// Prefix is what the prefix lookup found.
	Prefix PrefixStatus
}

// Least returns the least estimated time to first token for req among engines, in ttft_aware's
// order (whole milliseconds, then uncached tokens, in-flight and engine id), without admission:
// ok is false when engines is empty. The prefix lookup goes through req.Prefix, so a Decide call
// that also runs a prefix-reading policy looks up once. A lookup the source rejects is an error;
// an unavailable source means every engine is cold, as in ttft_aware. For up to 64 engines it
// allocates nothing.
func (e *TTFTEstimator) Least(ctx context.Context, engines []*registry.Engine, req Request) (TTFTPrediction, bool, error) {
	if len(engines) == 0 {
		return TTFTPrediction{}, false, nil
	}
	p := e.p
	res := prefixResult{Status: prefixNoTokens}
	if p.source != nil {
		var err error
		if res, err = req.Prefix.lookup(ctx, p.source, req.namespace(), req.TokenIDs); err != nil {
			return TTFTPrediction{}, false, fmt.Errorf("prefix lookup: %w", err)
		}
	}
	snap := p.deps.Load.Snapshot()
	var buf [64]ttftCand
	var cs []ttftCand
	if len(engines) <= len(buf) {
		cs = buf[:len(engines)]
	} else {
		cs = make([]ttftCand, len(engines))
	}
	best := -1
	peers := peerRankRate(snap, engines)
	for i, w := range engines {
		c := &cs[i]
		c.w = w
		if res.Status == prefixHit {
			for _, m := range res.Matches {
				if m.Engine == w.Slot && m.Tokens > 0 {
					c.matched = max(c.matched, min(m.Tokens, req.InputTokens))
				}
			}
		}
		p.estimate(snap, c, req.InputTokens, peers)
		if best < 0 || lessTTFT(c, &cs[best]) {
			best = i
		}
	}
	c := &cs[best]
	return TTFTPrediction{Engine: c.w, MatchedTokens: c.matched, UncachedTokens: c.uncached, Prefix: res.Status,
		TTFT: TTFTParts{Estimate: seconds(c.est), Queue: seconds(c.queue), SlotWait: seconds(c.slotWait), OwnPrefill: seconds(c.own),
			QueueTokens: c.queueTokens, Rate: c.rate, RateDefault: c.rateDefault, QueueFrom: c.queueFrom, BatchFull: c.full}}, true, nil
}
