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
