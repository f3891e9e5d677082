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
// block it does not hold, even if it holds later ones; a holder whose events
// showed EAGLE lookahead does not count its last matched block (its hash
// covers tokens after it; docs/kv-events.md). Matches are in no particular
// order. Lookup does not allocate when out has room for the
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
	if len(tokens)/t.blockSize == 0 {
		return out
	}
	var w walker
	if o, ok := w.run(ix, t, tokens, out, start); ok {
		return o
	}
	return ix.lookupLinear(t, tokens, out, start)
}

// lookupLinear walks the query block by block from the root: the
// reference behaviour, and the path for holders that may have holes.
func (ix *Index) lookupLinear(t tree, tokens []uint32, out []Match, start int) []Match {
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
		hashBlocks(hs[:c1-c0], prev, tokens[c0*bs:c1*bs], bs)
		slotsArr, tlen := ix.table.slots, uint64(len(ix.table.slots))
		for i := c0; i < c1; i++ {
			sink += uint64(slotsArr[reduce(hs[i-c0], tlen)])
		}
		for i := c0; i < c1; i++ {
			if c := ix.table.candidate(hs[i-c0]); c != 0 {
				sink += uint64(ix.nodes[c-1].h0)
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
			var one [1]holderEntry
			if i == 0 {
				for _, e := range ix.entries(n, &one) {
					alive = append(alive, e.holder())
				}
			} else if ix.hset(n) != fp {
				// The holder set changed from the previous block's: drop the
				// alive holders that do not hold this block.
				s := ix.entries(n, &one)
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
				for _, e := range s {
					mask[e.holder()>>6] = 0
				}
			}
			if len(alive) == 0 {
				stop = true
				break
			}
			fp = ix.hset(n)
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
		ix.touch(deepest - 1)
	}
	return out
}

// lookupSink keeps the prefetching loads of lookupTree from being optimised
// away.
var lookupSink atomic.Uint64

func (ix *Index) record(out []Match, start int, hi uint16, blocks, bs int) []Match {
	if ix.holders[hi].lookahead {
		// EAGLE: the engine's hash of the last matched block covers tokens
		// after it that the query may not have (docs/kv-events.md).
		blocks--
	}
	if blocks <= 0 {
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

// The fast path. A node exists only if its parent does, so the blocks of a
// query present in the index are a prefix of it. When no holder of the
// query's first block has holes (holderState.holes), each such holder's
// blocks along the query are a prefix too, so two present blocks with equal
// holder fingerprints bound a stretch where no holder of interest drops out.
// The walker therefore probes a few blocks spread over the query, skips
// stretches whose ends agree, and refines only the others, down to the
// blocks where the holder set changes: O(changes × log n) probes instead of
// n, issued in batches so their cache misses overlap. It applies the same
// per-block step as lookupLinear at those blocks, so it returns the same
// matches and marks the same block as used.

const (
	walkWindow = 512 // blocks hashed and searched at a time
	walkFanout = 4   // most probes per refined stretch
	absent     = ^uint32(0)
	// Beyond these the fast path leaves the query to lookupLinear.
	walkMaxAlive   = 256
	walkMaxHolders = 1024
)

type walker struct {
	ix    *Index
	bs    int
	base  int                    // query block of local position 0 (the window's left boundary)
	hs    [walkWindow + 1]uint64 // chained hashes by local position
	nodes [walkWindow + 1]uint32 // node index+1, absent, or 0 = not probed
	out   []Match
	start int
	// alive holds the first block's holders not yet dropped (nalive of
	// them); mask is scratch for one block's holder set.
	alive  [walkMaxAlive]uint16
	nalive int
	mask   [walkMaxHolders / 64]uint64
	// deepest is the last block (query position) that ended with a holder
	// alive, and its node; done is set once no holder is left or a block is
	// missing.
	deepest uint32
	done    bool
	// batches counts probe batches: each is two dependent loads (a table
	// slot, then the node it names) that the next batch waits for
	// (BenchmarkLookup reports it).
	batches int
}

// probe resolves the nodes of local positions ps, touching all their
// table slots and then all their nodes before resolving any, so the misses
// overlap.
func (w *walker) probe(ps []int) {
	w.batches++
	ix := w.ix
	slots, tlen := ix.table.slots, uint64(len(ix.table.slots))
	var sink uint64
	for _, p := range ps {
		sink += uint64(slots[reduce(w.hs[p], tlen)])
	}
	for _, p := range ps {
		if c := ix.table.candidate(w.hs[p]); c != 0 {
			sink += uint64(ix.nodes[c-1].h0)
		}
	}
	for _, p := range ps {
		if idx, ok := ix.table.get(ix.nodes, w.hs[p]); ok {
			w.nodes[p] = idx + 1
		} else {
			w.nodes[p] = absent
		}
	}
	lookupSink.Store(sink)
}

// run looks the query up in tree t. It reports false, having appended
// nothing, when a holder of the first block may have holes.
func (w *walker) run(ix *Index, t tree, tokens []uint32, out []Match, start int) ([]Match, bool) {
	bs := t.blockSize
	nb := len(tokens) / bs
	w.ix, w.bs, w.out, w.start = ix, bs, out, start
	if len(ix.holders) > walkMaxHolders {
		return out, false
	}
	prev, prevHi := t.seed, 0
	for w0 := 0; w0 < nb && !w.done; w0 += walkWindow {
		w1 := min(w0+walkWindow, nb)
		// Local position i is query block w0-1+i; position 0 is the previous
		// window's last block (or, in the first window, block 0 itself).
		first := w0 == 0
		w.base = w0 - 1
		lo := 0
		if first {
			w.base, lo = 0, 0
		} else {
			w.hs[0] = prev
			w.nodes[0] = w.nodes[prevHi] // the previous window's last block
		}
		prev = hashBlocks(w.hs[w0-w.base:w1-w.base], prev, tokens[w0*bs:w1*bs], bs)
		hi := w1 - 1 - w.base
		clear(w.nodes[lo+1 : hi+1])
		// Probe the window's last block and the first level of the search
		// together (and, in the first window, block 0), in one batch.
		var psBuf [walkFanout + 2]int
		ps := w.spread(psBuf[:0], lo, hi)
		ps = append(ps, hi)
		if first {
			ps = append(ps, 0)
		}
		w.probe(ps)
		if first {
			if w.nodes[0] == absent {
				return w.out, true
			}
			var one [1]holderEntry
			s := ix.entries(&ix.nodes[w.nodes[0]-1], &one)
			if len(s) > walkMaxAlive {
				return out, false
			}
			for _, e := range s {
				w.alive[w.nalive] = e.holder()
				w.nalive++
			}
			for _, a := range w.alive[:w.nalive] {
				if ix.holders[a].holes != 0 {
					return out, false
				}
			}
			if w.nalive == 0 {
				return w.out, true // unreachable: a leaf without holders is pruned
			}
			w.deepest = w.nodes[0]
		}
		if hi > lo {
			w.pieces(lo, hi, ps[:len(ps)-btoi(first)])
		}
		prevHi = hi
	}
	for _, a := range w.alive[:w.nalive] {
		w.out = ix.record(w.out, start, a, nb, bs)
	}
	if d := w.deepest; d != 0 {
		ix.touch(d - 1)
	}
	return w.out, true
}

// span handles local positions (a, b], both probed, a present.
func (w *walker) span(a, b int) {
	if w.done {
		return
	}
	nb := w.nodes[b]
	if nb != absent && w.ix.sameHolders(&w.ix.nodes[nb-1], &w.ix.nodes[w.nodes[a]-1]) {
		w.deepest = nb // no holder of interest drops out in (a, b]
		return
	}
	if b == a+1 {
		w.step(b)
		return
	}
	var psBuf [walkFanout + 1]int
	ps := w.spread(psBuf[:0], a, b)
	w.probe(ps)
	w.pieces(a, b, append(ps, b))
}

// spread appends up to 3 positions spread over (a, b), exclusive. A
// narrow fan-out measured best: over a large index each probe costs page
// walks, whose throughput, not latency, bounds a lookup.
func (w *walker) spread(ps []int, a, b int) []int {
	l := b - a
	k := min(l, walkFanout)
	for j := 1; j < k; j++ {
		ps = append(ps, a+l*j/k)
	}
	return ps
}

// pieces handles (a, b] split at the probed, increasing positions ps,
// the last of which is b.
func (w *walker) pieces(a, b int, ps []int) {
	x := a
	for _, y := range ps {
		if w.done {
			return
		}
		w.span(x, y)
		if w.nodes[y] == absent {
			return // w.span stopped the walk at or before y
		}
		x = y
	}
}

// step applies block b (a local position) after block b-1, as lookupLinear
// does for a block whose holder set differs from its parent's.
func (w *walker) step(b int) {
	ix := w.ix
	depth := w.base + b // query blocks before block b
	nb := w.nodes[b]
	if nb == absent {
		for _, a := range w.alive[:w.nalive] {
			w.out = ix.record(w.out, w.start, a, depth, w.bs)
		}
		w.nalive = 0
		w.done = true
		return
	}
	n := &ix.nodes[nb-1]
	mask := &w.mask
	var one [1]holderEntry
	s := ix.entries(n, &one)
	for _, e := range s {
		hh := e.holder()
		mask[hh>>6] |= 1 << (hh & 63)
	}
	k := 0
	for _, a := range w.alive[:w.nalive] {
		if mask[a>>6]&(1<<(a&63)) != 0 {
			w.alive[k] = a
			k++
		} else {
			w.out = ix.record(w.out, w.start, a, depth, w.bs)
		}
	}
	w.nalive = k
	for _, e := range s {
		mask[e.holder()>>6] = 0
	}
	if k == 0 {
		w.done = true
		return
	}
	w.deepest = nb
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
