package decider

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
)

// bucketResolver owns one model's buckets and orders the ones a request fits. It never looks at
// engines, load or policies.
type bucketResolver struct {
	ordered []*bucket // by capacity (unbounded last), then rank, then id
}

// newBucketResolver validates the bucket set (unique non-empty ids) and fixes its order.
func newBucketResolver(buckets []*bucket) (*bucketResolver, error) {
	seen := make(map[string]bool, len(buckets))
	for _, b := range buckets {
		if b == nil {
			return nil, fmt.Errorf("nil bucket")
		}
		if seen[b.id] {
			return nil, fmt.Errorf("duplicate bucket id %q", b.id)
		}
		seen[b.id] = true
	}
	ordered := slices.Clone(buckets)
	slices.SortStableFunc(ordered, func(a, b *bucket) int {
		if c := cmp.Compare(a.limits.capacity(), b.limits.capacity()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return &bucketResolver{ordered: ordered}, nil
}

// Resolve yields the buckets a request of input tokens fits (with a known peak when hasPeak),
// smallest capacity first; possibly none. It allocates nothing. The caller has checked the
// signal (Decide's validate refuses negative counts and a peak below the input).
func (r *bucketResolver) resolve(input, peak int64, hasPeak bool) iter.Seq[*bucket] {
	return func(yield func(*bucket) bool) {
		for _, b := range r.ordered {
			if b.limits.fits(input, peak, hasPeak) && !yield(b) {
				return
			}
		}
	}
}
