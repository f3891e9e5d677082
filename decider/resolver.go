package decider

import (
	"cmp"
	"fmt"
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

// Resolve returns the buckets a request fits, smallest capacity first; possibly none. A known
// peak below the input length, or negative counts, are an invalid signal (*Error with kind
// InvalidArgument).
func (r *BucketResolver) Resolve(input, peak int64, hasPeak bool) ([]*Bucket, error) {
	if err := checkSignal(input, peak, hasPeak); err != nil {
		return nil, err
	}
	var out []*Bucket
	for _, b := range r.ordered {
		if b.limits.fits(input, peak, hasPeak) {
			out = append(out, b)
		}
	}
	return out, nil
}

func checkSignal(input, peak int64, hasPeak bool) error {
	if input < 0 {
		return invalidArgument(ReasonInvalidInputTokens, "input_tokens %d is negative; send the prompt length in tokens", input)
	}
	if hasPeak && peak < input {
		return invalidArgument(ReasonPeakBelowInput, "expected_peak_tokens %d is below input_tokens %d; send input plus the output budget, or omit it", peak, input)
	}
	return nil
}
