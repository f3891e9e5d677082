package decider

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// Explain is what a Decide call considered: every bucket attempted in order, each stage's
// candidates with their load and admission outcome, and the age of the oldest load data used.
type Explain struct {
	Attempts []BucketAttempt
	// OldestLoadAge is the largest load-report age among candidates with known load.
	OldestLoadAge time.Duration
	// TTFTSLO is what the request's TTFT target did to the bucket order; nil without a target.
	TTFTSLO *TTFTSLOExplain
}

// TTFTSLOExplain is the TTFT-target preference's part of an explanation.
type TTFTSLOExplain struct {
	// TargetMillis is the request's target.
	TargetMillis float64
	// Status is "ordered" (buckets ordered by prediction) or "disabled" (the configuration's
	// ttft_slo is off; the target was ignored).
	Status string
	// Buckets lists every bucket the request fits in the order they were to be tried, with its
	// prediction; empty when Status is "disabled".
	Buckets []BucketTTFT
}

// BucketTTFT is one bucket's predicted time to first token.
type BucketTTFT struct {
	BucketID string
	// Known reports whether there is a prediction; Note says why not.
	Known bool
	Note  string
	// Met reports whether the prediction is at or below the target (false when unknown).
	Met bool
	// Prediction is the least estimate among the eligible engines of the bucket's first stage.
	Prediction policy.TTFTPrediction
}

// BucketAttempt is one bucket's try.
type BucketAttempt struct {
	BucketID string
	// Capacity is the bucket's input capacity; Unbounded when open.
	Capacity int64
	// Outcome is "picked", "no_candidates" or "admission_rejected".
	Outcome string
	Stages  []StageAttempt
}

// StageAttempt is one engine group's pick within a bucket attempt.
type StageAttempt struct {
	Role       registry.Role
	Policy     string
	Candidates []policy.CandidateNote
	// Outcome is "picked", "no_candidates", "admission_rejected" or "policy_error".
	Outcome        string
	PickedEngineID string
	Reason         string
	Detail         string
	// Excluded lists group members that were not candidates (unhealthy), with why.
	Excluded []policy.CandidateNote
	// PrefixLookup is what a cache-aware policy's prefix lookup found; 0 for other policies.
	PrefixLookup policy.PrefixStatus
}

// ExplainedError carries the explanation of a failed Decide call; it is the Err of the *Error.
type ExplainedError struct {
	Explain *Explain
}

func (e *ExplainedError) Error() string { return "see explanation" }

// explainer collects an Explain during one Decide call; a nil explainer records nothing.
type explainer struct {
	ex Explain
}

func (x *explainer) begin(b *bucket) {
	if x == nil {
		return
	}
	x.ex.Attempts = append(x.ex.Attempts, BucketAttempt{BucketID: b.id, Capacity: b.limits.capacity()})
}

func (x *explainer) end(outcome string) {
	if x == nil {
		return
	}
	x.ex.Attempts[len(x.ex.Attempts)-1].Outcome = outcome
}

func (x *explainer) stage(role registry.Role, g *engineGroup, reg *registry.Snapshot, model string) *policy.Trace {
	a := &x.ex.Attempts[len(x.ex.Attempts)-1]
	st := StageAttempt{Role: role, Policy: g.policy.Name()}
	// Members that are not candidates because they are unhealthy, with the reason.
	for _, w := range reg.Engines() {
		if w.Role != role || !slices.Contains(w.Models, model) || !g.member(w.ID) {
			continue
		}
		if w.Drained() {
			st.Excluded = append(st.Excluded, policy.CandidateNote{EngineID: w.ID, Note: "drained"})
		} else if h, ok := reg.Health(w.ID); ok && !h.Healthy {
			st.Excluded = append(st.Excluded, policy.CandidateNote{EngineID: w.ID, Note: "unhealthy: " + h.Reason})
		}
	}
	a.Stages = append(a.Stages, st)
	return &policy.Trace{}
}

func (x *explainer) done(t *policy.Trace, pick policy.Pick, err error) {
	a := &x.ex.Attempts[len(x.ex.Attempts)-1]
	s := &a.Stages[len(a.Stages)-1]
	s.Candidates = append(t.Candidates, s.Excluded...)
	s.Detail = t.Detail
	s.PrefixLookup = t.Prefix
	for _, c := range t.Candidates {
		if c.LoadKnown && c.LoadAge > x.ex.OldestLoadAge {
			x.ex.OldestLoadAge = c.LoadAge
		}
	}
	switch {
	case err == nil:
		s.Outcome, s.PickedEngineID, s.Reason = "picked", pick.Engine.ID, pick.Reason
	case isNoCandidates(err):
		s.Outcome = "no_candidates"
	case isRejected(err):
		s.Outcome = "admission_rejected"
	default:
		s.Outcome = "policy_error"
		s.Detail = err.Error()
	}
}

func (x *explainer) ttftDisabled(target float64) {
	if x == nil {
		return
	}
	x.ex.TTFTSLO = &TTFTSLOExplain{TargetMillis: target, Status: ttftSLODisabled}
}

func (x *explainer) ttftOrdered(target float64, ordered []predictedBucket) {
	if x == nil {
		return
	}
	t := &TTFTSLOExplain{TargetMillis: target, Status: ttftSLOOrdered, Buckets: make([]BucketTTFT, 0, len(ordered))}
	for _, pb := range ordered {
		t.Buckets = append(t.Buckets, BucketTTFT{BucketID: pb.b.id, Known: pb.known, Note: pb.note, Met: pb.met, Prediction: pb.pred})
	}
	x.ex.TTFTSLO = t
}

func (x *explainer) result() *Explain {
	if x == nil {
		return nil
	}
	return &x.ex
}
