// Package policy holds the engine-selection policies an engine group attaches, and the contract
// they share. A policy receives the group's exact candidate set (healthy engines of the request's
// model and stage, intersected with the group's membership, sorted by id) and the request's
// prepared facts. It reads its own load, in-flight and later KV or affinity state through handles
// given at construction, selects one engine, and checks admission where its algorithm says to.
// It cannot choose another bucket or cross a prefill/decode boundary.
package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/state/registry"
)

// Policy selects one engine from a candidate set. Implementations are safe for concurrent use and
// are reused across requests (a round-robin cursor belongs to one policy instance).
//
// Pick returns ErrNoCandidates when engines is empty or the policy has no selection, a
// *RejectedError when admission refused the engine it chose (or every engine it evaluated),
// and errors wrapping ErrInvalidSignal or ErrInvalidConfiguration for bad input or state; the
// returned engine must be one of engines (the caller checks pointer identity).
type Policy interface {
	// Name is the configuration name of the policy type, e.g. "power_of_two".
	Name() string
	// Pick selects an engine from engines for req.
	Pick(ctx context.Context, engines []*registry.Engine, req Request) (Pick, error)
}

// Request carries the prepared routing facts for one stage of one bucket attempt. It holds no
// transport types, state handles or load observations.
type Request struct {
	// Model is the requested model id.
	Model string
	// Stage is the role of the group being asked: plain, prefill or decode.
	Stage registry.Role
	// BucketID is the bucket this attempt belongs to (scopes affinity bindings).
	BucketID string
	// InputTokens is the prompt length in tokens.
	InputTokens int64
	// ExpectedPeakTokens is input plus the output budget; valid only when HasPeak.
	ExpectedPeakTokens int64
	// HasPeak reports whether the caller knows the output budget.
	HasPeak bool
	// TokenIDs are the prompt's token ids when the caller tokenized it; nil otherwise.
	TokenIDs []uint32
	// SessionKey and RoutingKey are the affinity keys, empty when absent.
	SessionKey string
	RoutingKey string
	// LoRA is the LoRA adapter the request runs with (Model is then its base model) and
	// CacheSalt its cache salt; empty for none. Together with Model they are the KV namespace
	// prefix lookups run in.
	LoRA      string
	CacheSalt string
	// Prefix memoises the prefix lookup across every bucket and group attempt of one Decide
	// call; nil looks up on each use.
	Prefix *PrefixMemo
	// Trace, when non-nil, collects what the policy considered (explain output). Policies must
	// not allocate for tracing when it is nil.
	Trace *Trace
}

// Namespace is the KV-cache namespace of the request's prefix.
func (r *Request) Namespace() Namespace {
	return Namespace{Model: r.Model, LoRA: r.LoRA, CacheSalt: r.CacheSalt}
}

// Pick is a policy's selection: one engine from the supplied candidates and the reason, used in
// metrics, explain output and the Decide response.
type Pick struct {
	Engine *registry.Engine
	Reason string
}

// Sentinel errors policies return; callers branch on them with errors.Is.
var (
	// ErrNoCandidates means the group had no eligible engine, or the policy found no selection.
	ErrNoCandidates = errors.New("no candidates")
	// ErrInvalidSignal means the request facts are unusable for this policy (a bug upstream).
	ErrInvalidSignal = errors.New("invalid signal")
	// ErrInvalidConfiguration means the policy was built or attached in a way that cannot work.
	ErrInvalidConfiguration = errors.New("invalid configuration")
)

// Rejection is one admission refusal: the engine and the cap (its configuration field name).
type Rejection struct {
	EngineID string
	Limit    string
}

// RejectedError reports that admission refused the selected engine (AdmissionRejected) or every
// engine the policy evaluated (NoAdmissibleEngine, Exhausted set). The bucket loop moves on to
// the next bucket and keeps the rejections for the final error.
type RejectedError struct {
	Rejections []Rejection
	// Exhausted is true when the policy evaluated several engines and all were refused.
	Exhausted bool
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	if e.Exhausted {
		b.WriteString("no admissible engine: ")
	} else {
		b.WriteString("admission rejected: ")
	}
	for i, r := range e.Rejections {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", r.EngineID, r.Limit)
	}
	return b.String()
}

// rejected builds the AdmissionRejected error for one engine.
func rejected(w *registry.Engine, limit string) error {
	return &RejectedError{Rejections: []Rejection{{EngineID: w.ID, Limit: limit}}}
}
