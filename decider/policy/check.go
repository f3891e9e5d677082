package policy

import (
	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/registry"
)

// admitSelected runs admission once on the engine a policy selected, using the observation from
// the snapshot the policy captured for selection, and records the outcome in the trace. A
// rejection is final for this pick: no resampling, no other engine, no fallback.
func admitSelected(limits admission.Limits, w *registry.Engine, o observation, req *Request, reason string) (Pick, error) {
	if limit := limits.Check(o.metrics()); limit != "" {
		req.Trace.note(w, o, limit, "selected")
		return Pick{}, rejected(w, limit)
	}
	req.Trace.note(w, o, "", "selected")
	return Pick{Engine: w, Reason: reason}, nil
}
