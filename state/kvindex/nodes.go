package kvindex

import "sync/atomic"

// Node storage: references with generations, the LRU list of leaf blocks, allocation and
// eviction, and the per-node holder entries (tiers, child counts used for hole tracking).

func (ix *Index) ref(idx uint32) uint64 { return uint64(ix.nodes[idx].gen)<<32 | uint64(idx+1) }

// deref resolves a node reference, reporting false when it is stale:
// freeing a node bumps its generation, so a reference taken before matches
// neither the free slot nor a later node in it.
func (ix *Index) deref(r uint64) (uint32, bool) {
	idx := uint32(r) - 1
	if int(idx) >= len(ix.nodes) || ix.nodes[idx].gen != uint32(r>>32) {
		return 0, false
	}
	return idx, true
}

func (ix *Index) linkMRU(idx uint32) {
	n := &ix.nodes[idx]
	n.prev, n.next = 0, ix.head
	if ix.head != 0 {
		ix.nodes[ix.head-1].prev = idx + 1
	} else {
		ix.tail = idx + 1
	}
	ix.head = idx + 1
}

func (ix *Index) linkLRU(idx uint32) {
	n := &ix.nodes[idx]
	n.next, n.prev = 0, ix.tail
	if ix.tail != 0 {
		ix.nodes[ix.tail-1].next = idx + 1
	} else {
		ix.head = idx + 1
	}
	ix.tail = idx + 1
}

func (ix *Index) unlink(idx uint32) {
	n := &ix.nodes[idx]
	if n.prev != 0 {
		ix.nodes[n.prev-1].next = n.next
	} else {
		ix.head = n.next
	}
	if n.next != 0 {
		ix.nodes[n.next-1].prev = n.prev
	} else {
		ix.tail = n.prev
	}
	n.prev, n.next = 0, 0
}

func (ix *Index) allocNode(h uint64, parent uint32) uint32 {
	var idx uint32
	if ix.free != 0 {
		idx = ix.free - 1
		ix.free = ix.nodes[idx].next
		gen := ix.nodes[idx].gen
		ix.nodes[idx] = node{gen: gen}
	} else {
		idx = uint32(len(ix.nodes))
		ix.nodes = append(ix.nodes, node{})
	}
	n := &ix.nodes[idx]
	n.hash, n.parent = h, parent
	ix.table.put(ix.nodes, h, idx)
	ix.live++
	if parent != 0 {
		p := &ix.nodes[parent-1]
		if p.nchild == 0 {
			ix.unlink(parent - 1)
		}
		p.nchild++
	}
	ix.linkMRU(idx)
	return idx
}

// freeNode removes a leaf with no holders and prunes ancestors left with
// neither holders nor children; an ancestor that still has holders becomes
// a leaf at the cold end of the LRU list.
func (ix *Index) freeNode(idx uint32) {
	ix.unlink(idx) // a leaf; the ancestors freed below had a child, so are not listed
	for {
		n := &ix.nodes[idx]
		ix.table.del(ix.nodes, n.hash)
		parent := n.parent
		if n.spill != 0 {
			ix.spills[n.spill-1] = ix.spills[n.spill-1][:0]
			ix.freeSpil = append(ix.freeSpil, n.spill-1)
		}
		gen := n.gen + 1
		*n = node{gen: gen, next: ix.free}
		ix.free = idx + 1
		ix.live--
		if parent == 0 {
			return
		}
		p := &ix.nodes[parent-1]
		p.nchild--
		if p.nchild > 0 {
			return
		}
		if p.h0 != 0 {
			ix.linkLRU(parent - 1)
			return
		}
		idx = parent - 1
	}
}

// addTier sets tier for holder h on node idx.
func (ix *Index) addTier(idx uint32, h uint16, tier uint8) {
	n := &ix.nodes[idx]
	if n.h0 == 0 {
		n.h0 = mkEntry(h, tier)
		n.hset ^= holderBit(h)
		ix.countPair(0, tier)
		ix.entryAdded(idx, h)
		return
	}
	if n.h0.holder() == h {
		old := n.h0.tiers()
		n.h0 = n.h0.withTiers(old | tier)
		ix.countPair(old, old|tier)
		return
	}
	if n.spill != 0 {
		s := ix.spills[n.spill-1]
		for i, e := range s {
			if e.holder() == h {
				s[i] = e.withTiers(e.tiers() | tier)
				ix.countPair(e.tiers(), e.tiers()|tier)
				return
			}
		}
	} else {
		if k := len(ix.freeSpil); k > 0 {
			n.spill = ix.freeSpil[k-1] + 1
			ix.freeSpil = ix.freeSpil[:k-1]
		} else {
			ix.spills = append(ix.spills, make([]holderEntry, 0, 2))
			n.spill = uint32(len(ix.spills))
		}
	}
	ix.spills[n.spill-1] = append(ix.spills[n.spill-1], mkEntry(h, tier))
	n.hset ^= holderBit(h)
	ix.countPair(0, tier)
	ix.entryAdded(idx, h)
}

// entryOf returns holder h's entry on node idx, or nil. The pointer is
// valid until the node's holders change.
func (ix *Index) entryOf(idx uint32, h uint16) *holderEntry {
	n := &ix.nodes[idx]
	if n.h0 != 0 && n.h0.holder() == h {
		return &n.h0
	}
	if n.spill != 0 {
		s := ix.spills[n.spill-1]
		for i := range s {
			if s[i].holder() == h {
				return &s[i]
			}
		}
	}
	return nil
}

// entryAdded keeps the hole bookkeeping when holder h starts holding node
// idx: the parent's entry counts one more child held by h, or, when h does
// not hold the parent, h has a hole. The new entry's own count is exact as
// 0 unless h already had holes (children held by h under a node h did not
// hold are holes), and then counts are not relied on.
func (ix *Index) entryAdded(idx uint32, h uint16) {
	hs := &ix.holders[h]
	hs.pairs++
	p := ix.nodes[idx].parent
	if p == 0 {
		return
	}
	if pe := ix.entryOf(p-1, h); pe != nil {
		if k := pe.kids(); k < maxKids {
			*pe = pe.withKids(k + 1)
		}
	} else {
		hs.holes++
	}
}

// entryRemoved keeps the hole bookkeeping when holder h's entry e leaves
// node idx: children still held by h become holes, and the parent's entry
// counts one child fewer.
func (ix *Index) entryRemoved(idx uint32, h uint16, e holderEntry) {
	hs := &ix.holders[h]
	hs.pairs--
	if e.kids() != 0 {
		hs.holes++
	}
	if p := ix.nodes[idx].parent; p != 0 {
		if pe := ix.entryOf(p-1, h); pe != nil {
			switch k := pe.kids(); k {
			case 0: // only when counts are already unreliable
				hs.holes++
			case maxKids: // saturated: stays, erring towards holes
			default:
				*pe = pe.withKids(k - 1)
			}
		}
	}
	if hs.pairs == 0 {
		hs.holes = 0
	}
}

// clearTiers clears mask for holder h on node idx and returns the tiers
// left; the entry goes when none are.
func (ix *Index) clearTiers(idx uint32, h uint16, mask uint8) uint8 {
	n := &ix.nodes[idx]
	var s []holderEntry
	if n.spill != 0 {
		s = ix.spills[n.spill-1]
	}
	var old uint8
	var oe holderEntry
	pos := -2 // -1 = h0
	if n.h0 != 0 && n.h0.holder() == h {
		old, oe, pos = n.h0.tiers(), n.h0, -1
	} else {
		for i, e := range s {
			if e.holder() == h {
				old, oe, pos = e.tiers(), e, i
				break
			}
		}
	}
	if pos == -2 {
		return 0
	}
	left := old &^ mask
	ix.countPair(old, left)
	if left != 0 {
		if pos == -1 {
			n.h0 = oe.withTiers(left)
		} else {
			s[pos] = oe.withTiers(left)
		}
		return left
	}
	ix.entryRemoved(idx, h, oe)
	n.hset ^= holderBit(h)
	last := len(s) - 1
	switch {
	case pos == -1 && last >= 0:
		n.h0 = s[last]
		s = s[:last]
	case pos == -1:
		n.h0 = 0
	default:
		s[pos] = s[last]
		s = s[:last]
	}
	if n.spill != 0 {
		ix.spills[n.spill-1] = s
		if len(s) == 0 {
			ix.freeSpil = append(ix.freeSpil, n.spill-1)
			n.spill = 0
		}
	}
	return 0
}

func (ix *Index) countPair(old, new uint8) {
	if old == 0 && new != 0 {
		ix.pairs++
	} else if old != 0 && new == 0 {
		ix.pairs--
	}
	for b := range numTiers {
		bit := uint8(1) << b
		if old&bit == 0 && new&bit != 0 {
			ix.tierPairs[b]++
		} else if old&bit != 0 && new&bit == 0 {
			ix.tierPairs[b]--
		}
	}
}

// evictOne evicts the least recently used leaf that has not been looked up
// since it last came to the cold end, never pinned (index+1). It reports
// false when nothing but pinned is evictable.
func (ix *Index) evictOne(pinned uint32) bool {
	for budget := 2*ix.live + 2; budget > 0 && ix.tail != 0; budget-- {
		t := ix.tail - 1
		n := &ix.nodes[t]
		if t+1 == pinned || atomic.LoadUint32(&n.ref) != 0 {
			if ix.head == ix.tail {
				if t+1 == pinned {
					return false
				}
			}
			atomic.StoreUint32(&n.ref, 0)
			ix.unlink(t)
			ix.linkMRU(t)
			continue
		}
		for n.h0 != 0 {
			ix.clearTiers(t, n.h0.holder(), allTiers)
		}
		ix.evictions++
		ix.freeNode(t)
		return true
	}
	return false
}
