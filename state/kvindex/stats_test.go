package kvindex

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// TestEngineBlocks counts the blocks indexed per engine through stores (shared blocks, a
// second rank, a second tier), removals, the node cap's evictions, Clear and RemoveEngine,
// and checks each step against the index-wide pair count and the invariants.
func TestEngineBlocks(t *testing.T) {
	ix, err := New(Config{MaxNodes: 12})
	if err != nil {
		t.Fatal(err)
	}
	const e1, e2, e3 = slots.Slot(1), slots.Slot(2), slots.Slot(3)
	var got []int
	step := func(what string, want []int) {
		t.Helper()
		got = ix.EngineBlocks(got)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: EngineBlocks (-want +got):\n%s", what, d)
		}
		sum := 0
		for _, n := range got {
			sum += n
		}
		if p := ix.Stats().Pairs; p != sum {
			t.Errorf("%s: EngineBlocks sums to %d, Stats().Pairs = %d", what, sum, p)
		}
		checkInvariants(t, ix)
	}
	step("empty", nil)
	must := func(hd Holder, ev *kvevents.BlockStored) {
		t.Helper()
		if err := ix.Store(hd, nsA, ev); err != nil {
			t.Fatalf("Store(%v): %v", hd, err)
		}
	}
	must(h(e1, 0), stored([]uint64{11, 12, 13}, 0, false, toks(1, 3), kvevents.MediumGPU))
	// e2 holds the first two of e1's blocks: the nodes are shared, each engine counts its own.
	must(h(e2, 0), stored([]uint64{21, 22}, 0, false, toks(1, 2), kvevents.MediumGPU))
	step("shared prefix", []int{e1: 3, e2: 2})
	// e1's rank 1 holds another chain; the same blocks offloaded to CPU are not new blocks.
	must(h(e1, 1), stored([]uint64{31, 32}, 0, false, toks(2, 2), kvevents.MediumGPU))
	must(h(e1, 1), stored([]uint64{31, 32}, 0, false, toks(2, 2), kvevents.MediumCPU))
	step("second rank, second tier", []int{e1: 5, e2: 2})
	// Dropping the GPU copy keeps the CPU one; dropping every tier drops the block.
	ix.Remove(h(e1, 1), &kvevents.BlockRemoved{BlockHashes: []uint64{32}, Medium: kvevents.MediumGPU})
	step("one tier removed", []int{e1: 5, e2: 2})
	ix.Remove(h(e1, 0), &kvevents.BlockRemoved{BlockHashes: []uint64{13}, AllTiers: true})
	step("a block removed", []int{e1: 4, e2: 2})
	// e3 stores 10 new blocks under a 12-node cap: evictions take leaves of the others.
	must(h(e3, 0), stored([]uint64{41, 42, 43, 44, 45, 46, 47, 48, 49, 50}, 0, false, toks(3, 10), kvevents.MediumGPU))
	if ix.Stats().Evictions == 0 {
		t.Fatal("the node cap evicted nothing; the test means to exercise eviction")
	}
	got = ix.EngineBlocks(got)
	if got[e3] != 10 || got[e1]+got[e2] != ix.Stats().Pairs-10 || got[e1] >= 4 {
		t.Errorf("after evictions: EngineBlocks = %v (pairs %d), want e3 10 and e1 below 4", got, ix.Stats().Pairs)
	}
	checkInvariants(t, ix)
	ix.Clear(h(e3, 0))
	if got = ix.EngineBlocks(got); got[e3] != 0 {
		t.Errorf("after Clear: EngineBlocks = %v, want e3 0", got)
	}
	ix.RemoveEngine(e1)
	if got = ix.EngineBlocks(got); got[e1] != 0 || got[e2]+got[e3] != ix.Stats().Pairs {
		t.Errorf("after RemoveEngine(e1): EngineBlocks = %v (pairs %d), want e1 0 and the rest e2's", got, ix.Stats().Pairs)
	}
	checkInvariants(t, ix)
	// A new engine reusing e1's freed holders starts from its own blocks only.
	must(h(e1+10, 0), stored([]uint64{61}, 0, false, toks(6, 1), kvevents.MediumGPU))
	must(h(e1+10, 1), stored([]uint64{71}, 0, false, toks(7, 1), kvevents.MediumGPU))
	if got = ix.EngineBlocks(got); len(got) != int(e1+10)+1 || got[e1+10] != 2 {
		t.Errorf("new engine on reused holders: EngineBlocks = %v, want %d: 2", got, e1+10)
	}
	checkInvariants(t, ix)
}

// BenchmarkEngineBlocks reads the per-engine counts of an index with 1,000 engines of two
// ranks each, as the console's fleet page does on each refresh.
func BenchmarkEngineBlocks(b *testing.B) {
	ix, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	for e := range 1000 {
		for r := range int32(2) {
			s := e*2 + int(r)
			if err := ix.Store(h(slots.Slot(e), r), nsA, stored([]uint64{uint64(s)}, 0, false, toks(s, 1), kvevents.MediumGPU)); err != nil {
				b.Fatal(err)
			}
		}
	}
	var out []int
	b.ReportAllocs()
	for b.Loop() {
		if out = ix.EngineBlocks(out); len(out) != 1000 {
			b.Fatal("want 1000 engines")
		}
	}
}
