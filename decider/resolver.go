package decider

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
)

// BucketResolver owns one model's buckets and orders the ones a request fits. It never looks at
// engines, load or policies.
type BucketResolver struct {
	ordered []*Bucket // by capacity (unbounded last), then rank, then id
}

// NewBucketResolver validates the bucket set (unique non-empty ids) and fixes its order.
func NewBucketResolver(buckets []*Bucket) (*BucketResolver, error) {
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
	slices.SortStableFunc(ordered, func(a, b *Bucket) int {
		if c := cmp.Compare(a.limits.Capacity(), b.limits.Capacity()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return &BucketResolver{ordered: ordered}, nil
}

// Buckets returns every bucket in resolution order.
func (r *BucketResolver) Buckets() []*Bucket { return slices.Clone(r.ordered) }

// Resolve yields the buckets a request of input tokens fits (with a known peak when hasPeak),
// smallest capacity first; possibly none. It allocates nothing. The caller has checked the
// signal (Decide's validate refuses negative counts and a peak below the input).
func (r *BucketResolver) Resolve(input, peak int64, hasPeak bool) iter.Seq[*Bucket] {
	return func(yield func(*Bucket) bool) {
		for _, b := range r.ordered {
			if b.limits.fits(input, peak, hasPeak) && !yield(b) {
				return
			}
		}
	}
}
