package kvindex

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

const bs = 4

var nsA = Namespace{Model: "m"}

// toks returns n blocks of tokens; block i of stream s has distinct ids.
func toks(s, n int) []uint32 {
	out := make([]uint32, 0, n*bs)
	for i := range n * bs {
		out = append(out, uint32(s*100000+i))
	}
	return out
}

func stored(hashes []uint64, parent uint64, hasParent bool, tokens []uint32, m kvevents.Medium) *kvevents.BlockStored {
	return &kvevents.BlockStored{BlockHashes: hashes, ParentHash: parent, HasParent: hasParent, TokenIDs: tokens, BlockSize: bs, Medium: m}
}

func h(e slots.Slot, r int32) Holder { return Holder{Engine: e, Rank: r} }

func grouped(ev *kvevents.BlockStored, g int32) *kvevents.BlockStored { ev.Group = g; return ev }

func eagle(ev *kvevents.BlockStored) *kvevents.BlockStored { ev.Lookahead = true; return ev }

func removeGroup(hd Holder, hashes []uint64, g int32) op {
	return func(t *testing.T, ix *Index) {
		ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: hashes, AllTiers: true, Group: g})
	}
}

// op is one step of a scenario.
type op func(t *testing.T, ix *Index)

func store(hd Holder, ns Namespace, ev *kvevents.BlockStored, wantErr error) op {
	return func(t *testing.T, ix *Index) {
		t.Helper()
		if err := ix.Store(hd, ns, ev); !errors.Is(err, wantErr) {
			t.Fatalf("Store(%v) = %v, want %v", hd, err, wantErr)
		}
	}
}

func remove(hd Holder, hashes []uint64, m kvevents.Medium, all bool) op {
	return func(t *testing.T, ix *Index) {
		ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: hashes, Medium: m, AllTiers: all})
	}
}

func lookup(ix *Index, ns Namespace, q []uint32) []Match {
	got := ix.Lookup(ns, q, nil)
	slices.SortFunc(got, func(a, b Match) int { return int(a.Engine) - int(b.Engine) })
	return got
}

func TestIndex(t *testing.T) {
	full := toks(1, 4) // blocks 0..3 of stream 1
	tests := []struct {
		name      string
		cfg       Config
		ops       []op
		ns        Namespace
		query     []uint32
		want      []Match
		wantNodes int
		wantPairs int
	}{
		{
			name:  "one engine, whole chain in two events",
			ops:   []op{store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], 0), nil), store(h(1, 0), nsA, stored([]uint64{12, 13}, 11, true, full[8:], 0), nil)},
			query: full, want: []Match{{Engine: 1, Blocks: 4, Tokens: 16, BlockSize: bs}}, wantNodes: 4, wantPairs: 4,
		},
		{
			name: "depth per engine, max over ranks",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], 0), nil),
				store(h(1, 1), nsA, stored([]uint64{20, 21, 22}, 0, false, full[:12], 0), nil),
				store(h(2, 0), nsA, stored([]uint64{30}, 0, false, full[:4], 0), nil),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 3, Tokens: 12, BlockSize: bs}, {Engine: 2, Blocks: 1, Tokens: 4, BlockSize: bs}},
			wantNodes: 3, wantPairs: 6,
		},
		{
			name:  "query diverges after two blocks",
			ops:   []op{store(h(1, 0), nsA, stored([]uint64{10, 11, 12, 13}, 0, false, full, 0), nil)},
			query: append(slices.Clone(full[:8]), toks(9, 2)...), want: []Match{{Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}},
			wantNodes: 4, wantPairs: 4,
		},
		{
			name:  "partial query block is not matched",
			ops:   []op{store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], 0), nil)},
			query: full[:7], want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 2, wantPairs: 2,
		},
		{
			name: "holder gap ends its depth",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11, 12}, 0, false, full[:12], 0), nil),
				store(h(2, 0), nsA, stored([]uint64{20, 21, 22}, 0, false, full[:12], 0), nil),
				remove(h(1, 0), []uint64{11}, 0, true),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}, {Engine: 2, Blocks: 3, Tokens: 12, BlockSize: bs}},
			wantNodes: 3, wantPairs: 5,
		},
		{
			name: "namespaces do not collide",
			ops: []op{
				store(h(1, 0), Namespace{Model: "m", LoRA: "a"}, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				store(h(2, 0), Namespace{Model: "m", CacheSalt: "s"}, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				store(h(3, 0), Namespace{Model: "other"}, stored([]uint64{10}, 0, false, full[:4], 0), nil),
			},
			ns: Namespace{Model: "m", LoRA: "a"}, query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}},
			wantNodes: 3, wantPairs: 3,
		},
		{
			name:  "unknown parent indexes nothing",
			ops:   []op{store(h(1, 0), nsA, stored([]uint64{11}, 99, true, full[4:8], 0), ErrUnknownParent)},
			query: full, want: nil, wantNodes: 0, wantPairs: 0,
		},
		{
			name: "parent known to another holder only is unknown",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				store(h(2, 0), nsA, stored([]uint64{11}, 10, true, full[4:8], 0), ErrUnknownParent),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "unknown medium is kept in a tier of its own",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10}, 0, false, full[:4], kvevents.MediumUnknown), nil),
				store(h(1, 0), nsA, stored([]uint64{11}, 10, true, full[4:8], kvevents.MediumGPU), nil),
				remove(h(1, 0), []uint64{11}, kvevents.MediumGPU, false),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "removal of an unknown medium clears that tier",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10}, 0, false, full[:4], kvevents.MediumUnknown), nil),
				remove(h(1, 0), []uint64{10}, kvevents.MediumUnknown, false),
			},
			query: full, want: nil,
		},
		{
			name: "groups: a removal in one group keeps what another group holds",
			ops: []op{
				store(h(1, 0), nsA, grouped(stored([]uint64{10, 11, 12}, 0, false, full[:12], 0), 0), nil),
				store(h(1, 0), nsA, grouped(stored([]uint64{10, 11, 12}, 0, false, full[:12], 0), 1), nil),
				removeGroup(h(1, 0), []uint64{10, 11, 12}, 1),
				removeGroup(h(1, 0), []uint64{12}, 0),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}}, wantNodes: 2, wantPairs: 2,
		},
		{
			name: "groups: a block goes when the last group holding it removes it",
			ops: []op{
				store(h(1, 0), nsA, grouped(stored([]uint64{10, 11}, 0, false, full[:8], 0), 0), nil),
				store(h(1, 0), nsA, grouped(stored([]uint64{10, 11}, 0, false, full[:8], 0), 2), nil),
				removeGroup(h(1, 0), []uint64{11}, 0),
				removeGroup(h(1, 0), []uint64{11}, 3), // group 3 never held it
				removeGroup(h(1, 0), []uint64{11}, 2),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "groups: a sparse event excludes its group and drops what only it held",
			ops: []op{
				store(h(1, 0), nsA, grouped(stored([]uint64{10, 11}, 0, false, full[:8], 0), 0), nil),
				store(h(1, 0), nsA, grouped(stored([]uint64{10, 11, 12}, 0, false, full[:12], 0), 1), nil),
				store(h(1, 0), nsA, &kvevents.BlockStored{BlockHashes: []uint64{13}, ParentHash: 12, HasParent: true, BlockSize: bs, Group: 1, Sparse: true}, ErrGroupNotIndexed),
				store(h(1, 0), nsA, grouped(stored([]uint64{12}, 11, true, full[8:12], 0), 1), ErrGroupNotIndexed),
				removeGroup(h(1, 0), []uint64{10}, 1), // an excluded group's removal changes nothing
			},
			query: full, want: []Match{{Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}}, wantNodes: 2, wantPairs: 2,
		},
		{
			name: "groups: a sparse event of the only group is ignored and excludes nothing",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], 0), nil),
				store(h(1, 0), nsA, &kvevents.BlockStored{BlockHashes: []uint64{13}, ParentHash: 11, HasParent: true, BlockSize: bs, Sparse: true}, ErrGroupNotIndexed),
				store(h(1, 0), nsA, stored([]uint64{12}, 11, true, full[8:12], 0), nil),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 3, Tokens: 12, BlockSize: bs}}, wantNodes: 3, wantPairs: 3,
		},
		{
			name: "groups: a declared sliding-window group is not indexed",
			ops: []op{
				store(h(1, 0), nsA, &kvevents.BlockStored{BlockHashes: []uint64{10}, TokenIDs: full[:4], BlockSize: bs, Group: 1,
					GroupKind: kvevents.GroupKindWindowed}, ErrGroupNotIndexed),
				store(h(1, 0), nsA, grouped(stored([]uint64{10}, 0, false, full[:4], 0), 1), ErrGroupNotIndexed),
			},
			query: full, want: nil,
		},
		{
			name: "eagle: the last matched block is not counted",
			ops: []op{
				store(h(1, 0), nsA, eagle(stored([]uint64{10, 11, 12}, 0, false, full[:12], 0)), nil),
				store(h(2, 0), nsA, stored([]uint64{20, 21, 22}, 0, false, full[:12], 0), nil),
			},
			query: full[:12], want: []Match{{Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}, {Engine: 2, Blocks: 3, Tokens: 12, BlockSize: bs}},
			wantNodes: 3, wantPairs: 6,
		},
		{
			name: "remove one tier keeps the block",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], kvevents.MediumGPU), nil),
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], kvevents.MediumCPU), nil),
				remove(h(1, 0), []uint64{10, 11}, kvevents.MediumGPU, false),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}}, wantNodes: 2, wantPairs: 2,
		},
		{
			name: "remove without medium clears all tiers and prunes the chain",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], kvevents.MediumGPU), nil),
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], kvevents.MediumDisk), nil),
				remove(h(1, 0), []uint64{11, 10}, 0, true),
			},
			query: full, want: nil, wantNodes: 0, wantPairs: 0,
		},
		{
			name: "prune cascades through holderless parents only",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11, 12}, 0, false, full[:12], 0), nil),
				store(h(2, 0), nsA, stored([]uint64{20}, 0, false, full[:4], 0), nil),
				remove(h(1, 0), []uint64{10, 11}, 0, true), // interior blocks lose their holder but keep a child
				remove(h(1, 0), []uint64{12}, 0, true),     // leaf goes, then 11, then 10 keeps engine 2
			},
			query: full, want: []Match{{Engine: 2, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "clear drops a holder everywhere",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], 0), nil),
				store(h(1, 1), nsA, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				func(t *testing.T, ix *Index) { ix.Clear(h(1, 0)) },
			},
			query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "remove engine drops every rank",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10, 11}, 0, false, full[:8], 0), nil),
				store(h(1, 3), nsA, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				store(h(2, 0), nsA, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				func(t *testing.T, ix *Index) { ix.RemoveEngine(1) },
			},
			query: full, want: []Match{{Engine: 2, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "sglang short last page is not indexed",
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{10}, 0, false, full[:4], 0), nil),
				store(h(1, 0), nsA, &kvevents.BlockStored{BlockHashes: []uint64{11}, ParentHash: 10, HasParent: true, TokenIDs: full[4:6], BlockSize: 2}, nil),
				store(h(1, 0), nsA, stored([]uint64{12}, 11, true, full[4:8], 0), ErrUnknownParent),
			},
			query: full, want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 1, wantPairs: 1,
		},
		{
			name: "lru evicts the coldest leaf, lookups give a second chance",
			cfg:  Config{MaxNodes: 3},
			ops: []op{
				store(h(1, 0), nsA, stored([]uint64{1}, 0, false, toks(1, 1), 0), nil),
				store(h(1, 0), nsA, stored([]uint64{2}, 0, false, toks(2, 1), 0), nil),
				store(h(1, 0), nsA, stored([]uint64{3}, 0, false, toks(3, 1), 0), nil),
				func(t *testing.T, ix *Index) { ix.Lookup(nsA, toks(1, 1), nil) },      // touch stream 1
				store(h(1, 0), nsA, stored([]uint64{4}, 0, false, toks(4, 1), 0), nil), // evicts stream 2
				func(t *testing.T, ix *Index) {
					for s, want := range map[int]int{1: 1, 2: 0, 3: 1, 4: 1} {
						if got := len(ix.Lookup(nsA, toks(s, 1), nil)); got != want {
							t.Errorf("after eviction, stream %d matches %d engines, want %d", s, got, want)
						}
					}
					if st := ix.Stats(); st.Evictions != 1 {
						t.Errorf("Stats().Evictions = %d, want 1", st.Evictions)
					}
					// Removing the evicted block's engine hash is a no-op.
					ix.Remove(h(1, 0), &kvevents.BlockRemoved{BlockHashes: []uint64{2}, AllTiers: true})
				},
			},
			query: toks(1, 1), want: []Match{{Engine: 1, Blocks: 1, Tokens: 4, BlockSize: bs}}, wantNodes: 3, wantPairs: 3,
		},
		{
			name:  "lru never evicts the chain being stored",
			cfg:   Config{MaxNodes: 2},
			ops:   []op{store(h(1, 0), nsA, stored([]uint64{10, 11, 12, 13}, 0, false, full, 0), nil)},
			query: full, want: []Match{{Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}}, wantNodes: 2, wantPairs: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.ops {
				o(t, ix)
			}
			ns := tc.ns
			if ns == (Namespace{}) {
				ns = nsA
			}
			if diff := cmp.Diff(tc.want, lookup(ix, ns, tc.query)); diff != "" {
				t.Errorf("Lookup(...) mismatch (-want +got):\n%s", diff)
			}
			st := ix.Stats()
			if st.Nodes != tc.wantNodes || st.Pairs != tc.wantPairs {
				t.Errorf("Stats() nodes %d pairs %d, want %d %d", st.Nodes, st.Pairs, tc.wantNodes, tc.wantPairs)
			}
			checkInvariants(t, ix)
		})
	}
}

// checkInvariants verifies the structure against a recount.
func checkInvariants(t *testing.T, ix *Index) {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	listed := map[uint32]bool{}
	for _, l := range [][]uint32{ix.free, ix.limbo} {
		for _, f := range l {
			if listed[f] || !ix.nodes[f].isFree() {
				t.Errorf("free slot %d listed twice or not free", f)
			}
			listed[f] = true
		}
	}
	if len(ix.limbo) > 0 && ix.nstale == 0 && len(ix.free) > 0 {
		t.Errorf("%d slots in limbo with no holder marked stale", len(ix.limbo))
	}
	children := map[uint32]uint32{}
	live, pairs := 0, 0
	holderPairs := map[uint16]int{}
	for i := range ix.nodes {
		n := &ix.nodes[i]
		if n.isFree() {
			if !listed[uint32(i)] {
				t.Errorf("free node %d is in neither the free list nor limbo", i)
			}
			if ix.leafBits[i>>6]&(1<<(i&63)) != 0 {
				t.Errorf("free node %d is marked a leaf", i)
			}
			continue
		}
		live++
		if n.parent != 0 {
			children[n.parent-1]++
		}
		if idx, ok := ix.table.get(ix.nodes, n.hash()); !ok || idx != uint32(i) {
			t.Errorf("node %d not found under its hash", i)
		}
		var fp uint64
		var one [1]holderEntry
		es := ix.entries(n, &one)
		for _, e := range es {
			pairs++
			holderPairs[e.holder()]++
			fp ^= holderBit(e.holder())
		}
		if n.spilled() && len(es) < 2 {
			t.Errorf("node %d spills %d holders", i, len(es))
		}
		if fp != ix.hset(n) {
			t.Errorf("node %d holder fingerprint stale", i)
		}
	}
	for i := range ix.nodes {
		n := &ix.nodes[i]
		if n.isFree() {
			continue
		}
		if n.nchild != children[uint32(i)] {
			t.Errorf("node %d nchild %d, counted %d", i, n.nchild, children[uint32(i)])
		}
		if leaf := ix.leafBits[i>>6]&(1<<(i&63)) != 0; leaf != (n.nchild == 0) {
			t.Errorf("node %d leaf bit %v with %d children", i, leaf, n.nchild)
		}
		if n.nchild == 0 && n.h0 == 0 {
			t.Errorf("node %d has neither holders nor children but was not pruned", i)
		}
	}
	nstale := 0
	for i := range ix.holders {
		hs := &ix.holders[i]
		if hs.pairs != holderPairs[uint16(i)] {
			t.Errorf("holder %d (%v, live %v): pairs counter %d, %d entries on nodes", i, hs.id, hs.live, hs.pairs, holderPairs[uint16(i)])
		}
		if hs.stale {
			nstale++
		}
		hs.groups.each(func(k, m uint64) {
			if _, ok := hs.refs.get(k); !ok || m == 1 || m == 0 {
				t.Errorf("holder %d: group set %b for engine hash %x (in refs: %v)", i, m, k, ok)
			}
		})
		// A holder not marked stale names only blocks it holds, so no slot
		// a reference names is ever reused under it.
		hs.refs.each(func(k uint64, r uint32) {
			if _, ok := ix.deref(r, uint16(i)); !ok && !hs.stale {
				t.Errorf("holder %d (not stale): engine hash %x names node %d, which it does not hold", i, k, r-1)
			}
		})
	}
	if nstale != ix.nstale {
		t.Errorf("%d holders marked stale, counter %d", nstale, ix.nstale)
	}
	if live != ix.live || ix.table.n != live || pairs != ix.pairs {
		t.Errorf("live %d (counter %d, table %d), pairs %d (counter %d)", live, ix.live, ix.table.n, pairs, ix.pairs)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	names := slots.NewTable()
	e1, e2 := names.Intern("engine-a"), names.Intern("engine-b")
	build := func(ix *Index, from, to int) {
		for s := from; s < to; s++ {
			hd := h([]slots.Slot{e1, e2}[s%2], int32(s%3))
			hashes := []uint64{uint64(s) << 8, uint64(s)<<8 | 1, uint64(s)<<8 | 2}
			ev := stored(hashes, 0, false, append(toks(0, 1), toks(s, 2)...), kvevents.Medium(s%3))
			if s%13 == 0 {
				ev.Medium = kvevents.MediumUnknown
			}
			ev.Lookahead = s%11 == 0
			if err := ix.Store(hd, nsA, ev); err != nil {
				t.Fatal(err)
			}
			if s%4 == 1 { // a second KV-cache group holds the same blocks
				if err := ix.Store(hd, nsA, grouped(stored(hashes, 0, false, ev.TokenIDs, 0), 1)); err != nil && !errors.Is(err, ErrGroupNotIndexed) {
					t.Fatal(err)
				}
			}
			if s%7 == 0 {
				ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: hashes[1:], AllTiers: true, Group: 1})
			}
			if s == 150 { // group 1 of this holder turns out to be a sliding window
				_ = ix.Store(hd, nsA, &kvevents.BlockStored{BlockHashes: hashes[:1], BlockSize: bs, Group: 1, Sparse: true})
			}
			if s%5 == 0 {
				ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(s)<<8 | 2}, AllTiers: true})
			}
			if s%17 == 0 {
				ix.Clear(hd)
			}
		}
	}
	cfg := Config{MaxNodes: 40}
	full, _ := New(cfg)
	build(full, 0, 200)
	half, _ := New(cfg)
	build(half, 0, 100)
	var buf bytes.Buffer
	if err := half.WriteSnapshot(&buf, names); err != nil {
		t.Fatal(err)
	}
	snap := buf.Bytes()
	restored, err := ReadSnapshot(bytes.NewReader(snap), cfg, names)
	if err != nil {
		t.Fatalf("ReadSnapshot() error: %v", err)
	}
	if restored.Digest() != half.Digest() {
		t.Errorf("restored Digest() %x, want %x", restored.Digest(), half.Digest())
	}
	checkInvariants(t, restored)
	build(restored, 100, 200)
	if restored.Digest() != full.Digest() {
		t.Errorf("restore+replay Digest() %x, full replay %x", restored.Digest(), full.Digest())
	}
	if full.Stats().Evictions == 0 {
		t.Error("test does not exercise eviction")
	}
	if diff := cmp.Diff(lookup(full, nsA, append(toks(0, 1), toks(198, 2)...)), lookup(restored, nsA, append(toks(0, 1), toks(198, 2)...))); diff != "" {
		t.Errorf("Lookup after restore+replay mismatch (-full +restored):\n%s", diff)
	}

	t.Run("corrupt", func(t *testing.T) {
		cases := map[string][]byte{"empty": nil, "truncated": snap[:len(snap)/2], "no checksum": snap[:len(snap)-4], "trailing": append(slices.Clone(snap), 0)}
		for _, off := range []int{0, 9, len(snap) / 3, len(snap) / 2, len(snap) - 1} {
			b := slices.Clone(snap)
			b[off] ^= 0x40
			cases["flip byte "+string(rune('0'+off%10))+"@"+itoa(off)] = b
		}
		for name, b := range cases {
			ix, err := ReadSnapshot(bytes.NewReader(b), cfg, names)
			if !errors.Is(err, ErrCorruptSnapshot) || ix != nil {
				t.Errorf("ReadSnapshot(%s) = %v, %v; want nil, ErrCorruptSnapshot", name, ix, err)
			}
		}
	})
	t.Run("too many nodes for cap", func(t *testing.T) {
		if _, err := ReadSnapshot(bytes.NewReader(snap), Config{MaxNodes: 10}, names); err == nil {
			t.Error("ReadSnapshot into a smaller cap succeeded")
		}
	})
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

func TestConcurrentReadersAndWriters(t *testing.T) {
	ix, _ := New(Config{MaxNodes: 500})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				hd := h(slots.Slot(w), int32(i%2))
				s := i % 50
				_ = ix.Store(hd, nsA, stored([]uint64{uint64(s), uint64(s) + 1000}, 0, false, append(toks(0, 1), toks(s+1, 1)...), 0))
				switch i % 7 {
				case 3:
					ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(s) + 1000}, AllTiers: true})
				case 5:
					ix.Clear(hd)
				case 6:
					if i%140 == 6 {
						ix.RemoveEngine(slots.Slot(w))
					}
				}
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []Match
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				out = ix.Lookup(nsA, append(toks(0, 1), toks(i%50+1, 1)...), out[:0])
				for _, m := range out {
					if m.Blocks < 1 || m.Blocks > 2 || m.Engine > 2 {
						t.Errorf("Lookup returned %+v", m)
						return
					}
				}
				_ = ix.Stats()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		var buf bytes.Buffer
		names := slots.NewTable()
		for _, id := range []string{"a", "b", "c"} {
			names.Intern(id)
		}
		var c *Index
		for range 20 {
			buf.Reset()
			if err := ix.WriteSnapshot(&buf, names); err != nil {
				t.Error(err)
			}
			_ = ix.Digest()
			// A copy taken while lookups set reference bits is consistent.
			c = ix.CloneInto(c)
			checkInvariants(t, c)
		}
		close(done)
	}()
	<-done
	// writers finish, then readers stop
	wgWriters := make(chan struct{})
	go func() { wg.Wait(); close(wgWriters) }()
	close(stop)
	<-wgWriters
	checkInvariants(t, ix)
}

// TestGroupMemory: a single-group engine (group_idx 0 or none) adds no
// per-hash group sets, and a second group's sets go once it is excluded,
// so only a hybrid model's holder pays for groups.
func TestGroupMemory(t *testing.T) {
	ix, _ := New(Config{})
	one, two := h(1, 0), h(2, 0)
	for s := range 50 {
		hashes := []uint64{uint64(s)<<8 | 1, uint64(s)<<8 | 2}
		for _, hd := range []Holder{one, two} {
			if err := ix.Store(hd, nsA, stored(hashes, 0, false, toks(s, 2), 0)); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.Store(two, nsA, grouped(stored(hashes, 0, false, toks(s, 2), 0), 1)); err != nil {
			t.Fatal(err)
		}
	}
	groupSets := func(hd Holder) int { return ix.holders[ix.holderIdx[hd]].groups.n }
	if n := groupSets(one); n != 0 {
		t.Errorf("single-group holder has %d group sets, want 0", n)
	}
	if n := groupSets(two); n != 100 {
		t.Errorf("two-group holder has %d group sets, want 100", n)
	}
	_ = ix.Store(two, nsA, &kvevents.BlockStored{BlockHashes: []uint64{1}, BlockSize: bs, Group: 1, Sparse: true})
	if n := groupSets(two); n != 0 {
		t.Errorf("after excluding group 1: %d group sets, want 0", n)
	}
	if got := lookup(ix, nsA, toks(7, 2)); len(got) != 2 || got[1].Blocks != 2 {
		t.Errorf("Lookup after excluding group 1 = %+v, want both engines with 2 blocks", got)
	}
	checkInvariants(t, ix)
}

// TestOldSnapshotsStillRead: snapshots written by the index before format
// 3 (testdata/snapshot-v1.bin, before KV-cache groups, and
// testdata/snapshot-v2.bin, LRU list and generations; both of buildCompat's
// scenario) restore to the contents the old index had (its digests and
// lookups, recorded when the files were written), and version 2 to exactly
// what the same events build now; an unknown version is corrupt.
func TestOldSnapshotsStillRead(t *testing.T) {
	names := slots.NewTable()
	ix, _ := New(Config{})
	if err := buildCompat(ix, names); err != nil {
		t.Fatal(err)
	}
	q := append(toks(0, 1), toks(7, 2)...)
	for _, tc := range []struct {
		file   string
		digest uint64
		want   []Match
	}{
		// Version 1 has no groups: blocks group 1 alone held are held.
		{"testdata/snapshot-v1.bin", 0x80eb6253767952ca, []Match{{Engine: 0, Blocks: 3, Tokens: 12, BlockSize: bs}, {Engine: 1, Blocks: 3, Tokens: 12, BlockSize: bs}, {Engine: 2, Blocks: 1, Tokens: 4, BlockSize: bs}}},
		{"testdata/snapshot-v2.bin", 0x4acd5038073e9fa6, []Match{{Engine: 0, Blocks: 2, Tokens: 8, BlockSize: bs}, {Engine: 1, Blocks: 2, Tokens: 8, BlockSize: bs}, {Engine: 2, Blocks: 1, Tokens: 4, BlockSize: bs}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			restored, err := ReadSnapshot(bytes.NewReader(b), Config{}, names)
			if err != nil {
				t.Fatalf("ReadSnapshot(%s) error: %v", tc.file, err)
			}
			if got := restored.Digest(); got != tc.digest {
				t.Errorf("restored Digest() %x, want %x", got, tc.digest)
			}
			if diff := cmp.Diff(tc.want, lookup(restored, nsA, q)); diff != "" {
				t.Errorf("Lookup after restore mismatch (-want +got):\n%s", diff)
			}
			checkInvariants(t, restored)
			checkHoles(t, restored)
			b[len(snapshotMagic)] = 9
			if _, err := ReadSnapshot(bytes.NewReader(b), Config{}, names); !errors.Is(err, ErrCorruptSnapshot) {
				t.Errorf("ReadSnapshot(version 9) = %v, want ErrCorruptSnapshot", err)
			}
		})
	}
	if got := ix.Digest(); got != 0x4acd5038073e9fa6 {
		t.Errorf("buildCompat Digest() %x, want the version 2 snapshot's 4acd5038073e9fa6", got)
	}
}
