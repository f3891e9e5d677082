package decider

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// FuzzDecideRequest feeds arbitrary request facts through validation and the bucket loop: every
// outcome must be a decision or a classified *Error, never a panic or an internal error.
func FuzzDecideRequest(f *testing.F) {
	f.Add("m", int64(100), int64(200), true, 0, "s", false, "")
	f.Add("", int64(-1), int64(0), false, 3, "", true, "")
	f.Add("m", int64(9223372036854775807), int64(-9223372036854775808), true, 1, "k", false, "")
	f.Add("unknown", int64(0), int64(0), false, 0, "", false, "")
	f.Add("sql-lora", int64(10), int64(0), false, 10, "", true, "")
	f.Add("m", int64(10), int64(0), false, 10, "", true, "sql-lora")
	f.Add("sql-lora", int64(10), int64(0), false, 0, "", true, "other")
	c := engine("c", registry.RolePlain)
	c.LoRAAdapters = []string{"sql-lora"}
	fx := newFixture(f, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain), c})
	fx.apply(`
buckets:
  - id: small
    limits: {min: 0, max: 4096}
    max_context_tokens: 8192
    groups: {plain: {worker_ids: [a], policy: {type: round_robin, admission: {max_inflight_requests: 2}}}}
  - id: large
    limits: {min: 100}
    groups: {plain: {policy: {type: load_based}}}
`)
	f.Fuzz(func(t *testing.T, model string, input, peak int64, hasPeak bool, nTokens int, key string, dry bool, lora string) {
		if nTokens < 0 || nTokens > 1<<12 {
			nTokens = 0
		}
		req := policy.Request{Model: model, InputTokens: input, ExpectedPeakTokens: peak, HasPeak: hasPeak,
			TokenIDs: make([]uint32, nTokens), SessionKey: key, DryRun: dry, Explain: nTokens%2 == 1,
			LoRAName: lora, CacheSalt: key}
		dec, err := fx.d.Decide(context.Background(), req)
		if err == nil {
			fx.d.Release(dec.Lease.ID)
			if dec.BucketID == "" || dec.Plain.Engine == nil {
				t.Fatalf("Decide(%+v) returned an empty decision", req)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Kind == KindInternal {
			t.Fatalf("Decide(%+v) error = %v, want a classified invalid-argument or unavailable error", req, err)
		}
	})
}

// FuzzDecideTTFTTarget feeds arbitrary targets through the TTFT-target order: a target that is
// not a positive number within max_target_ms is INVALID_TTFT_SLO, any other outcome is a decision
// or a classified error, and the explained order never puts a bucket that misses the target
// before one that meets it.
func FuzzDecideTTFTTarget(f *testing.F) {
	f.Add(int64(100), 500.0, true, 0)
	f.Add(int64(5000), 0.0, true, 4)
	f.Add(int64(1), -1.0, true, 1)
	f.Add(int64(10), 1e300, true, 10)
	f.Add(int64(10), 0.001, false, 10)
	fx := newFixture(f, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	fx.apply(`
ttft_slo: {enabled: true, max_target_ms: 10000}
buckets:
  - {id: small, limits: {max: 4096}, groups: {plain: {worker_ids: [a], policy: {type: ttft_aware}}}}
  - {id: large, groups: {plain: {policy: {type: load_based}}}}
`)
	fx.running("a", 3)
	f.Fuzz(func(t *testing.T, input int64, target float64, hasTarget bool, nTokens int) {
		if nTokens < 0 || nTokens > 1<<12 {
			nTokens = 0
		}
		if input >= 0 && nTokens > 0 {
			input = int64(nTokens)
		}
		req := policy.Request{Model: "m", InputTokens: input, TokenIDs: make([]uint32, nTokens), DryRun: true, Explain: true,
			TTFTTargetMillis: target, HasTTFTTarget: hasTarget}
		dec, err := fx.d.Decide(context.Background(), req)
		invalid := hasTarget && input >= 0 && !(target > 0 && target <= 10000)
		var e *Error
		switch {
		case err == nil && invalid:
			t.Fatalf("Decide(target %v) succeeded, want INVALID_TTFT_SLO", target)
		case err == nil:
			if s := dec.Explain.TTFTSLO; hasTarget {
				for i := 1; i < len(s.Buckets); i++ {
					if s.Buckets[i].Met && !s.Buckets[i-1].Met {
						t.Fatalf("Decide(target %v) order %+v puts a miss before a hit", target, s.Buckets)
					}
				}
			}
		case !errors.As(err, &e) || e.Kind == KindInternal:
			t.Fatalf("Decide(%+v) error = %v, want a classified error", req, err)
		case invalid && e.Reason != reasonInvalidTTFTSLO:
			t.Fatalf("Decide(target %v) = %s, want INVALID_TTFT_SLO", target, e.Reason)
		}
	})
}
