package console

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
)

// Cache-aware pick reasons: a hit is a pick of an engine holding the prompt's prefix.
var (
	hitReasons  = []string{policy.ReasonCacheCandidate, policy.ReasonSaturationPin}
	missReasons = []string{policy.ReasonNoCacheCandidate}
)

// BinSeconds is the width of one bin of the cache time series; Bins of them are kept.
const (
	BinSeconds = 5
	Bins       = 120
)

// stats folds the tail into the counters the Buckets and Cache pages show. It reads the tail
// on its own goroutine (Run), never on the Decide path; a stats pass that fell more than
// TailSize behind counts the records it lost.
type stats struct {
	tail   *Tail
	prefix func() policy.PrefixSource // nil or returning nil: no token accounting
	slot   func(engine string) (uint32, bool)
	doc    func() *config.Document

	mu      sync.Mutex
	next    uint64
	lost    uint64
	buckets map[string]*bucketCounters
	engines map[string]*engineCache
	bins    [Bins]cacheBin
	errors  map[string]int64
	total   int64
	matches []policy.PrefixMatch // reused lookup buffer
	buf     []Record             // reused read buffer
}

type bucketCounters struct {
	Decisions  int64            `json:"decisions"`
	Fallbacks  int64            `json:"fallbacks"`
	Rejections map[string]int64 `json:"rejections"`
}

type engineCache struct {
	Engine    string `json:"engine"`
	Decisions int64  `json:"decisions"`
	Hits      int64  `json:"hits"`
	Misses    int64  `json:"misses"`
	// Sampled decisions were looked up; Matched and Uncached sum their prompts.
	Sampled  int64 `json:"sampled"`
	Matched  int64 `json:"matched_tokens"`
	Uncached int64 `json:"uncached_tokens"`
}

type cacheBin struct {
	Start     int64 `json:"t"` // unix seconds of the bin's start
	Decisions int64 `json:"decisions"`
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Sampled   int64 `json:"sampled"`
	Matched   int64 `json:"matched_tokens"`
	Uncached  int64 `json:"uncached_tokens"`
}

func newStats(tail *Tail, doc func() *config.Document, prefix func() policy.PrefixSource, slot func(string) (uint32, bool)) *stats {
	return &stats{tail: tail, doc: doc, prefix: prefix, slot: slot,
		buckets: map[string]*bucketCounters{}, engines: map[string]*engineCache{}, errors: map[string]int64{}}
}

// run folds the tail every interval until ctx ends.
func (s *stats) run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.fold(ctx)
		}
	}
}

// fold reads every record since the last pass.
func (s *stats) fold(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, next, lost := s.tail.Since(s.next, 0, s.buf[:0])
	s.buf = recs
	s.next, s.lost = next, s.lost+lost
	if len(recs) > 0 {
		order := bucketOrder(s.doc())
		for i := range recs {
			s.add(&recs[i], order)
		}
	}
	var src policy.PrefixSource
	if s.prefix != nil {
		src = s.prefix()
	}
	for {
		select {
		case sm := <-s.tail.samples:
			s.addSample(ctx, &sm, src)
		default:
			return
		}
	}
}

func (s *stats) bucket(id string) *bucketCounters {
	b := s.buckets[id]
	if b == nil {
		b = &bucketCounters{Rejections: map[string]int64{}}
		s.buckets[id] = b
	}
	return b
}

func (s *stats) add(r *Record, order []config.BucketSpec) {
	s.total++
	if r.Error != "" {
		s.errors[r.Error]++
		for _, rj := range r.Rejections {
			s.bucket(rj.Bucket).Rejections[rj.Limit]++
		}
		return
	}
	b := s.bucket(r.Bucket)
	b.Decisions++
	// A decision that fell back carries its earlier buckets' refusals only in an explanation.
	if r.Explain != nil {
		for _, a := range r.Explain.Attempts {
			for _, st := range a.Stages {
				for _, c := range st.Candidates {
					if c.Rejection != "" && a.BucketID != r.Bucket {
						s.bucket(a.BucketID).Rejections[c.Rejection]++
					}
				}
			}
		}
	}
	if first := firstFit(order, r.Model, r.InputTokens, r.PeakTokens); first != "" && first != r.Bucket {
		b.Fallbacks++
	}
	hit, miss := slices.Contains(hitReasons, r.Reason), slices.Contains(missReasons, r.Reason)
	e := s.engines[r.Engine]
	if e == nil {
		e = &engineCache{Engine: r.Engine}
		s.engines[r.Engine] = e
	}
	e.Decisions++
	bin := s.binAt(r.At)
	bin.Decisions++
	if !hit && !miss {
		return // not a cache-aware pick
	}
	if hit {
		e.Hits++
		bin.Hits++
	} else {
		e.Misses++
		bin.Misses++
	}
}

// addSample accounts a sampled decision's matched and uncached tokens on its engine and bin.
func (s *stats) addSample(ctx context.Context, sm *Sample, src policy.PrefixSource) {
	matched := s.matched(ctx, sm, src)
	if matched < 0 {
		return
	}
	e := s.engines[sm.Engine]
	if e == nil {
		e = &engineCache{Engine: sm.Engine}
		s.engines[sm.Engine] = e
	}
	bin := s.binAt(sm.At)
	e.Sampled++
	e.Matched += matched
	e.Uncached += sm.InputTokens - matched
	bin.Sampled++
	bin.Matched += matched
	bin.Uncached += sm.InputTokens - matched
}

func (s *stats) binAt(at time.Time) *cacheBin {
	start := at.Unix() / BinSeconds * BinSeconds
	bin := &s.bins[(start/BinSeconds)%Bins]
	if bin.Start != start {
		*bin = cacheBin{Start: start}
	}
	return bin
}

// matched looks up how much of the prompt the picked engine holds, -1 when unknown (no index,
// engine gone). It runs a little after the decision, so a block the engine stored in between
// counts as matched.
func (s *stats) matched(ctx context.Context, sm *Sample, src policy.PrefixSource) int64 {
	if src == nil || s.slot == nil {
		return -1
	}
	slot, ok := s.slot(sm.Engine)
	if !ok {
		return -1
	}
	var err error
	s.matches, err = src.LookupPrefix(ctx, policy.Namespace{Model: sm.Model, LoRA: sm.LoRA, CacheSalt: sm.CacheSalt}, sm.TokenIDs, s.matches[:0])
	if err != nil {
		return -1
	}
	for _, m := range s.matches {
		if uint32(m.Engine) == slot {
			return min(m.Tokens, sm.InputTokens)
		}
	}
	return 0
}

// bucketOrder is the decider's bucket order (decider/resolver.go): capacity, unbounded last,
// then rank, then id.
func bucketOrder(doc *config.Document) []config.BucketSpec {
	if doc == nil {
		return nil
	}
	bs := slices.Clone(doc.EffectiveBuckets())
	slices.SortStableFunc(bs, func(a, b config.BucketSpec) int {
		if c := cmp.Compare(capacity(a), capacity(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Rank, b.Rank); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return bs
}

const unbounded = int64(^uint64(0) >> 1)

func capacity(b config.BucketSpec) int64 {
	c := unbounded
	if b.Limits.Max != nil {
		c = *b.Limits.Max
	}
	if b.MaxContextTokens != nil {
		c = min(c, *b.MaxContextTokens)
	}
	return c
}

// firstFit is the first bucket in order serving model that a request of input (and peak, 0
// for none) tokens fits: the bucket a decision lands in unless it falls back.
func firstFit(order []config.BucketSpec, model string, input, peak int64) string {
	for _, b := range order {
		if b.Models != nil && !slices.Contains(b.Models, model) {
			continue
		}
		maxIn := unbounded
		if b.Limits.Max != nil {
			maxIn = *b.Limits.Max
		}
		if input < b.Limits.Min || input > maxIn {
			continue
		}
		need := input
		if peak > 0 {
			need = peak
		}
		if b.MaxContextTokens != nil && need > *b.MaxContextTokens {
			continue
		}
		return b.ID
	}
	return ""
}
