package kvevents

// Limits bounds what one batch may contain, the same for every wire
// format; the Check methods (rules.go) reject anything larger as
// KindAbsurdSize.
//
// The payload bound is what bounds memory: every hash and token id takes at
// least one payload byte (msgpack and protobuf alike), and a decoder keeps 8
// bytes per hash and 4 per token, so one decoded batch holds at most about
// 12 × MaxPayloadBytes of arrays. Ingestion drops records above its
// MaxRecordBytes (8 MiB by default) before decoding them. The per-event
// counts only catch nonsense; they sit far above real events: SGLang with
// page size 1 sends a long prompt as one event with one hash per token
// (docs/kv-events.md).
type Limits struct {
	// MaxPayloadBytes bounds the whole payload (msgpack or protobuf).
	MaxPayloadBytes int
	// MaxEventsPerBatch bounds the number of events in one batch.
	MaxEventsPerBatch int
	// MaxHashesPerEvent bounds the blocks one event may report.
	MaxHashesPerEvent int
	// MaxTokensPerEvent bounds the token ids one BlockStored may carry.
	MaxTokensPerEvent int
}

// DefaultLimits returns limits far above anything a real engine sends: a
// page-size-1 prompt of 4M tokens fits (as far as the payload bound allows).
// The payload bound is 16 MiB, the ingestion service's default fetch size.
func DefaultLimits() Limits {
	return Limits{
		MaxPayloadBytes:   16 << 20,
		MaxEventsPerBatch: 100_000,
		MaxHashesPerEvent: 1 << 22,
		MaxTokensPerEvent: 1 << 22,
	}
}
