package kvindex

import (
	"math/bits"
	"sync/atomic"
)

// Node storage: the arena and its free slots, references and their
// staleness, the clock that evicts leaf blocks, and the per-node holder
// entries (tiers, child counts used for hole tracking).

// node is one indexed block: 20 bytes, no pointers. A slot is free when it
// has neither holders nor children (a live node always has one or the
// other; pruning frees it otherwise).
type node struct {
	hlo, hhi uint32 // chained sluice hash (the table key), in two words so the struct packs to 20 bytes
	parent   uint32 // index+1; 0 = first block of its tree
	nchild   uint32
	// h0 is the node's only holder entry, or spilled|i when the holders are
	// in Index.spills[i]; 0 = no holder.
	h0 holderEntry
}

func (n *node) hash() uint64     { return uint64(n.hlo) | uint64(n.hhi)<<32 }
func (n *node) setHash(h uint64) { n.hlo, n.hhi = uint32(h), uint32(h>>32) }
func (n *node) isFree() bool     { return n.h0 == 0 && n.nchild == 0 }
func (n *node) spilled() bool    { return n.h0&spilledFlag != 0 }
func (n *node) spillIndex() int  { return int(n.h0 &^ spilledFlag) }
func spillRef(i int) holderEntry { return spilledFlag | holderEntry(i) }

// spill holds the holders of a node with more than one, and their set's
// fingerprint (for a single holder it is holderBit of that holder).
type spill struct {
	hset uint64
	e    []holderEntry
}

func (s *spill) find(h uint16) int {
	for i, e := range s.e {
		if e.holder() == h {
			return i
		}
	}
	return -1
}

// hset is the node's holder-set fingerprint: equal sets give equal values.
func (ix *Index) hset(n *node) uint64 {
	switch {
	case n.h0 == 0:
		return 0
	case n.spilled():
		return ix.spills[n.spillIndex()].hset
	}
	return holderBit(n.h0.holder())
}

// sameHolders reports whether a and b have equal holder-set fingerprints,
// reading spills only when both have several holders.
func (ix *Index) sameHolders(a, b *node) bool {
	switch as, bs := a.spilled(), b.spilled(); {
	case as && bs:
		return ix.spills[a.spillIndex()].hset == ix.spills[b.spillIndex()].hset
	case as || bs:
		return false
	}
	return (a.h0 == 0) == (b.h0 == 0) && a.h0.holder() == b.h0.holder()
}

// entries returns the node's holder entries, using one for a single
// holder. The slice is valid until the node's holders change.
func (ix *Index) entries(n *node, one *[1]holderEntry) []holderEntry {
	switch {
	case n.h0 == 0:
		return nil
	case n.spilled():
		return ix.spills[n.spillIndex()].e
	}
	one[0] = n.h0
	return one[:]
}

// deref resolves holder hi's reference r (node index+1), reporting false
// when it is stale: the node is free, or holder hi no longer holds it.
// References carry no generation; instead a slot freed while some holder
// may still name it is not reused until those holders' maps are swept (see
// Index.limbo), so a live node a reference names is the node it was made
// for.
func (ix *Index) deref(r uint32, hi uint16) (uint32, bool) {
	idx := r - 1
	if int(idx) >= len(ix.nodes) || ix.entryOf(idx, hi) == nil {
		return 0, false
	}
	return idx, true
}

// ---- usage counts and the clock ----
//
// Eviction is a clock sweep (second chance with a 2-bit usage count, as in
// PostgreSQL's buffer manager) over the leaf blocks, rather than an LRU
// list, which would cost two 4-byte links per block. A new block starts at
// usage 1; storing it again or a lookup that ends on it sets the high bit
// (usage 2 or 3); the hand takes one off each leaf it passes and evicts the
// first at 0. A block that becomes a leaf when its last child goes starts at
// 0, as the old list put it at the cold end. leafBits marks the leaves so
// the hand skips interior blocks 64 at a time.

const usageMax = 3

func (ix *Index) usage(idx uint32) uint64 {
	return atomic.LoadUint64(&ix.usageBits[idx>>5]) >> (idx & 31 * 2) & 3
}

// setUsage stores u. Callers hold the write lock, which excludes the
// lookups that set bits atomically under the read lock, so a plain
// read-modify-write is safe.
func (ix *Index) setUsage(idx uint32, u uint64) {
	w := &ix.usageBits[idx>>5]
	sh := idx & 31 * 2
	*w = *w&^(3<<sh) | u<<sh
}

// touch marks idx as used (usage 2 or 3). Safe under the read lock, where
// other lookups touch concurrently; Store calls it under the write lock.
func (ix *Index) touch(idx uint32) {
	w := &ix.usageBits[idx>>5]
	bit := uint64(2) << (idx & 31 * 2)
	if atomic.LoadUint64(w)&bit == 0 {
		atomic.OrUint64(w, bit)
	}
}

func (ix *Index) setLeaf(idx uint32, leaf bool) {
	if leaf {
		ix.leafBits[idx>>6] |= 1 << (idx & 63)
	} else {
		ix.leafBits[idx>>6] &^= 1 << (idx & 63)
	}
}

// nextLeaf returns the first leaf at or after from, wrapping once; false
// when there is none.
func (ix *Index) nextLeaf(from uint32) (uint32, bool) {
	n := uint32(len(ix.nodes))
	if n == 0 {
		return 0, false
	}
	if from >= n {
		from = 0
	}
	words := uint32(len(ix.leafBits))
	w := from >> 6
	m := ix.leafBits[w] &^ (1<<(from&63) - 1)
	for range words + 1 {
		if m != 0 {
			return w<<6 | uint32(bits.TrailingZeros64(m)), true
		}
		if w++; w == words {
			w = 0
		}
		m = ix.leafBits[w]
	}
	return 0, false
}

// evictOne evicts a leaf by the clock (see usage), never pinned (index+1).
// It reports false when nothing but pinned is evictable.
func (ix *Index) evictOne(pinned uint32) bool {
	for budget := (usageMax+1)*ix.live + 2; budget > 0; budget-- {
		t, ok := ix.nextLeaf(ix.hand)
		if !ok {
			return false
		}
		ix.hand = t + 1
		if t+1 == pinned {
			if o, _ := ix.nextLeaf(t + 1); o == t {
				return false // the only leaf
			}
			continue
		}
		if u := ix.usage(t); u != 0 {
			ix.setUsage(t, u-1)
			continue
		}
		var one [1]holderEntry
		for {
			es := ix.entries(&ix.nodes[t], &one)
			if len(es) == 0 {
				break
			}
			ix.markStale(es[0].holder())
			ix.clearTiers(t, es[0].holder(), allTiers)
		}
		ix.evictions++
		ix.freeNode(t)
		return true
	}
	return false
}

// ---- stale references ----

// markStale records that holder hi may hold references to nodes it no
// longer holds (an evicted block, or a block it named by several engine
// hashes and removed by one), which must be swept before those nodes'
// slots are reused.
func (ix *Index) markStale(hi uint16) {
	if hs := &ix.holders[hi]; hs.live && !hs.stale {
		hs.stale = true
		ix.nstale++
	}
}

func (ix *Index) unmarkStale(hi uint16) {
	if hs := &ix.holders[hi]; hs.stale {
		hs.stale = false
		ix.nstale--
	}
	if ix.nstale == 0 && len(ix.limbo) > 0 {
		ix.free = append(ix.free, ix.limbo...) // no reference names them now
		ix.limbo = ix.limbo[:0]
	}
}

// limboSweepAt is how many slots wait in limbo before a sweep frees them.
func (ix *Index) limboSweepAt() int { return max(1024, ix.live/8) }

// sweep deletes the stale references of every holder marked stale, after
// which no reference names a slot in limbo, and makes those slots free.
func (ix *Index) sweep() {
	for i := range ix.holders {
		hs := &ix.holders[i]
		if !hs.stale {
			continue
		}
		var drop []uint64
		hs.refs.each(func(k uint64, r uint32) {
			if _, ok := ix.deref(r, uint16(i)); !ok {
				drop = append(drop, k)
			}
		})
		for _, k := range drop {
			hs.refs.del(k)
			hs.groups.del(k)
		}
		ix.staleRefs += uint64(len(drop))
		ix.unmarkStale(uint16(i))
	}
	ix.free = append(ix.free, ix.limbo...)
	ix.limbo = ix.limbo[:0]
}

// ---- allocation ----

func (ix *Index) allocNode(h uint64, parent uint32) uint32 {
	if len(ix.free) == 0 && len(ix.limbo) > 0 && (ix.nstale == 0 || len(ix.limbo) >= ix.limboSweepAt()) {
		ix.sweep()
	}
	var idx uint32
	if k := len(ix.free); k > 0 {
		idx = ix.free[k-1]
		ix.free = ix.free[:k-1]
	} else {
		idx = uint32(len(ix.nodes))
		if len(ix.nodes) == cap(ix.nodes) {
			// Grow by an eighth rather than append's quarter: at most 12.5 %
			// of the arena is slack.
			grown := make([]node, len(ix.nodes), cap(ix.nodes)+max(1024, cap(ix.nodes)/8))
			copy(grown, ix.nodes)
			ix.nodes = grown
		}
		ix.nodes = append(ix.nodes, node{})
		if int(idx>>5) >= len(ix.usageBits) {
			ix.usageBits = append(ix.usageBits, 0)
		}
		if int(idx>>6) >= len(ix.leafBits) {
			ix.leafBits = append(ix.leafBits, 0)
		}
	}
	// One write of the whole node, so that reading it back (addTier) is
	// forwarded from the store instead of waiting for a reused slot's
	// cache line.
	ix.nodes[idx] = node{hlo: uint32(h), hhi: uint32(h >> 32), parent: parent}
	ix.table.put(ix.nodes, h, idx)
	ix.live++
	if parent != 0 {
		p := &ix.nodes[parent-1]
		if p.nchild == 0 {
			ix.setLeaf(parent-1, false)
		}
		p.nchild++
	}
	ix.setLeaf(idx, true)
	ix.setUsage(idx, 1)
	return idx
}

// freeNode removes a leaf with no holders and prunes ancestors left with
// neither holders nor children; an ancestor that still has holders becomes
// a leaf at usage 0, the first the clock takes.
func (ix *Index) freeNode(idx uint32) {
	for {
		n := &ix.nodes[idx]
		ix.table.del(ix.nodes, n.hash())
		parent := n.parent
		*n = node{}
		ix.setLeaf(idx, false)
		ix.setUsage(idx, 0)
		if ix.nstale > 0 {
			ix.limbo = append(ix.limbo, idx)
		} else {
			ix.free = append(ix.free, idx)
		}
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
			ix.setLeaf(parent-1, true)
			ix.setUsage(parent-1, 0)
			return
		}
		idx = parent - 1
	}
}

// ---- holder entries ----

// addTier sets tier for holder h on node idx.
func (ix *Index) addTier(idx uint32, h uint16, tier uint8) {
	n := &ix.nodes[idx]
	switch {
	case n.h0 == 0:
		n.h0 = mkEntry(h, tier)
		ix.countPair(0, tier)
		ix.entryAdded(idx, h)
		return
	case !n.spilled():
		if n.h0.holder() == h {
			old := n.h0.tiers()
			n.h0 = n.h0.withTiers(old | tier)
			ix.countPair(old, old|tier)
			return
		}
		first := n.h0
		var si int
		if k := len(ix.freeSpil); k > 0 {
			si = int(ix.freeSpil[k-1])
			ix.freeSpil = ix.freeSpil[:k-1]
		} else {
			ix.spills = append(ix.spills, spill{})
			si = len(ix.spills) - 1
		}
		sp := &ix.spills[si]
		sp.e = append(sp.e[:0], first)
		sp.hset = holderBit(first.holder())
		n.h0 = spillRef(si)
	default:
		sp := &ix.spills[n.spillIndex()]
		if i := sp.find(h); i >= 0 {
			e := sp.e[i]
			sp.e[i] = e.withTiers(e.tiers() | tier)
			ix.countPair(e.tiers(), e.tiers()|tier)
			return
		}
	}
	sp := &ix.spills[n.spillIndex()]
	sp.e = append(sp.e, mkEntry(h, tier))
	sp.hset ^= holderBit(h)
	ix.countPair(0, tier)
	ix.entryAdded(idx, h)
}

// entryOf returns holder h's entry on node idx, or nil. The pointer is
// valid until the node's holders change.
func (ix *Index) entryOf(idx uint32, h uint16) *holderEntry {
	n := &ix.nodes[idx]
	switch {
	case n.h0 == 0:
		return nil
	case n.spilled():
		sp := &ix.spills[n.spillIndex()]
		if i := sp.find(h); i >= 0 {
			return &sp.e[i]
		}
		return nil
	case n.h0.holder() == h:
		return &n.h0
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
	pe := ix.entryOf(idx, h)
	if pe == nil {
		return 0
	}
	oe := *pe
	old := oe.tiers()
	left := old &^ mask
	ix.countPair(old, left)
	if left != 0 {
		*pe = oe.withTiers(left)
		return left
	}
	ix.entryRemoved(idx, h, oe)
	n := &ix.nodes[idx]
	if !n.spilled() {
		n.h0 = 0
		return 0
	}
	si := n.spillIndex()
	sp := &ix.spills[si]
	i := sp.find(h)
	last := len(sp.e) - 1
	sp.e[i] = sp.e[last]
	sp.e = sp.e[:last]
	sp.hset ^= holderBit(h)
	if len(sp.e) == 1 {
		n.h0 = sp.e[0]
		sp.e = sp.e[:0]
		sp.hset = 0
		ix.freeSpil = append(ix.freeSpil, uint32(si))
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
