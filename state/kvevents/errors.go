package kvevents

import "fmt"

// ErrorKind classifies a decode failure; it is the label ingestion metrics
// count bad records by.
type ErrorKind string

// Decode failure kinds. Limits.CheckStored documents which rule gives which.
const (
	KindMalformed          ErrorKind = "malformed_msgpack"    // not msgpack, truncated, or the wrong shape
	KindUnknownEventTag    ErrorKind = "unknown_event_tag"    // an event whose tag is not one we know
	KindBadHash            ErrorKind = "bad_hash"             // a hash that is not an integer or an 8+ byte bin
	KindBadToken           ErrorKind = "bad_token"            // a token id outside uint32
	KindTokenCountMismatch ErrorKind = "token_count_mismatch" // token ids that are neither block_size × hashes nor a short last page or a sparse group
	KindAbsurdSize         ErrorKind = "absurd_size"          // a count beyond Limits
	KindBadField           ErrorKind = "bad_field"            // a field of the wrong type or range (block_size ≤ 0, …)
)

// Error is a decode failure. Event is the index of the offending event in
// the batch, or -1 when the batch itself is bad.
type Error struct {
	Kind   ErrorKind
	Event  int
	Detail string
}

func (e *Error) Error() string {
	if e.Event >= 0 {
		return fmt.Sprintf("kv event %d: %s: %s", e.Event, e.Kind, e.Detail)
	}
	return fmt.Sprintf("kv event batch: %s: %s", e.Kind, e.Detail)
}
