package decider

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/state/registry"
)

// Kind is the small closed set of failure classes transports map to status codes, in exactly one
// function per transport.
type Kind uint8

const (
	// KindInvalidArgument: the request cannot be routed as sent (gRPC InvalidArgument, HTTP 400).
	KindInvalidArgument Kind = iota + 1
	// KindUnavailable: every compatible bucket was tried and none could serve now (503).
	KindUnavailable
	// KindInternal: a configuration or policy bug stopped routing (500).
	KindInternal
)

func (k Kind) String() string {
	switch k {
	case KindInvalidArgument:
		return "invalid_argument"
	case KindUnavailable:
		return "unavailable"
	case KindInternal:
		return "internal"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Machine-readable reasons carried by *Error (and by the transports' error details).
const (
	reasonEmptyModel         = "EMPTY_MODEL"
	reasonUnknownModel       = "UNKNOWN_MODEL"
	reasonInvalidInputTokens = "INVALID_INPUT_TOKENS"
	reasonPeakBelowInput     = "PEAK_BELOW_INPUT"
	reasonTooManyTokenIDs    = "TOO_MANY_TOKEN_IDS"
	reasonTokenIDsMismatch   = "TOKEN_IDS_MISMATCH"
	reasonNoMatchingBucket   = "NO_MATCHING_BUCKET"
	reasonAdapterConflict    = "ADAPTER_CONFLICT"
	reasonInvalidTTFTSLO     = "INVALID_TTFT_SLO"

	reasonAdmissionRejected   = "ADMISSION_REJECTED"
	reasonNoCandidates        = "NO_CANDIDATES"
	reasonNoPrefillCandidates = "NO_PREFILL_CANDIDATES"
	reasonNoDecodeCandidates  = "NO_DECODE_CANDIDATES"
	reasonNoHealthyEngines    = "NO_HEALTHY_ENGINES"

	reasonOutsideCandidates    = "OUTSIDE_CANDIDATES"
	reasonInvalidConfiguration = "INVALID_CONFIGURATION"
	reasonInvalidSignal        = "INVALID_SIGNAL"
)

// errOutsideCandidates is wrapped when a policy returns an engine outside its candidate set.
var errOutsideCandidates = errors.New("pick outside candidates")

// Rejection is one admission refusal met during the bucket loop.
type Rejection struct {
	BucketID string
	Role     registry.Role
	EngineID string
	Limit    string
}

// Error is a Decide failure. Transports branch on Kind and copy Reason, Stage and Rejections
// into their error details.
type Error struct {
	Kind    Kind
	Reason  string
	Message string
	// Stage is the last stage that had no candidates, for stage-specific unavailability.
	Stage registry.Role
	// Rejections holds every admission refusal across all attempted buckets.
	Rejections []Rejection
	// Field names the request field an invalid-argument error is about, when it is about one
	// (transports add a field violation); empty otherwise.
	Field string
	// Metadata is machine-readable context for the reason (NO_MATCHING_BUCKET: widest_bucket
	// and widest_capacity_tokens); transports add it to their error details. Nil when none.
	Metadata map[string]string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	for i, r := range e.Rejections {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "bucket %q %s engine %q at %s", r.BucketID, r.Role, r.EngineID, r.Limit)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

func invalidArgument(reason, format string, args ...any) *Error {
	return &Error{Kind: KindInvalidArgument, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func internal(reason string, err error) *Error {
	return &Error{Kind: KindInternal, Reason: reason, Message: err.Error(), Err: err}
}
