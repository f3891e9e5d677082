// Package policy holds the engine-selection policies an engine group attaches, and the contract
// they share. A policy receives the group's exact candidate set (healthy engines of the request's
// model and stage, intersected with the group's membership, sorted by id) and the request's
// prepared facts. It reads its own load, in-flight and later KV or affinity state through handles
// given at construction, selects one engine, and checks admission where its algorithm says to.
// It cannot choose another bucket or cross a prefill/decode boundary. Policies are built from
// configuration with New.
//
// Request and Pick are also the decider's request and pick types: a transport fills a Request
// for decider.Decide, and each engine of a decider.Decision is a Pick.
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

// Request is one routing request, the only request type from the caller of Decide down to the
// policy. It holds no transport types, state handles or load observations.
//
// The caller sets the request facts. The decider resolves Model and LoRAName (a request naming
// a LoRA adapter as its model runs in the adapter's base model) and, for every stage of every
// bucket attempt, sets the attempt fields Stage, BucketID, Prefix and Trace on a copy it hands
// the policy; values the caller puts in the attempt fields are ignored.
type Request struct {
	// Model is the requested model id; after resolution, the base model.
	Model string
	// InputTokens is the prompt length in tokens.
	InputTokens int64
	// ExpectedPeakTokens is input plus the output budget; valid only when HasPeak.
	ExpectedPeakTokens int64
	// HasPeak reports whether the caller knows the output budget.
	HasPeak bool
	// TokenIDs are the prompt's token ids when the caller tokenized it; nil otherwise. When
	// present there must be InputTokens of them.
	TokenIDs []uint32
	// SessionKey and RoutingKey are the affinity keys, empty when absent.
	SessionKey string
	RoutingKey string
	// RequestID is the caller's id for the request, for its logs; routing ignores it.
	RequestID string
	// LoRAName is the LoRA adapter the request runs with, empty for none. The caller sets the
	// adapter it names beside Model (SGLang lora_path); resolution sets the adapter the request
	// resolved to, including one named as Model. With Model and CacheSalt it is the KV
	// namespace prefix lookups run in.
	LoRAName string
	// CacheSalt isolates the request's cached blocks from other tenants' (vLLM and SGLang
	// cache_salt); empty for none. It only changes the prefix lookup's namespace.
	CacheSalt string
	// DryRun selects without acquiring a lease.
	DryRun bool
	// Explain asks for the candidates, rejections and load ages considered.
	Explain bool
	// ExcludeEngineIDs are engines the caller already failed on (one retry); no group offers
	// them to its policy.
	ExcludeEngineIDs []string
	// TTFTTargetMillis is the request's time-to-first-token target in milliseconds, valid only
	// when HasTTFTTarget. The decider orders buckets by it when the configuration enables
	// ttft_slo (and refuses a target that is not positive, finite and within
	// ttft_slo.max_target_ms); otherwise it is ignored. Policies do not read it.
	TTFTTargetMillis float64
	HasTTFTTarget    bool
	// NowNanos is the decision's clock reading in Unix nanoseconds (Decider.DecideAt sets it):
	// every load snapshot of the call is judged at it, so a Decide reads the clock once (a
	// clock read costs more than a pick on some machines). Zero makes each pick read the clock.
	// (An int64, not a time.Time: the request is copied into every pick, and a time.Time's
	// pointer made those copies measurably slower.)
	NowNanos int64

	// Stage is the role of the group being asked: plain, prefill or decode (attempt field).
	Stage registry.Role
	// BucketID is the bucket this attempt belongs to; it scopes affinity bindings (attempt field).
	BucketID string
	// Prefix memoises the prefix lookup across every bucket and group attempt of one Decide
	// call; nil looks up on each use (attempt field).
	Prefix *PrefixMemo
	// Trace, when non-nil, collects what the policy considered (explain output). Policies must
	// not allocate for tracing when it is nil (attempt field).
	Trace *Trace
}

// namespace is the KV-cache namespace of the request's prefix.
func (r *Request) namespace() Namespace {
	return Namespace{Model: r.Model, LoRA: r.LoRAName, CacheSalt: r.CacheSalt}
}

// Pick is one selected engine and why: a policy's selection from the candidates it was given,
// and, unchanged, each engine of a decider.Decision. The reason is used in metrics, explain
// output and the Decide response.
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
