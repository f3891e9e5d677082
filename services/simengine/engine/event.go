package engine

// EventKind tells KV-cache events apart.
type EventKind int

// The KV-cache event kinds, as vLLM and SGLang publish them.
const (
	// BlockStored: one or more consecutive full blocks entered the cache.
	BlockStored EventKind = iota + 1
	// BlockRemoved: blocks were evicted.
	BlockRemoved
	// AllBlocksCleared: the whole cache was dropped.
	AllBlocksCleared
)

// String returns the engines' tag for the kind ("BlockStored", …).
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Unknown"
}

// Event is one KV-cache event. All blocks are GPU-resident: the simulated engine has one tier.
type Event struct {
	Kind EventKind
	// BlockHashes are the engine's own chained block hashes (BlockStored, BlockRemoved).
	BlockHashes []uint64
	// ParentHash is the hash of the block before the first stored one; HasParent is false
	// when the first stored block starts the sequence. BlockStored only.
	ParentHash uint64
	HasParent  bool
	// TokenIDs are the tokens of the stored blocks, BlockSize × len(BlockHashes) of them.
	TokenIDs []uint32
	// BlockSize is the tokens per block (BlockStored only).
	BlockSize int
	// LoRAName is the LoRA adapter of the request whose blocks these are, "" for the base
	// model, and CacheSalt its cache salt, "" for none (BlockStored only). The hashes already
	// depend on both.
	LoRAName, CacheSalt string
}

// Sink receives KV-cache events in the order the cache changed. It is called with the engine's
// lock held, so it must be quick, must not block and must not call back into the engine; it
// owns the slice it is given.
type Sink func(events []Event)
