package kvindex

import (
	"maps"
	"slices"
	"sync/atomic"
)

// Clone returns a deep copy of the index: an independent Index with the
// same contents (equal Digest, equal Lookup answers, the same snapshot
// bytes), the same LRU order, free lists and counters, which later writes to
// either index do not affect.
//
// It exists so that a caller can take a point-in-time copy while its own
// writer is paused and serialise the copy (WriteSnapshot) afterwards without
// pausing anything. The cost is memory copies of the index's flat arrays
// (see BENCHMARKS.md) and as much memory again while the copy is alive.
// Clone holds the read lock: lookups go on while it runs, writers wait.
func (ix *Index) Clone() *Index { return ix.CloneInto(nil) }

// CloneInto is Clone reusing the memory of dst, a copy made earlier that
// nothing else uses any more (its contents are overwritten; dst must not be
// ix). With dst nil it allocates. Reusing a copy of about the same size
// avoids allocating, zeroing and faulting in fresh memory, which costs as
// much as the copy itself.
func (ix *Index) CloneInto(dst *Index) *Index {
	if dst == ix {
		panic("kvindex: CloneInto(self)")
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	c := dst
	if c == nil {
		c = &Index{}
	}
	// c is unreachable by others (the contract), so its lock is not taken.
	c.cfg = ix.cfg
	c.live, c.hand, c.nstale = ix.live, ix.hand, ix.nstale
	c.nodes = append(c.nodes[:0], ix.nodes...)
	c.free = append(c.free[:0], ix.free...)
	c.limbo = append(c.limbo[:0], ix.limbo...)
	c.leafBits = append(c.leafBits[:0], ix.leafBits...)
	// Lookup sets usage bits atomically under the read lock.
	c.usageBits = slices.Grow(c.usageBits[:0], len(ix.usageBits))[:len(ix.usageBits)]
	for i := range ix.usageBits {
		c.usageBits[i] = atomic.LoadUint64(&ix.usageBits[i])
	}
	c.table = nodeTable{slots: append(c.table.slots[:0], ix.table.slots...), n: ix.table.n, idxMask: ix.table.idxMask}
	c.freeSpil = append(c.freeSpil[:0], ix.freeSpil...)
	c.freeHolders = append(c.freeHolders[:0], ix.freeHolders...)
	if c.holderIdx == nil {
		c.holderIdx = make(map[Holder]uint16, len(ix.holderIdx))
	}
	clear(c.holderIdx)
	maps.Copy(c.holderIdx, ix.holderIdx)
	if c.trees == nil {
		c.trees = make(map[Namespace][]tree, len(ix.trees))
	}
	clear(c.trees)
	for ns, ts := range ix.trees {
		c.trees[ns] = slices.Clone(ts)
	}
	c.pairs, c.tierPairs = ix.pairs, ix.tierPairs
	c.evictions, c.partials, c.staleRefs = ix.evictions, ix.partials, ix.staleRefs
	c.lookups.Store(ix.lookups.Load())
	c.lookupHits.Store(ix.lookupHits.Load())

	// Spills: one backing array for all of them (the old copy's backing is
	// reused); each slice is capped at its length, so a later append on the
	// copy reallocates instead of running into its neighbour.
	total := 0
	for i := range ix.spills {
		total += len(ix.spills[i].e)
	}
	back := c.cloneSpills[:0]
	if cap(back) < total {
		back = make([]holderEntry, 0, total)
	}
	c.cloneSpills = back[:total]
	c.spills = slices.Grow(c.spills[:0], len(ix.spills))[:len(ix.spills)]
	for i := range ix.spills {
		sp := &ix.spills[i]
		start := len(back)
		back = append(back, sp.e...)
		c.spills[i] = spill{hset: sp.hset, e: back[start:len(back):len(back)]}
	}

	old := c.holders
	// holderState is copied by value; its two maps are the only memory it
	// refers to (a new reference field must be deep-copied here too).
	c.holders = slices.Grow(c.holders[:0], len(ix.holders))[:len(ix.holders)]
	for i := range ix.holders {
		var reuse holderState
		if i < len(old) {
			reuse = old[i]
		}
		hs := ix.holders[i]
		hs.refs = hs.refs.cloneInto(reuse.refs)
		hs.groups = hs.groups.cloneInto(reuse.groups)
		c.holders[i] = hs
	}
	return c
}

// cloneInto returns a copy of m in dst's memory when it fits.
func (m refMap) cloneInto(dst refMap) refMap {
	if len(m.slots) == 0 {
		return refMap{}
	}
	return refMap{slots: append(dst.slots[:0], m.slots...), n: m.n}
}

// cloneInto returns a copy of m in dst's memory when it fits.
func (m groupMap) cloneInto(dst groupMap) groupMap {
	if len(m.slots) == 0 {
		return groupMap{}
	}
	return groupMap{slots: append(dst.slots[:0], m.slots...), n: m.n}
}
