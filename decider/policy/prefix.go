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

// PrefixSource answers prefix lookups for cache-aware policies; LocalIndex, the local KV index,
// is the one implementation. It returns the deepest match per engine in namespace ns, appended
// to out.
//
// An unreachable or timed-out backend returns an error wrapping errPrefixUnavailable (the policy
// treats it as a miss and reports it as unavailable); any other error is a rejected query and
// stops routing.
type PrefixSource interface {
	LookupPrefix(ctx context.Context, ns Namespace, tokenIDs []uint32, out []PrefixMatch) ([]PrefixMatch, error)
}

// errPrefixUnavailable marks a prefix backend that could not answer.
var errPrefixUnavailable = errors.New("prefix index unavailable")

// PrefixStatus says what a memoised lookup found; 0 when nothing was looked up. Explain output
// reads it through String.
type PrefixStatus uint8

const (
	// prefixNoTokens: the request carried no token ids; nothing was looked up.
	prefixNoTokens PrefixStatus = iota + 1
	// prefixHit: at least one engine holds part of the prefix.
	prefixHit
	// prefixMiss: the index answered and no engine holds any of it.
	prefixMiss
	// prefixUnavailable: the backend could not answer; treated as a miss.
	prefixUnavailable
)

func (s PrefixStatus) String() string {
	switch s {
	case prefixNoTokens:
		return "no_tokens"
	case prefixHit:
		return "hit"
	case prefixMiss:
		return "miss"
	case prefixUnavailable:
		return "unavailable"
	}
	return "unknown"
}

// prefixResult is one memoised lookup.
type prefixResult struct {
	Status  PrefixStatus
	Matches []PrefixMatch
	Err     error // the backend error behind prefixUnavailable
}

// PrefixMemo shares one prefix lookup per source across every bucket and group attempt of one
// Decide call. It only memoises the lookup: each group still filters the matches to its own
// candidates and runs its own admission. A nil memo looks up every time.
type PrefixMemo struct {
	mu      sync.Mutex
	entries []memoEntry
}

type memoEntry struct {
	source PrefixSource
	res    prefixResult
	err    error
}

// lookup returns the memoised result for source, querying it on first use. Every call of one
// memo must pass the same namespace and token ids (one Decide call has one of each).
func (m *PrefixMemo) lookup(ctx context.Context, source PrefixSource, ns Namespace, tokenIDs []uint32) (prefixResult, error) {
	if len(tokenIDs) == 0 {
		return prefixResult{Status: prefixNoTokens}, nil
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
	m.entries = append(m.entries, memoEntry{source: source, res: res, err: err})
	return res, err
}

func lookupOnce(ctx context.Context, source PrefixSource, ns Namespace, tokenIDs []uint32) (prefixResult, error) {
	matches, err := source.LookupPrefix(ctx, ns, tokenIDs, nil)
	switch {
	case errors.Is(err, errPrefixUnavailable):
		return prefixResult{Status: prefixUnavailable, Err: err}, nil
	case err != nil:
		return prefixResult{}, err
	case len(matches) == 0:
		return prefixResult{Status: prefixMiss}, nil
	}
	return prefixResult{Status: prefixHit, Matches: matches}, nil
}
