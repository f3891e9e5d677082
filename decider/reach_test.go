package decider

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// reachConfig: a plain bucket of capacity 100 and an unlimited PD bucket, over plain engines of
// model m and a prefill/decode pair of model pd; "none" has an explicitly empty membership.
const reachConfig = `
buckets:
  - id: small
    limits: {max: 100}
    groups: {plain: {}}
  - id: none
    limits: {max: 1000}
    groups: {plain: {worker_ids: []}}
  - id: wide
    groups: {pd: {prefill: {}, decode: {}}}
`

func reachFixture(t *testing.T) *fixture {
	f := newFixture(t, []registry.Engine{
		engine("a", registry.RolePlain), engine("p", registry.RolePrefill, "pd"), engine("d", registry.RoleDecode, "pd"),
	})
	f.apply(reachConfig)
	return f
}

func TestDecideOutOfReachOfTheModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		req      policy.Request
		prepare  func(f *fixture)
		kind     Kind
		reason   string
		contains string
	}{
		{name: "longer than every bucket with engines for m", req: policy.Request{Model: "m", InputTokens: 500},
			kind: KindInvalidArgument, reason: reasonNoMatchingBucket,
			contains: `the widest that is, "small", takes input_tokens 0 to 100; shorten the prompt or its output budget (buckets that fit but cannot serve the model: none (no plain engine for the model), wide (no prefill engine for the model))`},
		{name: "m's only engine unhealthy: retryable", req: policy.Request{Model: "m", InputTokens: 50},
			prepare: func(f *fixture) { f.reg.SetHealth("a", registry.Health{Healthy: false, Reason: "probe failed"}) },
			kind:    KindUnavailable, reason: reasonNoHealthyEngines},
		{name: "pd's prefill unhealthy: retryable", req: policy.Request{Model: "pd", InputTokens: 5000},
			prepare: func(f *fixture) { f.reg.SetHealth("p", registry.Health{Healthy: false, Reason: "probe failed"}) },
			kind:    KindUnavailable, reason: reasonNoHealthyEngines},
		{name: "pd's decode drained: retryable", req: policy.Request{Model: "pd", InputTokens: 5000},
			prepare: func(f *fixture) {
				d := engine("d", registry.RoleDecode, "pd")
				d.Labels = map[string]string{registry.DrainedLabel: "true"}
				if err := f.reg.Upsert(d); err != nil {
					t.Fatal(err)
				}
			},
			kind: KindUnavailable, reason: reasonNoDecodeCandidates},
		{name: "m's engine excluded by the caller: retryable", req: policy.Request{Model: "m", InputTokens: 50, ExcludeEngineIDs: []string{"a"}},
			kind: KindUnavailable, reason: reasonNoCandidates},
		{name: "no bucket fits at all", req: policy.Request{Model: "pd", InputTokens: 5000, ExpectedPeakTokens: 6000, HasPeak: true},
			prepare: func(f *fixture) {
				f.apply(`
buckets:
  - id: small
    limits: {max: 100}
    groups: {plain: {}}
  - id: mid
    max_context_tokens: 5500
    groups: {pd: {prefill: {}, decode: {}}}
`)
			},
			kind: KindInvalidArgument, reason: reasonNoMatchingBucket,
			contains: `(buckets: small, mid); the widest able to serve it, "mid", takes input_tokens from 0 within a context of 5500 tokens`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := reachFixture(t)
			if tt.prepare != nil {
				tt.prepare(f)
			}
			e := decideErr(t, f, tt.req)
			if e.Kind != tt.kind || e.Reason != tt.reason || !strings.Contains(e.Message, tt.contains) {
				t.Errorf("Decide() = %s %s (%s), want %s %s containing %q", e.Kind, e.Reason, e.Message, tt.kind, tt.reason, tt.contains)
			}
			if tt.kind == KindInvalidArgument && e.Metadata["widest_bucket"] == "" {
				t.Errorf("Decide() metadata = %v, want widest_bucket", e.Metadata)
			}
		})
	}
}

// A model no bucket can serve at all (its engines' role has no bucket) is an outage of its
// fleet, not a request too long: the bucket loop's 503 stands.
func TestDecideNoBucketServesTheModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("p", registry.RolePrefill)})
	f.apply(`buckets: [{id: only, groups: {plain: {}}}]`)
	e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 1 << 20})
	if e.Kind != KindUnavailable {
		t.Errorf("Decide() = %s %s (%s), want Unavailable", e.Kind, e.Reason, e.Message)
	}
}
