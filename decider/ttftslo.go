package decider

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// The TTFT-target preference of the bucket order (docs/decisions.md, "TTFT target"): with the
// configuration's ttft_slo enabled, a request carrying a target tries the buckets it fits whose
// predicted time to first token meets the target first, then the others; each part keeps
// capacity order. A bucket's prediction is the least ttft_aware estimate among the eligible
// engines of its plain group, or of its prefill group for a PD bucket (the first token leaves
// the decode engine right after the prefill; the decode queue is not modelled). A bucket
// without a prediction (no eligible engine, a failed prefix lookup) does not meet the target.

// Explain statuses of the TTFT target (TTFTSLOExplain.Status).
const (
	ttftSLOOrdered  = "ordered"
	ttftSLODisabled = "disabled"
)

// ttftPreference is one configuration version's ttft_slo setting with its estimator; nil when
// the preference is off.
type ttftPreference struct {
	maxTargetMillis int64
	est             *policy.TTFTEstimator
}

func newTTFTPreference(doc *config.Document, deps policy.Deps) *ttftPreference {
	s := doc.ResolvedTTFTSLO()
	if !s.Enabled {
		return nil
	}
	return &ttftPreference{maxTargetMillis: s.MaxTargetMillis, est: policy.NewTTFTEstimator(deps, s.Estimate)}
}

// checkTarget refuses a target that cannot be a time to first token in milliseconds.
func (p *ttftPreference) checkTarget(ms float64) error {
	var msg string
	switch {
	case math.IsNaN(ms):
		msg = "ttft_slo_ms is not a number; send the time-to-first-token target as a positive number of milliseconds (the gateway reads it from the x-ttft-slo-ms header), or omit it"
	case ms <= 0:
		msg = fmt.Sprintf("ttft_slo_ms %v is not positive; send the time-to-first-token target as a positive number of milliseconds, or omit it", ms)
	case ms > float64(p.maxTargetMillis):
		msg = fmt.Sprintf("ttft_slo_ms %v is above the largest target accepted, %d ms (ttft_slo.max_target_ms); send milliseconds, or omit it", ms, p.maxTargetMillis)
	default:
		return nil
	}
	return &Error{Kind: KindInvalidArgument, Reason: reasonInvalidTTFTSLO, Field: "ttft_slo_ms", Message: msg}
}

// predictedBucket is one fitting bucket with its prediction.
type predictedBucket struct {
	b     *bucket
	pred  policy.TTFTPrediction
	known bool
	met   bool
	note  string // why there is no prediction
}

// reorder puts fitting (the buckets req fits, in capacity order) in TTFT-target order in place
// and records the predictions in ex (nil: none). Its prediction buffer lives in its own frame,
// off the bucket loop's stack when there is no target.
//
//go:noinline
func (p *ttftPreference) reorder(ctx context.Context, reg *registry.Snapshot, req *policy.Request, fitting []*bucket, adapter string, ex *explainer) {
	var buf [16]predictedBucket
	ordered := p.order(ctx, reg, req, fitting, adapter, buf[:0])
	ex.ttftOrdered(req.TTFTTargetMillis, ordered)
	for i := range ordered {
		fitting[i] = ordered[i].b
	}
}

// order predicts every bucket of fitting (the buckets req fits, in capacity order) and returns
// them met-first, each part in capacity order, appended to buf[:0]. Its cost is one estimate per
// candidate of each bucket's first stage; it allocates nothing beyond buf unless a bucket has
// more than 64 eligible engines, an exclusion list or an adapter restriction (as a pick does),
// or the prefix lookup fails.
func (p *ttftPreference) order(ctx context.Context, reg *registry.Snapshot, req *policy.Request, fitting []*bucket, adapter string, buf []predictedBucket) []predictedBucket {
	out := buf[:0]
	target := time.Duration(req.TTFTTargetMillis * float64(time.Millisecond))
	for _, b := range fitting {
		g := b.plain
		if g == nil {
			g = b.pd.prefill
		}
		pb := predictedBucket{b: b}
		pr := *req
		pr.Stage, pr.BucketID, pr.Trace = g.role, b.id, nil
		engines := g.eligible(reg, &pr, adapter)
		pred, ok, err := p.est.Least(ctx, engines, pr)
		switch {
		case err != nil:
			pb.note = "no prediction: " + err.Error()
		case !ok:
			pb.note = fmt.Sprintf("no prediction: no eligible %s engine", g.role)
		default:
			pb.pred, pb.known, pb.met = pred, true, pred.TTFT.Estimate <= target
		}
		out = append(out, pb)
	}
	slices.SortStableFunc(out, func(a, b predictedBucket) int {
		switch {
		case a.met == b.met:
			return 0
		case a.met:
			return -1
		}
		return 1
	})
	return out
}
