// Package kvevents defines the KV-cache events that inference engines publish
// (blocks stored, blocks removed, everything cleared) in a form free of any
// wire format, and decodes the engines' own msgpack batches (vLLM and SGLang,
// every layout listed in spec/WIRE.md) into it.
//
// The index (state/kvindex) consumes these types; the ingestion service picks
// a decoder by record header and never hands wire bytes further in.
package kvevents

import "time"

// Medium is the storage tier an event refers to.
type Medium uint8

// Storage tiers. MediumGPU is also what an untagged (nil) medium means.
// MediumUnknown is a medium string sluice does not recognise; the index
// ignores stores with it rather than guessing a tier.
const (
	MediumGPU Medium = iota
	MediumCPU
	MediumDisk
	MediumExternal
	MediumUnknown
)

// String returns the tier's canonical name.
func (m Medium) String() string {
	switch m {
	case MediumGPU:
		return "GPU"
	case MediumCPU:
		return "CPU"
	case MediumDisk:
		return "DISK"
	case MediumExternal:
		return "EXTERNAL"
	default:
		return "UNKNOWN"
	}
}

// ParseMedium maps an engine's medium string to a tier, case-insensitively:
// "" and "GPU" are GPU; "CPU" and "CPU_TIER1" (SGLang) are CPU; "CPU_TIER2"
// (SGLang) and "DISK" are disk; "EXTERNAL" is external. Anything else is
// MediumUnknown.
func ParseMedium(s string) Medium {
	switch {
	case s == "" || equalFold(s, "GPU"):
		return MediumGPU
	case equalFold(s, "CPU") || equalFold(s, "CPU_TIER1"):
		return MediumCPU
	case equalFold(s, "CPU_TIER2") || equalFold(s, "DISK"):
		return MediumDisk
	case equalFold(s, "EXTERNAL"):
		return MediumExternal
	default:
		return MediumUnknown
	}
}

func equalFold(s, upper string) bool {
	if len(s) != len(upper) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// Kind says which of Event's fields is set.
type Kind uint8

// Event kinds.
const (
	KindBlockStored Kind = iota + 1
	KindBlockRemoved
	KindAllBlocksCleared
)

// String returns the kind's wire tag.
func (k Kind) String() string {
	switch k {
	case KindBlockStored:
		return "BlockStored"
	case KindBlockRemoved:
		return "BlockRemoved"
	case KindAllBlocksCleared:
		return "AllBlocksCleared"
	default:
		return "Unknown"
	}
}

// BlockStored reports one or more blocks that became full and cached, in
// chain order. BlockHashes are the engine's own hashes (only used to resolve
// later parents and removals); TokenIDs cover the blocks, BlockSize tokens
// each, except that an SGLang short last page is reported as one block whose
// BlockSize is its length.
type BlockStored struct {
	BlockHashes []uint64
	// ParentHash is the engine hash of the block before BlockHashes[0];
	// meaningful only when HasParent.
	ParentHash uint64
	HasParent  bool
	TokenIDs   []uint32
	BlockSize  int
	// LoRAName is the adapter name, or "#<lora_id>" when the engine sent
	// only a numeric id, or "" for the base model.
	LoRAName string
	Medium   Medium
	// ExtraKeys is nil when no block carries extra keys (the text-only
	// case); otherwise it has one entry per block: "" for none, else an
	// opaque, deterministic encoding of the engine's extra keys (multimodal
	// hashes and the like).
	ExtraKeys []string
	// CacheSalt is the per-request cache salt (SGLang metadata), "" if none.
	CacheSalt string
}

// BlockRemoved reports blocks the engine evicted from one tier, or from all
// tiers when AllTiers (the engine sent no medium).
type BlockRemoved struct {
	BlockHashes []uint64
	Medium      Medium
	AllTiers    bool
}

// AllBlocksCleared reports that the engine dropped its whole cache.
type AllBlocksCleared struct{}

// Event is one KV event. Exactly one of Stored and Removed is non-nil for
// KindBlockStored and KindBlockRemoved; both are nil for
// KindAllBlocksCleared. The pointers refer into storage shared by the whole
// Batch.
type Event struct {
	Kind    Kind
	Stored  *BlockStored
	Removed *BlockRemoved
}

// Batch is one published batch of events from one engine process (one DP
// rank).
type Batch struct {
	Time    time.Time
	DPRank  int32
	HasRank bool
	Events  []Event
	// Skipped lists the events that were dropped because they were invalid,
	// in input order; the other events are in Events and should be applied.
	Skipped []*Error
	// Ignored counts events dropped on purpose: those of KV-cache groups
	// that do not describe a reusable prefix (sliding window, mamba).
	Ignored int
}
