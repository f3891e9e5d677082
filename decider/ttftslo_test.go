package decider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// A PD bucket is predicted by its prefill group: with the small bucket's prefill queue at 5 s
// and the wide bucket's prefill engine idle, a 1 s target tries the wide bucket first.
func TestDecideTTFTTargetPredictsPDByPrefill(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePrefill), engine("p", registry.RolePrefill), engine("d", registry.RoleDecode)})
	f.apply(`
buckets:
  - id: small
    limits: {max: 1000}
    groups: {pd: {prefill: {worker_ids: [a]}, decode: {worker_ids: [d]}}}
  - id: wide
    groups: {pd: {prefill: {worker_ids: [p]}, decode: {worker_ids: [d]}}}
ttft_slo: {enabled: true, typical_request_tokens: 1000, default_prefill_tokens_per_s: 1000}
`)
	for _, r := range []loadtable.Report{
		{EngineID: "a", Epoch: 1, Seq: 1, CapturedAt: time.Now(), Waiting: 5, KVCapacityTokens: 100},
		{EngineID: "p", Epoch: 1, Seq: 1, CapturedAt: time.Now(), KVCapacityTokens: 100},
		// The decode engine's queue does not enter the prediction.
		{EngineID: "d", Epoch: 1, Seq: 1, CapturedAt: time.Now(), Waiting: 50, KVCapacityTokens: 100},
	} {
		if err := f.load.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	req := policy.Request{Model: "m", InputTokens: 100, DryRun: true, Explain: true, TTFTTargetMillis: 1000, HasTTFTTarget: true}
	dec, err := f.d.Decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if dec.BucketID != "wide" || dec.Prefill.Engine.ID != "p" {
		t.Fatalf("Decide() = %s %v, want wide with prefill p", dec.BucketID, dec.Prefill.Engine)
	}
	type row struct {
		ID       string
		Met      bool
		Engine   string
		Estimate time.Duration
	}
	var got []row
	for _, b := range dec.Explain.TTFTSLO.Buckets {
		got = append(got, row{b.BucketID, b.Met, b.Prediction.Engine.ID, b.Prediction.TTFT.Estimate})
	}
	// small: 5 waiting × 1000 tokens / 1000 tokens/s + 100 / 1000 = 5.1 s; wide: 0.1 s on p.
	want := []row{{"wide", true, "p", 100 * time.Millisecond}, {"small", false, "a", 5100 * time.Millisecond}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("explain ttft_slo buckets mismatch (-want +got):\n%s", diff)
	}

	// Without eligible engines a bucket has no prediction and goes last.
	req.ExcludeEngineIDs = []string{"p"}
	dec, err = f.d.Decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	bs := dec.Explain.TTFTSLO.Buckets
	if dec.BucketID != "small" || dec.Prefill.Engine.ID != "a" || len(bs) != 2 || bs[1].BucketID != "wide" || bs[1].Known || bs[1].Note != "no prediction: no eligible prefill engine" {
		t.Errorf("Decide(p excluded) = %s, ttft_slo %+v; want small, wide without a prediction", dec.BucketID, bs)
	}
}

// BenchmarkDecideTTFTTarget is BenchmarkDecide's power_of_two case with the preference on and a
// target: two buckets predicted over 64 engines each, then the pick.
func BenchmarkDecideTTFTTarget(b *testing.B) {
	for _, target := range []bool{false, true} {
		b.Run(fmt.Sprintf("target=%v", target), func(b *testing.B) {
			f := benchFixture(b, "power_of_two")
			f.apply(`
buckets:
  - {id: short, limits: {max: 4096}, groups: {plain: {policy: {type: power_of_two}}}}
  - {id: long, groups: {plain: {policy: {type: power_of_two}}}}
ttft_slo: {enabled: true}
`)
			req := policy.Request{Model: "m", InputTokens: 1000, ExpectedPeakTokens: 1200, HasPeak: true, DryRun: true,
				TTFTTargetMillis: 50, HasTTFTTarget: target}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.d.Decide(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Twenty buckets, more than the stack buffers hold: every engine but the widest bucket's has a
// request in flight (1 s predicted each), so the widest is tried first and the rest keep
// capacity order behind it.
func TestDecideTTFTTargetManyBuckets(t *testing.T) {
	t.Parallel()
	var ws []registry.Engine
	var cfg strings.Builder
	cfg.WriteString("ttft_slo: {enabled: true, typical_request_tokens: 1000, default_prefill_tokens_per_s: 1000}\nbuckets:\n")
	for i := range 20 {
		ws = append(ws, engine(fmt.Sprintf("e%02d", i), registry.RolePlain))
		fmt.Fprintf(&cfg, "  - {id: b%02d, limits: {max: %d}, groups: {plain: {worker_ids: [e%02d]}}}\n", i, 100+i, i)
	}
	f := newFixture(t, ws)
	f.apply(cfg.String())
	reg := f.reg.Snapshot()
	for i := range 19 {
		w, _ := reg.Get(fmt.Sprintf("e%02d", i))
		if _, err := f.inf.Acquire(w.Slot); err != nil {
			t.Fatal(err)
		}
	}
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 10, DryRun: true, Explain: true,
		TTFTTargetMillis: 500, HasTTFTTarget: true})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, b := range dec.Explain.TTFTSLO.Buckets {
		order = append(order, b.BucketID)
	}
	want := []string{"b19"}
	for i := range 19 {
		want = append(want, fmt.Sprintf("b%02d", i))
	}
	if dec.BucketID != "b19" || !cmp.Equal(want, order) {
		t.Errorf("Decide() = %s, order %v; want b19 first, then b00..b18", dec.BucketID, order)
	}
}
