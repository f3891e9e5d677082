package kvindex

import "unsafe"

// Stats describes the index's size and activity.
type Stats struct {
	Nodes     int // blocks indexed
	MaxNodes  int
	Holders   int // (engine, rank) holders known
	Pairs     int // (block, holder) pairs with any tier
	TierPairs [numTiers]int
	// Bytes estimates the memory held by the index's own structures.
	Bytes     int64
	Evictions uint64 // blocks evicted by the node cap
	// PartialPages counts single-block stores shorter than the holder's
	// block size (SGLang short pages), which are not indexed.
	PartialPages uint64
	// StaleRefs counts engine hashes that named an evicted block.
	StaleRefs uint64
	Lookups   uint64
	// LookupHits counts lookups that matched at least one engine.
	LookupHits uint64
}

// TierIndex positions in Stats.TierPairs.
const (
	TierGPU = iota
	TierCPU
	TierDisk
	TierExternal
	// TierOther counts blocks of a medium sluice does not know.
	TierOther
)

// Stats returns current counters.
func (ix *Index) Stats() Stats {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := Stats{
		Nodes: ix.live, MaxNodes: ix.cfg.MaxNodes, Holders: len(ix.holderIdx), Pairs: ix.pairs,
		TierPairs: ix.tierPairs, Evictions: ix.evictions, PartialPages: ix.partials, StaleRefs: ix.staleRefs,
		Lookups: ix.lookups.Load(), LookupHits: ix.lookupHits.Load(),
	}
	b := int64(cap(ix.nodes))*int64(unsafe.Sizeof(node{})) + int64(cap(ix.table.slots))*4
	b += int64(cap(ix.usageBits)+cap(ix.leafBits))*8 + int64(cap(ix.free)+cap(ix.limbo))*4
	b += int64(cap(ix.spills)) * int64(unsafe.Sizeof(spill{}))
	for i := range ix.spills {
		b += int64(cap(ix.spills[i].e)) * 4
	}
	for i := range ix.holders {
		b += int64(cap(ix.holders[i].refs.slots))*int64(unsafe.Sizeof(refSlot{})) +
			int64(cap(ix.holders[i].groups.slots))*int64(unsafe.Sizeof(groupSlot{}))
	}
	s.Bytes = b
	return s
}

// EngineBlocks returns the (block, rank) pairs each engine's ranks hold in any tier (the blocks
// indexed for the engine, a block held by two of its ranks counted twice), indexed by the
// engine's slot: dst, reset and grown as needed, with 0 for engines that hold nothing or have
// no holder. It reads the holders' own pair counts, kept where entries are added and removed,
// so it costs one pass over the holders (at most 65,536) under the read lock and adds nothing
// to Store, Remove or Lookup. It is meant for diagnostics (the decider's console); pass the
// previous result as dst to reuse it.
func (ix *Index) EngineBlocks(dst []int) []int {
	dst = dst[:0]
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for i := range ix.holders {
		hs := &ix.holders[i]
		if !hs.live {
			continue
		}
		if e := int(hs.id.Engine); e >= len(dst) {
			dst = append(dst, make([]int, e+1-len(dst))...)
		}
		dst[hs.id.Engine] += hs.pairs
	}
	return dst
}
