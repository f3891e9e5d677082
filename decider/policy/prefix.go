package policy

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicehq/sluice/state/slots"
)

// PrefixMatch is how deep one engine holds a request's prefix.
type PrefixMatch struct {
	Engine slots.Slot
	// Tokens is the matched prefix length in tokens (full blocks only).
	Tokens int64
}

// Namespace is the KV-cache namespace a prefix lookup runs in: cached blocks of another model,
// LoRA adapter or cache salt are never a hit, even when their token ids agree. Model is the base
// model (an adapter requested by its own model name has been resolved to its base model); LoRA
// and CacheSalt are empty for none. See docs/kv-events.md.
type Namespace struct {
	Model     string
	LoRA      string
	CacheSalt string
}

// PrefixSource answers prefix lookups for cache-aware policies: the local KV index, or a remote
// indexer. It returns the deepest match per engine in namespace ns, appended to out.
//
// An unreachable or timed-out backend returns an error wrapping ErrPrefixUnavailable (the policy
// treats it as a miss and reports it as unavailable); any other error is a rejected query and
// stops routing.
type PrefixSource interface {
	LookupPrefix(ctx context.Context, ns Namespace, tokenIDs []uint32, out []PrefixMatch) ([]PrefixMatch, error)
}

// ErrPrefixUnavailable marks a prefix backend that could not answer.
var ErrPrefixUnavailable = errors.New("prefix index unavailable")

// PrefixStatus says what a memoised lookup found.
type PrefixStatus uint8

const (
	// PrefixNoTokens: the request carried no token ids; nothing was looked up.
	PrefixNoTokens PrefixStatus = iota + 1
	// PrefixHit: at least one engine holds part of the prefix.
	PrefixHit
	// PrefixMiss: the index answered and no engine holds any of it.
	PrefixMiss
	// PrefixUnavailable: the backend could not answer; treated as a miss.
	PrefixUnavailable
)

func (s PrefixStatus) String() string {
	switch s {
	case PrefixNoTokens:
		return "no_tokens"
	case PrefixHit:
		return "hit"
	case PrefixMiss:
		return "miss"
	case PrefixUnavailable:
		return "unavailable"
	}
	return "unknown"
}

// PrefixResult is one memoised lookup.
type PrefixResult struct {
	Status  PrefixStatus
	Matches []PrefixMatch
	Err     error // the backend error behind PrefixUnavailable
}

// PrefixMemo shares one prefix lookup per source across every bucket and group attempt of one
// Decide call. It only memoises the lookup: each group still filters the matches to its own
// candidates and runs its own admission. A nil memo looks up every time.
type PrefixMemo struct {
	mu      sync.Mutex
	entries []memoEntry
	// Lookups counts the backend calls made through this memo (for tests and explain).
	Lookups int
}

type memoEntry struct {
	source PrefixSource
	res    PrefixResult
	err    error
}

// Lookup returns the memoised result for source, querying it on first use. Every call of one
// memo must pass the same namespace and token ids (one Decide call has one of each).
func (m *PrefixMemo) Lookup(ctx context.Context, source PrefixSource, ns Namespace, tokenIDs []uint32) (PrefixResult, error) {
	if len(tokenIDs) == 0 {
		return PrefixResult{Status: PrefixNoTokens}, nil
	}
	if m == nil {
		return lookupOnce(ctx, source, ns, tokenIDs)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.source == source {
			return e.res, e.err
		}
	}
	res, err := lookupOnce(ctx, source, ns, tokenIDs)
	m.Lookups++
	m.entries = append(m.entries, memoEntry{source: source, res: res, err: err})
	return res, err
}

func lookupOnce(ctx context.Context, source PrefixSource, ns Namespace, tokenIDs []uint32) (PrefixResult, error) {
	matches, err := source.LookupPrefix(ctx, ns, tokenIDs, nil)
	switch {
	case errors.Is(err, ErrPrefixUnavailable):
		return PrefixResult{Status: PrefixUnavailable, Err: err}, nil
	case err != nil:
		return PrefixResult{}, err
	case len(matches) == 0:
		return PrefixResult{Status: PrefixMiss}, nil
	}
	return PrefixResult{Status: PrefixHit, Matches: matches}, nil
}
