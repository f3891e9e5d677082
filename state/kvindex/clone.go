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
	c.free, c.live, c.head, c.tail = ix.free, ix.live, ix.head, ix.tail
	c.table = nodeTable{slots: append(c.table.slots[:0], ix.table.slots...), mask: ix.table.mask, n: ix.table.n}
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

	// Nodes: field by field, because Lookup sets ref atomically under the
	// read lock. Storing each field (rather than a node literal) keeps the
	// loop within 1.5× of a plain copy.
	c.nodes = slices.Grow(c.nodes[:0], len(ix.nodes))[:len(ix.nodes)]
	dn := c.nodes[:len(ix.nodes)]
	for i := range ix.nodes {
		n, d := &ix.nodes[i], &dn[i]
		d.hash, d.hset = n.hash, n.hset
		d.parent, d.nchild, d.prev, d.next = n.parent, n.nchild, n.prev, n.next
		d.gen, d.ref, d.h0, d.spill = n.gen, atomic.LoadUint32(&n.ref), n.h0, n.spill
	}

	// Spills: one backing array for all of them (the old copy's backing is
	// reused); each slice is capped at its length, so a later append on the
	// copy reallocates instead of running into its neighbour.
	total := 0
	for _, sp := range ix.spills {
		total += len(sp)
	}
	back := c.cloneSpills[:0]
	if cap(back) < total {
		back = make([]holderEntry, 0, total)
	}
	c.cloneSpills = back[:total]
	c.spills = slices.Grow(c.spills[:0], len(ix.spills))[:len(ix.spills)]
	for i, sp := range ix.spills {
		start := len(back)
		back = append(back, sp...)
		c.spills[i] = back[start:len(back):len(back)]
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
