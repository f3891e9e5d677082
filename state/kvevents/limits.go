package kvevents

import (
	"errors"
	"fmt"
)

// Limits bounds what one batch may contain; anything larger is rejected as
// KindAbsurdSize before memory is committed to it.
//
// The payload bound is what bounds memory: every hash and token id takes at
// least one payload byte, and a decoder keeps 8 bytes per hash and 4 per
// token, so one decoded batch holds at most about 12 × MaxPayloadBytes of arrays
// (the Kafka record, and the fetch size, bound the payload before that).
// The per-event counts only catch nonsense; they sit far above real events:
// SGLang with page size 1 sends a long prompt as one event with one hash
// per token (docs/kv-events.md).
type Limits struct {
	// MaxPayloadBytes bounds the whole msgpack payload.
	MaxPayloadBytes int
	// MaxEventsPerBatch bounds the number of events in one batch.
	MaxEventsPerBatch int
	// MaxHashesPerEvent bounds the blocks one event may report.
	MaxHashesPerEvent int
	// MaxTokensPerEvent bounds the token ids one BlockStored may carry.
	MaxTokensPerEvent int
}

// DefaultMaxPayloadBytes is DefaultLimits' payload bound: 16 MiB, the
// ingestion service's default fetch size.
const DefaultMaxPayloadBytes = 16 << 20

// DefaultLimits returns limits far above anything a real engine sends: a
// page-size-1 prompt of 4M tokens fits (as far as the payload bound allows).
func DefaultLimits() Limits {
	return Limits{
		MaxPayloadBytes:   DefaultMaxPayloadBytes,
		MaxEventsPerBatch: 100_000,
		MaxHashesPerEvent: 1 << 22,
		MaxTokensPerEvent: 1 << 22,
	}
}

// Validate reports a limit that is not positive.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxPayloadBytes", l.MaxPayloadBytes},
		{"MaxEventsPerBatch", l.MaxEventsPerBatch},
		{"MaxHashesPerEvent", l.MaxHashesPerEvent},
		{"MaxTokensPerEvent", l.MaxTokensPerEvent},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("kvevents.Limits.%s = %d: must be positive (DefaultLimits has sane values)", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}
