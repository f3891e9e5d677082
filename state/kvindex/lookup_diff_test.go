package kvindex

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// refLookup is the straightforward reference for Lookup: for each tree of
// ns, hash the query block by block, find each block's node by a linear
// scan of the arena, and give every holder of the first block the number of
// leading blocks it holds without a gap; an engine's match is its deepest
// by tokens over ranks and trees. It also returns, per tree, the node
// Lookup must mark as used (index+1, 0 = none).
func refLookup(ix *Index, ns Namespace, q []uint32) ([]Match, []uint32) {
	byHash := map[uint64]uint32{}
	for i := range ix.nodes {
		if !ix.nodes[i].isFree() {
			byHash[ix.nodes[i].hash()] = uint32(i)
		}
	}
	holds := func(idx uint32, h uint16) bool {
		var one [1]holderEntry
		for _, e := range ix.entries(&ix.nodes[idx], &one) {
			if e.holder() == h {
				return true
			}
		}
		return false
	}
	var out []Match
	var marks []uint32
	for _, t := range ix.trees[ns] {
		nb := len(q) / t.blockSize
		var path []uint32
		p := t.seed
		for i := range nb {
			p = chain(p, contentHash(q[i*t.blockSize:(i+1)*t.blockSize]))
			idx, ok := byHash[p]
			if !ok {
				break
			}
			path = append(path, idx)
		}
		if len(path) == 0 {
			marks = append(marks, 0)
			continue
		}
		maxDepth := 0
		for hi := range ix.holders {
			h := uint16(hi)
			d := 0
			for d < len(path) && holds(path[d], h) {
				d++
			}
			if d == 0 {
				continue
			}
			maxDepth = max(maxDepth, d)
			e, tok := ix.holders[hi].id.Engine, int64(d)*int64(t.blockSize)
			j := slices.IndexFunc(out, func(m Match) bool { return m.Engine == e })
			if j < 0 {
				out = append(out, Match{Engine: e, Blocks: d, Tokens: tok, BlockSize: t.blockSize})
			} else if tok > out[j].Tokens {
				out[j] = Match{Engine: e, Blocks: d, Tokens: tok, BlockSize: t.blockSize}
			}
		}
		mark := uint32(0)
		if maxDepth > 0 {
			mark = path[maxDepth-1] + 1
		}
		marks = append(marks, mark)
	}
	slices.SortFunc(out, func(a, b Match) int { return int(a.Engine) - int(b.Engine) })
	return out, marks
}

// checkHoles verifies the hole bookkeeping: per-entry child counts, per
// holder pair counts, and that a holder with holes == 0 has none.
func checkHoles(t *testing.T, ix *Index) {
	t.Helper()
	type key struct {
		idx uint32
		h   uint16
	}
	kids := map[key]int{}
	pairs := map[uint16]int{}
	holes := map[uint16]int{}
	entries := func(idx uint32) []holderEntry {
		var one [1]holderEntry
		return slices.Clone(ix.entries(&ix.nodes[idx], &one))
	}
	for i := range ix.nodes {
		if ix.nodes[i].isFree() {
			continue
		}
		n := &ix.nodes[i]
		for _, e := range entries(uint32(i)) {
			pairs[e.holder()]++
			if n.parent == 0 {
				continue
			}
			if ix.entryOf(n.parent-1, e.holder()) != nil {
				kids[key{n.parent - 1, e.holder()}]++
			} else {
				holes[e.holder()]++
			}
		}
	}
	for i := range ix.holders {
		h := uint16(i)
		hs := &ix.holders[i]
		if hs.pairs != pairs[h] {
			t.Errorf("holder %d pairs %d, counted %d", h, hs.pairs, pairs[h])
		}
		if hs.holes == 0 && holes[h] != 0 {
			t.Errorf("holder %d has %d holes but holes == 0", h, holes[h])
		}
	}
	for i := range ix.nodes {
		if ix.nodes[i].isFree() {
			continue
		}
		for _, e := range entries(uint32(i)) {
			if ix.holders[e.holder()].holes != 0 {
				continue // counts are not relied on
			}
			got, want := int(e.kids()), kids[key{uint32(i), e.holder()}]
			if got != want && (got != maxKids || want < maxKids) {
				t.Errorf("node %d holder %d kids %d, counted %d", i, e.holder(), got, want)
			}
		}
	}
}

// TestLookupDifferential builds random indexes (stores of chains that
// share prefixes, removes of single and middle blocks, tier changes,
// clears, engine removals, LRU evictions, snapshot round trips) over
// several holders and block sizes, and checks every Lookup, on both the
// fast and the linear path, against refLookup.
func TestLookupDifferential(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	fastQueries := 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 99))
		cfg := Config{MaxNodes: []int{0, 30, 200}[seed%3]}
		ix, _ := New(cfg)
		names := slots.NewTable()
		for e := range 4 {
			names.Intern("engine-" + itoa(e))
		}
		const nprompts = 6
		// Prompts share prefixes: prompt p starts with prompt p/2's first
		// blocks, so chains branch.
		prompts := make([][]uint32, nprompts)
		for p := range prompts {
			n := 4 + r.IntN(60)
			prompts[p] = make([]uint32, n*4)
			for i := range prompts[p] {
				prompts[p][i] = uint32(r.IntN(3) + p*1000 + i*7)
			}
			if p > 0 {
				copy(prompts[p], prompts[p/2][:min(len(prompts[p/2]), 4*(1+r.IntN(n)))])
			}
		}
		// Each holder remembers which engine hashes it stored for which
		// (prompt, block), to remove them later.
		type stored struct {
			hash  uint64
			bsz   int
			block int
		}
		held := map[Holder][]stored{}
		nextHash := uint64(1)
		holders := []Holder{{1, 0}, {1, 1}, {2, 0}, {3, 0}, {3, 2}}
		query := func() {
			p := prompts[r.IntN(nprompts)]
			q := p[:r.IntN(len(p)+1)]
			if r.IntN(4) == 0 && len(q) > 8 {
				q = slices.Clone(q)
				q[r.IntN(len(q))] ^= 1 << 20 // diverge somewhere
			}
			want, marks := refLookup(ix, nsA, q)
			for i := range ix.usageBits {
				atomic.StoreUint64(&ix.usageBits[i], 0)
			}
			got := lookup(ix, nsA, q)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("seed %d: Lookup mismatch (-ref +got):\n%s", seed, diff)
			}
			for _, m := range marks {
				if m != 0 && ix.usage(m-1) == 0 {
					t.Fatalf("seed %d: Lookup did not mark node %d as used", seed, m-1)
				}
			}
			// The linear path agrees too, and the fast path whenever it
			// takes the query.
			for _, tr := range ix.trees[nsA] {
				lin := ix.lookupLinear(tr, q, nil, 0)
				var w walker
				fast, ok := w.run(ix, tr, q, nil, 0)
				if ok {
					fastQueries++
					sortM := func(m []Match) []Match {
						slices.SortFunc(m, func(a, b Match) int { return int(a.Engine) - int(b.Engine) })
						return m
					}
					if diff := cmp.Diff(sortM(lin), sortM(fast)); diff != "" {
						t.Fatalf("seed %d: fast path differs from linear (-linear +fast):\n%s", seed, diff)
					}
				}
			}
		}
		for range 400 {
			hd := holders[r.IntN(len(holders))]
			switch op := r.IntN(20); {
			case op < 9: // store a run of a prompt's blocks, from the root or continuing
				p := r.IntN(nprompts)
				bsz := 4
				if seed%4 == 3 && r.IntN(3) == 0 {
					bsz = 8 // a second tree
				}
				nb := len(prompts[p]) / bsz
				from := 0
				var parent uint64
				hasParent := false
				if hs := held[hd]; len(hs) > 0 && r.IntN(2) == 0 {
					// continue after a block this holder stored (it may
					// since have been removed or evicted: ErrUnknownParent)
					s := hs[r.IntN(len(hs))]
					if s.bsz == bsz && s.block+1 < nb {
						from, parent, hasParent = s.block+1, s.hash, true
					}
				}
				to := from + 1 + r.IntN(min(nb-from, 12))
				if to > nb {
					to = nb
				}
				hashes := make([]uint64, to-from)
				for i := range hashes {
					if r.IntN(30) == 0 && len(held[hd]) > 0 {
						hashes[i] = held[hd][r.IntN(len(held[hd]))].hash // engine hash reuse
					} else {
						hashes[i] = nextHash
						nextHash++
					}
				}
				ev := &kvevents.BlockStored{BlockHashes: hashes, ParentHash: parent, HasParent: hasParent,
					TokenIDs: prompts[p][from*bsz : to*bsz], BlockSize: bsz, Medium: kvevents.Medium(r.IntN(3))}
				if ix.Store(hd, nsA, ev) == nil {
					for i, h := range hashes {
						held[hd] = append(held[hd], stored{h, bsz, from + i})
					}
				}
			case op < 14: // remove one block (often a middle one), maybe one tier
				hs := held[hd]
				if len(hs) == 0 {
					continue
				}
				s := hs[r.IntN(len(hs))]
				ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: []uint64{s.hash}, AllTiers: r.IntN(3) > 0, Medium: kvevents.Medium(r.IntN(3))})
			case op < 15: // remove a holder's tail run, leaf first (the common engine pattern)
				hs := held[hd]
				k := min(len(hs), 1+r.IntN(6))
				var bh []uint64
				for i := len(hs) - 1; i >= len(hs)-k; i-- {
					bh = append(bh, hs[i].hash)
				}
				ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: bh, AllTiers: true})
			case op < 16:
				ix.Clear(hd)
				delete(held, hd)
			case op < 17 && r.IntN(3) == 0:
				ix.RemoveEngine(hd.Engine)
				for _, o := range holders {
					if o.Engine == hd.Engine {
						delete(held, o)
					}
				}
			case op < 18 && seed%2 == 0 && r.IntN(4) == 0: // snapshot round trip
				var buf bytes.Buffer
				if err := ix.WriteSnapshot(&buf, names); err != nil {
					t.Fatal(err)
				}
				re, err := ReadSnapshot(&buf, cfg, names)
				if err != nil {
					// Orphaned entries of a removed engine are an existing
					// limitation of the format; keep the live index then.
					continue
				}
				if re.Digest() != ix.Digest() {
					t.Fatalf("seed %d: snapshot round trip changed the digest", seed)
				}
				ix = re
			default:
				query()
			}
			checkHoles(t, ix)
			if t.Failed() {
				t.Fatalf("seed %d: bookkeeping broken", seed)
			}
		}
		for range 20 {
			query()
		}
		checkInvariants(t, ix)
	}
	if fastQueries < 1000 {
		t.Errorf("only %d queries took the fast path", fastQueries)
	}
	t.Logf("%d queries on the fast path", fastQueries)
}

// TestLookupLongQuery covers queries longer than one walk window, with
// holder sets changing inside and across windows.
func TestLookupLongQuery(t *testing.T) {
	ix, _ := New(Config{})
	q := make([]uint32, 1500*4)
	for i := range q {
		q[i] = uint32(i*31 + 7)
	}
	hashes := func(base, n int) []uint64 {
		h := make([]uint64, n)
		for i := range h {
			h[i] = uint64(base + i)
		}
		return h
	}
	for k, n := range []int{1500, 1200, 513, 512, 511, 1024, 1025, 3, 1} {
		hd := Holder{Engine: slots.Slot(k)}
		if err := ix.Store(hd, nsA, &kvevents.BlockStored{BlockHashes: hashes(k<<20, n), TokenIDs: q[:n*4], BlockSize: 4}); err != nil {
			t.Fatal(err)
		}
	}
	for _, qb := range []int{1500, 1499, 1025, 1024, 1023, 700, 513, 512, 511, 2, 1} {
		want, _ := refLookup(ix, nsA, q[:qb*4])
		if diff := cmp.Diff(want, lookup(ix, nsA, q[:qb*4])); diff != "" {
			t.Errorf("%d-block query mismatch (-ref +got):\n%s", qb, diff)
		}
	}
	checkHoles(t, ix)
}

// TestHashChain checks the unrolled query hashing against Store's
// block-by-block hashing, and a 16-token-block differential lookup.
func TestHashChain(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// Lengths around the 32-block chunks Store and Lookup hash at a time, and
	// block sizes of one chunk or more.
	for _, bsz := range []int{1, 3, 4, 8, 15, 16, 17, 32, 100, 512, 700} {
		for _, nb := range []int{0, 1, 2, 31, 32, 33, 40, 64, 129, 513, 1030} {
			if nb*bsz > 1<<20 {
				continue
			}
			toks := make([]uint32, nb*bsz, nb*bsz+r.IntN(3)) // the prefetch may look past the end
			for i := range toks {
				toks[i] = r.Uint32()
			}
			dst := make([]uint64, nb)
			last := hashBlocks(dst, 12345, toks, bsz)
			p := uint64(12345)
			for i := range nb {
				p = chain(p, contentHash(toks[i*bsz:(i+1)*bsz]))
				if dst[i] != p {
					t.Fatalf("block size %d, %d blocks, block %d: hashBlocks %x, want %x", bsz, nb, i, dst[i], p)
				}
			}
			if last != p {
				t.Fatalf("block size %d, %d blocks: hashBlocks returned %x, want %x", bsz, nb, last, p)
			}
		}
	}
	// The hash's values are fixed: snapshots, and other processes, hold
	// them. A faster hash must keep this value or bump the snapshot version.
	golden := make([]uint32, 64)
	for i := range golden {
		golden[i] = uint32(i*2654435761) ^ 0x5bd1e995
	}
	var g [4]uint64
	if got := hashBlocks(g[:], 1, golden, 16); got != 0xcfa74253912595c9 {
		t.Fatalf("the block hash of the fixed sequence changed: %#x; every snapshot written before would mismatch", got)
	}
	ix, _ := New(Config{})
	q := seqTokens(1, 300)
	for k, n := range []int{300, 150, 150, 40} {
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = uint64(k<<20 | i)
		}
		if err := ix.Store(Holder{Engine: slots.Slot(k)}, nsA, &kvevents.BlockStored{BlockHashes: hs, TokenIDs: q[:n*benchBS], BlockSize: benchBS}); err != nil {
			t.Fatal(err)
		}
	}
	ix.Remove(Holder{Engine: 2}, &kvevents.BlockRemoved{BlockHashes: []uint64{2<<20 | 100}, AllTiers: true})
	for _, n := range []int{300, 299, 151, 150, 101, 100, 41, 1} {
		want, _ := refLookup(ix, nsA, q[:n*benchBS])
		if diff := cmp.Diff(want, lookup(ix, nsA, q[:n*benchBS])); diff != "" {
			t.Errorf("%d-block query mismatch (-ref +got):\n%s", n, diff)
		}
	}
}

// TestHashBlocks16 checks the 16-token block hash this CPU runs (the
// assembly on amd64 with BMI2) against the Go loop, at every word
// alignment of the token ids and lengths around one block.
func TestHashBlocks16(t *testing.T) {
	if !hasHashAsm {
		t.Log("this CPU runs the Go loop; the check compares it with itself")
	}
	r := rand.New(rand.NewPCG(7, 8))
	buf := make([]uint32, 1030*16+3)
	for i := range buf {
		buf[i] = r.Uint32()
	}
	buf[5] = ^uint32(0) // the largest id, in a block of every alignment's first
	for off := range 3 {
		for _, nb := range []int{0, 1, 2, 3, 31, 32, 33, 512, 1030} {
			checkHash16(t, 99, buf[off:off+nb*16], off)
		}
	}
}

// FuzzHashBlocks16 checks the 16-token block hash this CPU runs against
// the Go loop on arbitrary token ids, chain seeds and alignments.
func FuzzHashBlocks16(f *testing.F) {
	f.Add(uint64(1), uint8(0), []byte("sixteen tokens of four bytes each make one block of sixty-four bytes"))
	f.Add(^uint64(0), uint8(3), make([]byte, 64*33))
	f.Fuzz(func(t *testing.T, prev uint64, off uint8, data []byte) {
		o := int(off % 4)
		toks := make([]uint32, o+len(data)/4)[o:]
		for i := range toks {
			toks[i] = binary.LittleEndian.Uint32(data[4*i:])
		}
		checkHash16(t, prev, toks, o)
	})
}

// checkHash16 compares hashBlocks16 with hashBlocks16Go over the whole
// blocks of toks, which start at word offset off of their allocation.
func checkHash16(t *testing.T, prev uint64, toks []uint32, off int) {
	t.Helper()
	nb := len(toks) / 16
	got, want := make([]uint64, nb), make([]uint64, nb)
	if gl, wl := hashBlocks16(got, prev, toks), hashBlocks16Go(want, prev, toks); gl != wl {
		t.Fatalf("%d blocks at offset %d: last %#x, want %#x", nb, off, gl, wl)
	}
	for i := range nb {
		if got[i] != want[i] {
			t.Fatalf("%d blocks at offset %d, block %d: %#x, want %#x", nb, off, i, got[i], want[i])
		}
	}
}
