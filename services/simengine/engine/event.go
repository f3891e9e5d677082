package engine

import "github.com/sluicehq/sluice/components/kvwire/engineenc"

// EventKind tells KV-cache events apart: the kinds the engines' KV-event wire carries
// (components/kvwire/engineenc, which the simulated engine publishes with).
type EventKind = engineenc.Kind

// The KV-cache event kinds, as vLLM and SGLang publish them.
const (
	// BlockStored: one or more consecutive full blocks entered the cache.
	BlockStored = engineenc.BlockStored
	// BlockRemoved: blocks were evicted.
	BlockRemoved = engineenc.BlockRemoved
	// AllBlocksCleared: the whole cache was dropped.
	AllBlocksCleared = engineenc.AllBlocksCleared
)

// Event is one KV-cache event, in the form the wire encoder takes. All blocks are
// GPU-resident: the simulated engine has one tier.
type Event = engineenc.Event

// Sink receives KV-cache events in the order the cache changed. It is called with the engine's
// lock held, so it must be quick, must not block and must not call back into the engine; it
// owns the slice it is given.
type Sink func(events []Event)
