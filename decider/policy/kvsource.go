package policy

import (
	"context"

	"github.com/sluicehq/sluice/state/kvindex"
)

// LocalIndex serves prefix lookups from this process's KV index, which KV-event ingestion keeps
// current, in the request's namespace (model, LoRA adapter, cache salt) as ingestion indexed the
// engines' blocks under it.
// Use it by pointer: a Decide's PrefixMemo compares sources with ==, and a LocalIndex value
// (it holds a func) is not comparable — as a value it panicked the moment a second lookup of
// one Decide (the TTFT-target prediction, then the policy) compared it.
type LocalIndex struct {
	Index *kvindex.Index
	// Uncertain, when set, reports engines whose KV residency is uncertain (a gap in their
	// event sequence); explain output flags their matches.
	Uncertain func(engineID string) bool
}

// residencyUncertain implements residencyChecker.
func (l *LocalIndex) residencyUncertain(engineID string) bool {
	return l.Uncertain != nil && l.Uncertain(engineID)
}

var (
	_ PrefixSource     = (*LocalIndex)(nil)
	_ residencyChecker = (*LocalIndex)(nil)
)

// residencyChecker is implemented by prefix sources that know when an engine's residency data is
// incomplete; cache-aware explain output marks such engines.
type residencyChecker interface {
	residencyUncertain(engineID string) bool
}

// LookupPrefix implements PrefixSource; the local index is always available.
func (l *LocalIndex) LookupPrefix(_ context.Context, ns Namespace, tokenIDs []uint32, out []PrefixMatch) ([]PrefixMatch, error) {
	var buf [64]kvindex.Match
	kns := kvindex.Namespace{Model: ns.Model, LoRA: ns.LoRA, CacheSalt: ns.CacheSalt}
	for _, m := range l.Index.Lookup(kns, tokenIDs, buf[:0]) {
		out = append(out, PrefixMatch{Engine: m.Engine, Tokens: m.Tokens})
	}
	return out, nil
}
