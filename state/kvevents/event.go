// Package kvevents defines the KV-cache events that inference engines publish
// (blocks stored, blocks removed, everything cleared) in a form free of any
// wire format, and the limits a decoded batch must stay within.
//
// The wire decoders (sluice protobuf and the engines' own msgpack batches)
// are in components/kvwire; the index (state/kvindex) consumes these types.
// The rules the layers follow (KV-cache groups, namespaces, tiers, size
// bounds, seq/epoch) are in docs/kv-events.md; the wire layouts in
// docs/wire-formats.md.
package kvevents

import "time"

// Medium is the storage tier an event refers to.
type Medium uint8

// Storage tiers. MediumGPU is also what an untagged (nil) medium means.
// MediumUnknown is a medium string sluice does not recognise (a tier newer
// than this code): the event still applies, the index keeps such blocks in
// a tier of their own so chains and removals stay consistent, and
// ingestion counts the events.
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

// ParseMedium maps an engine's medium string to a tier, case-insensitively.
// These are the strings current engines emit (docs/kv-events.md): "" and
// "GPU" are GPU; "CPU" (vLLM offloading) and "CPU_PINNED" (SGLang HiCache
// host tier) are CPU; "STORAGE" (vLLM offloading to storage) and "DISK" are
// disk; "EXTERNAL" is external. Anything else is MediumUnknown.
func ParseMedium(s string) Medium {
	switch {
	case s == "" || equalFold(s, "GPU"):
		return MediumGPU
	case equalFold(s, "CPU") || equalFold(s, "CPU_PINNED"):
		return MediumCPU
	case equalFold(s, "STORAGE") || equalFold(s, "DISK"):
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

// GroupKind is what an engine declared a KV-cache group to be (vLLM
// kv_cache_spec_kind). vLLM's GPU block pool does not send it, so
// GroupKindUnknown is the common case and says nothing.
type GroupKind uint8

// KV-cache group kinds.
const (
	GroupKindUnknown GroupKind = iota
	// GroupKindFull is full attention; kinds not known to be windowed or
	// state-space (MLA and the like) count as full.
	GroupKindFull
	// GroupKindWindowed is sliding-window or chunked-local attention: only
	// the last window's blocks matter, and null blocks are skipped.
	GroupKindWindowed
	// GroupKindState is a state-space (mamba) group: its blocks are state
	// checkpoints, not a prefix.
	GroupKindState
)

// PrefixGroup reports whether a group of this kind may describe a reusable
// prefix, as far as the engine said (unknown counts as yes).
func (k GroupKind) PrefixGroup() bool { return k == GroupKindUnknown || k == GroupKindFull }

// BlockStored reports one or more blocks that became full and cached, in
// chain order. BlockHashes are the engine's own hashes (only used to resolve
// later parents and removals); TokenIDs cover the blocks, BlockSize tokens
// each, except that an SGLang short last page is reported as one block whose
// BlockSize is its length, and that a Sparse event has no TokenIDs.
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
	// The group fields sit beside Medium, in what would be its padding (the
	// small ones first).
	// GroupKind is the group's declared kind, GroupKindUnknown if none.
	GroupKind GroupKind
	// Sparse marks an event of a group that left blocks out (a
	// sliding-window group skips null blocks), so its token ids do not line
	// up with its hashes: TokenIDs is nil and BlockSize is as sent. Such a
	// group does not describe a reusable prefix. Only an event that names
	// its group (group_idx, or a windowed or state kind) is read as sparse;
	// any other mismatched token count is invalid.
	Sparse bool
	// Lookahead reports that the engine's hashes of these blocks cover
	// tokens beyond them (vLLM EAGLE lookahead_token_ids, SGLang EAGLE
	// bigram pairs), so the last block of a matched prefix is only reusable
	// by a request that continues with those tokens.
	Lookahead bool
	// Group is the engine's KV-cache group (vLLM group_idx); 0 when the
	// engine sent none, as single-group engines do.
	Group int32
	// ExtraKeys is nil when no block carries extra keys beyond what a
	// namespace expresses (the text-only case, with or without LoRA and
	// salt); otherwise it has one entry per block: "" for none, else an
	// opaque, deterministic encoding of the engine's remaining extra keys
	// (multimodal or prompt-embedding hashes). The adapter's own name or id
	// and the cache salt that vLLM folds into extra keys are removed first
	// (the salt moves to CacheSalt); see docs/kv-events.md.
	ExtraKeys []string
	// CacheSalt is the per-request cache salt (SGLang cache_salt or
	// metadata.cache_salt; vLLM's from the first block's extra keys), "" if
	// none.
	CacheSalt string
}

// BlockRemoved reports blocks the engine evicted from one tier, or from all
// tiers when AllTiers (the engine sent no medium), in one KV-cache group.
type BlockRemoved struct {
	BlockHashes []uint64
	Medium      Medium
	AllTiers    bool
	// Group is the engine's KV-cache group (vLLM group_idx), 0 if none.
	Group int32
}

// Event is one KV event. Exactly one of Stored and Removed is non-nil for
// KindBlockStored and KindBlockRemoved; both are nil for
// KindAllBlocksCleared (the engine dropped its whole cache). The pointers refer into storage shared by the whole
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
}
