package kvindex

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/state/slots"
)

// Match is one engine's cached prefix of a query.
type Match struct {
	Engine slots.Slot
	// Blocks is the number of leading query blocks the engine holds, all of
	// them, in any tier, on its best rank; Tokens = Blocks × BlockSize.
	Blocks    int
	Tokens    int64
	BlockSize int
}

// Lookup appends to out one Match per engine that holds at least the first
// full block of tokenIDs in namespace ns, and returns the extended slice.
// The query is hashed the way Store hashes events, once per block size the
// namespace has been stored with; an engine's match is its deepest over its
// ranks and those sizes (by tokens). A holder's depth ends at the first
// block it does not hold, even if it holds later ones. Matches are in no
// particular order. Lookup does not allocate when out has room for the
// result and fewer than 1024 holders exist; it marks the deepest matched
// block as used, which protects it from the next LRU eviction.
func (ix *Index) Lookup(ns Namespace, tokenIDs []uint32, out []Match) []Match {
	ix.lookups.Add(1)
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	start := len(out)
	for _, t := range ix.trees[ns] {
		out = ix.lookupTree(t, tokenIDs, out, start)
	}
	if len(out) > start {
		ix.lookupHits.Add(1)
	}
	return out
}

func (ix *Index) lookupTree(t tree, tokens []uint32, out []Match, start int) []Match {
	bs := t.blockSize
	nb := len(tokens) / bs
	if nb == 0 {
		return out
	}
	var aliveBuf [256]uint16
	alive := aliveBuf[:0]
	var maskBuf [16]uint64
	mask := maskBuf[:]
	if w := (len(ix.holders) + 63) / 64; w > len(mask) {
		mask = make([]uint64, w)
	}
	prev, fp := t.seed, uint64(0)
	deepest := uint32(0) // index+1
	depth := 0
	// Blocks are handled in chunks: hash the chunk, then touch every table
	// slot, then every node, before walking it. The touches are independent
	// loads, so their cache misses overlap instead of queueing one by one.
	const chunk = 32
	var hs [chunk]uint64
	var sink uint64
	for c0 := 0; c0 < nb; c0 += chunk {
		c1 := min(c0+chunk, nb)
		p := prev
		for i := c0; i < c1; i++ {
			p = chain(p, contentHash(tokens[i*bs:(i+1)*bs]))
			hs[i-c0] = p
		}
		slotsArr, tmask := ix.table.slots, ix.table.mask
		for i := c0; i < c1; i++ {
			sink += slotsArr[hs[i-c0]&tmask]
		}
		for i := c0; i < c1; i++ {
			if e := slotsArr[hs[i-c0]&tmask]; e != 0 {
				sink += ix.nodes[uint32(e)-1].hset
			}
		}
		stop := false
		for i := c0; i < c1; i++ {
			h := hs[i-c0]
			idx, ok := ix.table.get(ix.nodes, h)
			if !ok {
				stop = true
				break
			}
			n := &ix.nodes[idx]
			if i == 0 {
				if n.h0 != 0 {
					alive = append(alive, n.h0.holder())
				}
				if n.spill != 0 {
					for _, e := range ix.spills[n.spill-1] {
						alive = append(alive, e.holder())
					}
				}
			} else if n.hset != fp {
				// The holder set changed from the previous block's: drop the
				// alive holders that do not hold this block.
				if n.h0 != 0 {
					hh := n.h0.holder()
					mask[hh>>6] |= 1 << (hh & 63)
				}
				var s []holderEntry
				if n.spill != 0 {
					s = ix.spills[n.spill-1]
				}
				for _, e := range s {
					hh := e.holder()
					mask[hh>>6] |= 1 << (hh & 63)
				}
				k := 0
				for _, a := range alive {
					if mask[a>>6]&(1<<(a&63)) != 0 {
						alive[k] = a
						k++
					} else {
						out = ix.record(out, start, a, i, bs)
					}
				}
				alive = alive[:k]
				if n.h0 != 0 {
					mask[n.h0.holder()>>6] = 0
				}
				for _, e := range s {
					mask[e.holder()>>6] = 0
				}
			}
			if len(alive) == 0 {
				stop = true
				break
			}
			fp = n.hset
			prev, deepest, depth = h, idx+1, i+1
		}
		if stop {
			break
		}
	}
	lookupSink.Store(sink)
	for _, a := range alive {
		out = ix.record(out, start, a, depth, bs)
	}
	if deepest != 0 {
		if r := &ix.nodes[deepest-1].ref; atomic.LoadUint32(r) == 0 {
			atomic.StoreUint32(r, 1)
		}
	}
	return out
}

// lookupSink keeps the prefetching loads of lookupTree from being optimised
// away.
var lookupSink atomic.Uint64

func (ix *Index) record(out []Match, start int, hi uint16, blocks, bs int) []Match {
	if blocks == 0 {
		return out
	}
	e := ix.holders[hi].id.Engine
	tokens := int64(blocks) * int64(bs)
	for i := start; i < len(out); i++ {
		if out[i].Engine == e {
			if tokens > out[i].Tokens {
				out[i].Blocks, out[i].Tokens, out[i].BlockSize = blocks, tokens, bs
			}
			return out
		}
	}
	return append(out, Match{Engine: e, Blocks: blocks, Tokens: tokens, BlockSize: bs})
}
