package kvindex

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// TestStoreLongEventsMatchReference checks Store's chunked handling of an
// event (hash a chunk, touch its slots, then apply it; storeChunk) and its
// prefetching against storeRef, the block-by-block loop Store had before,
// and, without a cap, against the same blocks stored one per event, each
// chained to the previous by engine hash. Events run up to 150 blocks
// (several chunks, and a chunk boundary anywhere), with and without extra
// keys, under caps that evict and cut in the middle of an event, with
// removals, clears and engine-hash reuse in between. After every operation
// the indexes must agree byte for byte (their snapshots, which hold the
// arena, the clock and the free lists), and on lookups.
//
// (Under a cap, one event and its blocks one by one may evict differently:
// the old loop did so too, so only storeRef is the reference there.)
func TestStoreLongEventsMatchReference(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 17))
		cfg := Config{MaxNodes: []int{0, 45, 130}[seed%3]}
		bs := []int{4, 16, 1}[seed%3]
		a, _ := New(cfg)
		b, _ := New(cfg)
		c, _ := New(cfg)
		names := slots.NewTable()
		for e := range 3 {
			names.Intern("engine-" + itoa(e))
		}
		prompts := make([][]uint32, 4)
		for p := range prompts {
			prompts[p] = make([]uint32, 200*bs)
			for i := range prompts[p] {
				prompts[p][i] = uint32(r.IntN(4) + p*100000 + i*13)
			}
			if p > 0 {
				copy(prompts[p], prompts[0][:bs*r.IntN(150)]) // shared prefixes
			}
		}
		held := map[Holder][]uint64{}
		next := uint64(1)
		holders := []Holder{{0, 0}, {1, 0}, {2, 1}}
		for op := range 120 {
			hd := holders[r.IntN(len(holders))]
			switch k := r.IntN(10); {
			case k < 6:
				p := prompts[r.IntN(len(prompts))]
				from := 0
				var parent uint64
				hasParent := false
				if hs := held[hd]; len(hs) > 0 && r.IntN(3) == 0 {
					from, parent, hasParent = 1+r.IntN(40), hs[r.IntN(len(hs))], true
				}
				n := 1 + r.IntN(150)
				hashes := make([]uint64, n)
				for i := range hashes {
					if r.IntN(25) == 0 && len(held[hd]) > 0 {
						hashes[i] = held[hd][r.IntN(len(held[hd]))]
					} else {
						hashes[i], next = next, next+1
					}
				}
				var extra []string
				if r.IntN(3) == 0 {
					extra = make([]string, n)
					for i := range extra {
						if r.IntN(4) == 0 {
							extra[i] = "img-" + itoa(r.IntN(3))
						}
					}
				}
				toks := p[from*bs : (from+n)*bs]
				ev := &kvevents.BlockStored{BlockHashes: hashes, ParentHash: parent, HasParent: hasParent,
					TokenIDs: toks, BlockSize: bs, ExtraKeys: extra, Medium: kvevents.Medium(r.IntN(2))}
				errA := a.Store(hd, nsA, ev)
				if errC := c.storeRef(hd, nsA, ev); !errors.Is(errA, errC) && (errA != nil || errC != nil) {
					t.Fatalf("seed %d op %d: Store: %v, reference: %v", seed, op, errA, errC)
				}
				if cfg.MaxNodes != 0 {
					if errA == nil {
						held[hd] = append(held[hd], hashes...)
					}
					break
				}
				var errB error
				for i := range n {
					one := &kvevents.BlockStored{BlockHashes: hashes[i : i+1], ParentHash: parent, HasParent: hasParent,
						TokenIDs: toks[i*bs : (i+1)*bs], BlockSize: bs, Medium: ev.Medium}
					if extra != nil {
						one.ExtraKeys = extra[i : i+1]
					}
					if err := b.Store(hd, nsA, one); err != nil {
						errB = err
						break
					}
					if !holds(b, hd, hashes[i]) {
						break // the cap cut the chain here, as it cuts the event
					}
					parent, hasParent = hashes[i], true
				}
				if !errors.Is(errA, errB) && (errA != nil || errB != nil) {
					t.Fatalf("seed %d op %d: one event: %v, block by block: %v", seed, op, errA, errB)
				}
				if errA == nil {
					held[hd] = append(held[hd], hashes...)
				}
			case k < 8:
				hs := held[hd]
				if len(hs) == 0 {
					continue
				}
				rm := &kvevents.BlockRemoved{BlockHashes: []uint64{hs[r.IntN(len(hs))], hs[r.IntN(len(hs))]}, AllTiers: true}
				a.Remove(hd, rm)
				b.Remove(hd, rm)
				c.Remove(hd, rm)
			case k < 9:
				a.Clear(hd)
				b.Clear(hd)
				c.Clear(hd)
				delete(held, hd)
			default:
				q := prompts[r.IntN(len(prompts))][:bs*r.IntN(200)]
				want := lookup(c, nsA, q)
				if diff := cmp.Diff(want, lookup(a, nsA, q)); diff != "" {
					t.Fatalf("seed %d op %d: lookups differ (-reference +Store):\n%s", seed, op, diff)
				}
				if cfg.MaxNodes == 0 {
					if diff := cmp.Diff(want, lookup(b, nsA, q)); diff != "" {
						t.Fatalf("seed %d op %d: lookups differ (-one event +block by block):\n%s", seed, op, diff)
					}
				}
			}
			sa, sc := snapshotBytes(t, a, names), snapshotBytes(t, c, names)
			if a.Digest() != c.Digest() || !bytes.Equal(sa, sc) {
				t.Fatalf("seed %d op %d: Store and the reference built different indexes", seed, op)
			}
			if cfg.MaxNodes == 0 && (b.Digest() != a.Digest() || !bytes.Equal(snapshotBytes(t, b, names), sa)) {
				t.Fatalf("seed %d op %d: one event and block by block built different indexes", seed, op)
			}
		}
		checkInvariants(t, a)
	}
}

// holds reports whether holder hd holds the block it named eh.
func holds(ix *Index, hd Holder, eh uint64) bool {
	hi, ok := ix.holderIdx[hd]
	if !ok {
		return false
	}
	r, ok := ix.holders[hi].refs.get(eh)
	if !ok {
		return false
	}
	_, ok = ix.deref(r, hi)
	return ok
}

func snapshotBytes(t *testing.T, ix *Index, names *slots.Table) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := ix.WriteSnapshot(&buf, names); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// storeRef is Store as it was before events were handled in chunks: hash,
// probe and apply one block at a time. Kept as the reference.
func (ix *Index) storeRef(h Holder, ns Namespace, ev *kvevents.BlockStored) error {
	tier := tierOf(ev.Medium)
	g := ev.Group
	if g < 0 || g >= maxGroups {
		return ErrGroupNotIndexed
	}
	if !ev.Canonical() {
		return ErrInvalidEvent
	}
	nb, bs := len(ev.BlockHashes), ev.BlockSize
	nonPrefix := ev.Sparse || !ev.GroupKind.PrefixGroup()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	hi, err := ix.holderFor(h)
	if err != nil {
		return err
	}
	hs := &ix.holders[hi]
	if nonPrefix {
		if !ev.GroupKind.PrefixGroup() || hs.seen&^hs.excluded&^groupBit(g) != 0 {
			ix.excludeGroup(hi, g)
		}
		return ErrGroupNotIndexed
	}
	if hs.excluded&groupBit(g) != 0 {
		return ErrGroupNotIndexed
	}
	if ev.Lookahead {
		hs.lookahead = true
	}
	hs.seen |= groupBit(g)
	if nb == 1 && bs < hs.blockSize {
		ix.partials++
		return nil
	}
	hs.blockSize = max(hs.blockSize, bs)
	prevHash := ix.treeFor(ns, bs)
	var prev uint32 // index+1
	if ev.HasParent {
		r, ok := hs.refs.get(ev.ParentHash)
		if !ok {
			return ErrUnknownParent
		}
		idx, ok := ix.deref(r, hi)
		if !ok {
			hs.refs.del(ev.ParentHash)
			hs.groups.del(ev.ParentHash)
			ix.staleRefs++
			return ErrUnknownParent
		}
		prev, prevHash = idx+1, ix.nodes[idx].hash()
	}
	for i := range nb {
		c := contentHash(ev.TokenIDs[i*bs : (i+1)*bs])
		if ev.ExtraKeys != nil {
			c = withExtra(c, ev.ExtraKeys[i])
		}
		hash := chain(prevHash, c)
		idx, found := ix.table.get(ix.nodes, hash)
		if !found {
			if ix.live >= ix.cfg.MaxNodes && !ix.evictOne(prev) {
				return nil // the cap is hard: a chain longer than it is cut
			}
			if prev != 0 && ix.nodes[prev-1].hash() != prevHash {
				return nil // unreachable: prev is pinned
			}
			idx = ix.allocNode(hash, prev)
		} else {
			ix.touch(idx)
			if !hs.aliased && ix.entryOf(idx, hi) != nil {
				if old, ok := hs.refs.get(ev.BlockHashes[i]); !ok || old != idx+1 {
					hs.aliased = true // a second engine hash for a block hi holds
				}
			}
		}
		eh, r := ev.BlockHashes[i], idx+1
		ix.addTier(idx, hi, tier)
		if g != 0 || hs.groups.n > 0 {
			var m uint64
			if old, ok := hs.refs.get(eh); ok && old == r {
				m = hs.groupsOf(eh)
			}
			hs.setGroups(eh, m|groupBit(g))
		}
		hs.refs.put(eh, r)
		prev, prevHash = idx+1, hash
	}
	return nil
}

// TestConcurrentLongEvents runs writers storing and removing events of up
// to 100 blocks (several of Store's chunks) under a cap that evicts in the
// middle of them, against readers looking up long queries, for the race
// detector and the invariants: every match is within its query and names a
// writer's engine, and the index is consistent at the end.
func TestConcurrentLongEvents(t *testing.T) {
	ix, _ := New(Config{MaxNodes: 200})
	const bs = 16
	// Each writer its own prompt (except a shared first block), so that
	// the writers' blocks exceed the cap together.
	prompts := [][]uint32{seqTokens(9, 200), seqTokens(10, 200), seqTokens(11, 200)}
	for _, p := range prompts[1:] {
		copy(p, prompts[0][:bs])
	}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			prompt := prompts[w]
			for i := range 300 {
				hd := Holder{Engine: slots.Slot(w), Rank: int32(i % 2)}
				n := 1 + r.IntN(100)
				from := r.IntN(2) * 50 // from the root, or after block 49
				hashes := make([]uint64, n)
				for j := range hashes {
					hashes[j] = uint64(w)<<40 | uint64(from+j)
				}
				ev := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: prompt[from*bs : (from+n)*bs], BlockSize: bs}
				if from > 0 {
					ev.HasParent, ev.ParentHash = true, uint64(w)<<40|uint64(from-1)
				}
				_ = ix.Store(hd, nsA, ev)
				switch i % 5 {
				case 2:
					ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: hashes[n/2:], AllTiers: true})
				case 4:
					ix.Clear(hd)
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for k := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var out []Match
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				nb := 1 + (i*37+k)%200
				out = ix.Lookup(nsA, prompts[i%3][:nb*bs], out[:0])
				for _, m := range out {
					if m.Blocks < 1 || m.Blocks > nb || m.Engine > 2 || m.Tokens != int64(m.Blocks*bs) {
						t.Errorf("Lookup of %d blocks returned %+v", nb, m)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	checkInvariants(t, ix)
	if ix.Stats().Evictions == 0 {
		t.Error("no evictions: the cap was never reached")
	}
}
