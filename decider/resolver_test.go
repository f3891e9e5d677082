package decider

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

func plainBucket(t *testing.T, id string, rank int64, l lengthLimits) *bucket {
	t.Helper()
	b, err := newPlainBucket(id, rank, l, newEngineGroup(registry.RolePlain, roundRobin(t)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ids(bs []*bucket) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.id)
	}
	return out
}

func lim(minIn, maxIn, ctx int64) lengthLimits {
	return lengthLimits{MinInput: minIn, MaxInput: maxIn, MaxContext: ctx}
}

func TestResolverOrdering(t *testing.T) {
	t.Parallel()
	buckets := []*bucket{
		plainBucket(t, "open-b", 0, lim(0, Unbounded, Unbounded)),
		plainBucket(t, "open-a", 0, lim(0, Unbounded, Unbounded)),
		plainBucket(t, "ranked-late", 10, lim(0, 4096, Unbounded)),
		plainBucket(t, "tie-b", 5, lim(0, 4096, 8192)),
		plainBucket(t, "tie-a", 5, lim(0, 4096, 8192)),
		plainBucket(t, "ctx-bound", 99, lim(0, 100000, 2048)),
		plainBucket(t, "open-ranked", -1, lim(0, Unbounded, Unbounded)),
	}
	r, err := newBucketResolver(buckets)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Collect(r.resolve(1000, 0, false))
	want := []string{"ctx-bound", "tie-a", "tie-b", "ranked-late", "open-ranked", "open-a", "open-b"}
	if diff := cmp.Diff(want, ids(got)); diff != "" {
		t.Errorf("Resolve() order mismatch (-want +got):\n%s", diff)
	}
}

func TestResolverFit(t *testing.T) {
	t.Parallel()
	r, err := newBucketResolver([]*bucket{
		plainBucket(t, "short", 10, lim(0, 4096, 8192)),
		plainBucket(t, "long", 20, lim(0, 131072, 131072)),
		plainBucket(t, "mid-only", 0, lim(1000, 2000, Unbounded)),
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		input   int64
		peak    int64
		hasPeak bool
		want    []string
	}{
		{"peak only fits the larger bucket", 4000, 16000, true, []string{"long"}},
		{"known small peak fits both", 4000, 8000, true, []string{"short", "long"}},
		{"peak exactly at context capacity fits", 4000, 8192, true, []string{"short", "long"}},
		{"peak one above context capacity skips", 4000, 8193, true, []string{"long"}},
		{"unknown peak checks input only", 4000, 0, false, []string{"short", "long"}},
		{"input at inclusive max fits", 4096, 0, false, []string{"short", "long"}},
		{"input one above max skips", 4097, 0, false, []string{"long"}},
		{"input at inclusive min fits", 1000, 0, false, []string{"mid-only", "short", "long"}},
		{"input one below min skips", 999, 0, false, []string{"short", "long"}},
		{"nothing fits", 200000, 0, false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := slices.Collect(r.resolve(tt.input, tt.peak, tt.hasPeak))
			if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
				t.Errorf("Resolve(%d, %d) mismatch (-want +got):\n%s", tt.input, tt.peak, diff)
			}
		})
	}
}

// TestDecideInvalidSignal: a known peak below the input, or a negative input, is refused before
// any bucket is resolved.
func TestDecideInvalidSignal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain)})
	f.apply(`
buckets:
  - id: all
    groups: {plain: {}}
`)
	for _, tt := range []struct {
		name        string
		input, peak int64
		reason      string
	}{
		{"peak below input", 100, 99, reasonPeakBelowInput},
		{"negative input", -1, 0, reasonInvalidInputTokens},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: tt.input, ExpectedPeakTokens: tt.peak, HasPeak: true})
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindInvalidArgument || e.Reason != tt.reason {
				t.Errorf("Decide() error = %v, want %s InvalidArgument", err, tt.reason)
			}
		})
	}
}

func TestBucketConstruction(t *testing.T) {
	t.Parallel()
	rr := roundRobin(t)
	if _, err := newPDBucket("pd", 0, lim(0, Unbounded, Unbounded), newEngineGroup(registry.RolePrefill, rr), nil); err == nil {
		t.Error("newPDBucket accepted a missing decode group")
	}
	if _, err := newPDBucket("pd", 0, lim(0, Unbounded, Unbounded), newEngineGroup(registry.RoleDecode, rr), newEngineGroup(registry.RoleDecode, rr)); err == nil {
		t.Error("newPDBucket accepted a decode group in the prefill slot")
	}
	if _, err := newPlainBucket("p", 0, lim(0, Unbounded, Unbounded), newEngineGroup(registry.RolePrefill, rr)); err == nil {
		t.Error("newPlainBucket accepted a prefill group")
	}
	if _, err := newPlainBucket("", 0, lim(0, Unbounded, Unbounded), newEngineGroup(registry.RolePlain, rr)); err == nil {
		t.Error("newPlainBucket accepted an empty id")
	}
	if _, err := newPlainBucket("inv", 0, lim(10, 5, Unbounded), newEngineGroup(registry.RolePlain, rr)); err == nil {
		t.Error("newPlainBucket accepted an inverted range")
	}
	if _, err := newBucketResolver([]*bucket{plainBucket(t, "x", 0, lim(0, 1, 1)), plainBucket(t, "x", 1, lim(0, 1, 1))}); err == nil {
		t.Error("newBucketResolver accepted duplicate ids")
	}
}
