package decider

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// A request too long for every bucket that can serve its model is the caller's to fix, not a
// retryable outage (docs/decisions.md, "Too long for the model"). A bucket can serve a model
// when each of its stages (the plain group; or the prefill group and the decode group) has at
// least one registered engine of the model in that role among its members, healthy or not,
// drained or not: unhealthy, busy or drained engines come back by themselves, a stage with no
// engine for the model at all needs an operator. The registry and configuration in force decide;
// LoRA adapters and the caller's exclusions do not.

// servesModel reports whether b can serve model with the registry as it is.
func (b *bucket) servesModel(reg *registry.Snapshot, model string) bool {
	if b.plain != nil {
		return b.plain.hasEngineFor(reg, model)
	}
	return b.pd.prefill.hasEngineFor(reg, model) && b.pd.decode.hasEngineFor(reg, model)
}

// missingStage names the first stage of b that has no engine for model.
func (b *bucket) missingStage(reg *registry.Snapshot, model string) registry.Role {
	switch {
	case b.plain != nil:
		return registry.RolePlain
	case !b.pd.prefill.hasEngineFor(reg, model):
		return registry.RolePrefill
	}
	return registry.RoleDecode
}

// widest returns the bucket of largest capacity that can serve model (the last in resolution
// order), or nil.
func (r *bucketResolver) widest(reg *registry.Snapshot, model string) *bucket {
	for i := len(r.ordered) - 1; i >= 0; i-- {
		if b := r.ordered[i]; b.servesModel(reg, model) {
			return b
		}
	}
	return nil
}

// tooLong returns the NO_MATCHING_BUCKET error for a request that fits some buckets, none of
// which can serve its model, while another bucket can; nil otherwise (the bucket loop's own
// error stands: every bucket that serves the model is out of reach for now, or none does).
func (d *Decider) tooLong(reg *registry.Snapshot, req *policy.Request, res *bucketResolver) *Error {
	var fitting []string
	for b := range res.resolve(req.InputTokens, req.ExpectedPeakTokens, req.HasPeak) {
		if b.servesModel(reg, req.Model) {
			return nil
		}
		fitting = append(fitting, fmt.Sprintf("%s (no %s engine for the model)", b.id, b.missingStage(reg, req.Model)))
	}
	w := res.widest(reg, req.Model)
	if w == nil {
		return nil
	}
	e := invalidArgument(reasonNoMatchingBucket, "no bucket able to serve model %q accepts %s; the widest that is, %q, takes %s; shorten the prompt or its output budget (buckets that fit but cannot serve the model: %s)",
		req.Model, need(req), w.id, capacityText(w.limits), strings.Join(fitting, ", "))
	e.Metadata = widestMetadata(w)
	return e
}

// noMatchingBucket is the error for a request no bucket of its model fits.
func (d *Decider) noMatchingBucket(reg *registry.Snapshot, req *policy.Request, res *bucketResolver) *Error {
	ids := make([]string, 0, len(res.ordered))
	for _, b := range res.ordered {
		ids = append(ids, b.id)
	}
	msg := fmt.Sprintf("no bucket for model %q accepts %s (buckets: %s)", req.Model, need(req), strings.Join(ids, ", "))
	w := res.widest(reg, req.Model)
	if w != nil {
		msg += fmt.Sprintf("; the widest able to serve it, %q, takes %s", w.id, capacityText(w.limits))
	}
	e := invalidArgument(reasonNoMatchingBucket, "%s", msg)
	if w != nil {
		e.Metadata = widestMetadata(w)
	}
	return e
}

// need describes what a request asks of a bucket's limits.
func need(req *policy.Request) string {
	s := fmt.Sprintf("input_tokens %d", req.InputTokens)
	if req.HasPeak {
		s += fmt.Sprintf(" with expected_peak_tokens %d", req.ExpectedPeakTokens)
	}
	return s
}

// capacityText describes a bucket's limits: its input range and context capacity.
func capacityText(l lengthLimits) string {
	s := fmt.Sprintf("input_tokens %d to %d", l.MinInput, l.MaxInput)
	if l.MaxInput == Unbounded {
		s = fmt.Sprintf("input_tokens from %d", l.MinInput)
	}
	if l.MaxContext != Unbounded {
		s += fmt.Sprintf(" within a context of %d tokens", l.MaxContext)
	}
	return s
}

// widestMetadata is the ErrorInfo metadata naming the widest bucket and its capacity.
func widestMetadata(b *bucket) map[string]string {
	c := "unbounded"
	if capacity := b.limits.capacity(); capacity != Unbounded {
		c = strconv.FormatInt(capacity, 10)
	}
	return map[string]string{"widest_bucket": b.id, "widest_capacity_tokens": c}
}
