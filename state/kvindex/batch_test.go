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

// applyOneByOne is the reference for Apply: the events one by one through
// Store, Remove and Clear, each taking the lock.
func applyOneByOne(ix *Index, h Holder, base Namespace, evs []kvevents.Event, errs []error) {
	for i := range evs {
		errs[i] = nil
		switch ev := &evs[i]; ev.Kind {
		case kvevents.KindBlockStored:
			errs[i] = ix.Store(h, EventNamespace(base, ev.Stored), ev.Stored)
		case kvevents.KindBlockRemoved:
			ix.Remove(h, ev.Removed)
		case kvevents.KindAllBlocksCleared:
			ix.Clear(h)
		}
	}
}

// batchGen makes random batches: chains continued from the previous event
// (as an engine's batch usually is), chains under a random held block or
// an unknown parent, engine-hash reuse, extra keys, LoRA and cache-salt
// overrides, a second KV-cache group, non-prefix and sparse events,
// invalid events, partial pages, lookahead, removals by tier and in all
// tiers, clears, and events long enough for several chunks and for Apply
// to release the lock in the middle of a batch.
type batchGen struct {
	r       *rand.Rand
	bs      int
	prompts [][]uint32
	held    map[Holder][]uint64
	next    uint64
}

func newBatchGen(seed uint64, bs int) *batchGen {
	r := rand.New(rand.NewPCG(seed, 23))
	g := &batchGen{r: r, bs: bs, held: map[Holder][]uint64{}, next: 1}
	g.prompts = make([][]uint32, 4)
	for p := range g.prompts {
		g.prompts[p] = make([]uint32, 300*bs)
		for i := range g.prompts[p] {
			g.prompts[p][i] = uint32(r.IntN(4) + p*100000 + i*13)
		}
		if p > 0 {
			copy(g.prompts[p], g.prompts[0][:bs*r.IntN(200)])
		}
	}
	return g
}

func (g *batchGen) batch(hd Holder) []kvevents.Event {
	r, bs := g.r, g.bs
	n := 1 + r.IntN(12)
	evs := make([]kvevents.Event, 0, n)
	var last uint64 // the previous stored event's last engine hash
	hasLast := false
	for range n {
		switch k := r.IntN(20); {
		case k < 13:
			p := g.prompts[r.IntN(len(g.prompts))]
			from := 0
			var parent uint64
			hasParent := false
			switch hs := g.held[hd]; {
			case hasLast && r.IntN(3) > 0:
				from, parent, hasParent = 1+r.IntN(60), last, true
			case len(hs) > 0 && r.IntN(3) == 0:
				from, parent, hasParent = 1+r.IntN(60), hs[r.IntN(len(hs))], true
			case r.IntN(15) == 0:
				parent, hasParent = 1<<60|uint64(r.IntN(1000)), true // unknown
			}
			nb := 1 + r.IntN(8)
			if r.IntN(6) == 0 {
				nb = 1 + r.IntN(220)
			}
			hashes := make([]uint64, nb)
			for i := range hashes {
				if r.IntN(25) == 0 && len(g.held[hd]) > 0 {
					hashes[i] = g.held[hd][r.IntN(len(g.held[hd]))]
				} else {
					hashes[i], g.next = g.next, g.next+1
				}
			}
			ev := &kvevents.BlockStored{BlockHashes: hashes, ParentHash: parent, HasParent: hasParent,
				TokenIDs: p[from*bs : (from+nb)*bs], BlockSize: bs, Medium: kvevents.Medium(r.IntN(3))}
			switch r.IntN(12) {
			case 0:
				ev.ExtraKeys = make([]string, nb)
				for i := range ev.ExtraKeys {
					if r.IntN(3) == 0 {
						ev.ExtraKeys[i] = "img-" + itoa(r.IntN(3))
					}
				}
			case 1:
				ev.LoRAName = "lora-" + itoa(r.IntN(2))
			case 2:
				ev.CacheSalt = "salt"
			case 3:
				ev.Group = 1
			case 4:
				if r.IntN(4) == 0 {
					ev.GroupKind = kvevents.GroupKindWindowed
				} else {
					ev.Sparse = r.IntN(3) == 0
				}
			case 5:
				ev.TokenIDs = ev.TokenIDs[:len(ev.TokenIDs)-1] // invalid
			case 6:
				ev.Group = []int32{-1, 64}[r.IntN(2)]
			case 7:
				if nb == 1 && bs > 1 {
					ev.TokenIDs, ev.BlockSize = ev.TokenIDs[:bs-1], bs-1 // a short last page
				}
			case 8:
				ev.Lookahead = r.IntN(4) == 0
			}
			evs = append(evs, kvevents.Event{Kind: kvevents.KindBlockStored, Stored: ev})
			g.held[hd] = append(g.held[hd], hashes...)
			last, hasLast = hashes[nb-1], true
		case k < 17:
			hs := g.held[hd]
			if len(hs) == 0 {
				continue
			}
			rm := &kvevents.BlockRemoved{AllTiers: r.IntN(2) == 0, Medium: kvevents.Medium(r.IntN(3))}
			for range 1 + r.IntN(4) {
				rm.BlockHashes = append(rm.BlockHashes, hs[r.IntN(len(hs))])
			}
			if r.IntN(6) == 0 {
				rm.Group = []int32{1, -1, 64}[r.IntN(3)]
			}
			evs = append(evs, kvevents.Event{Kind: kvevents.KindBlockRemoved, Removed: rm})
		default:
			evs = append(evs, kvevents.Event{Kind: kvevents.KindAllBlocksCleared})
			delete(g.held, hd)
			hasLast = false
		}
	}
	return evs
}

// TestApplyMatchesEventByEvent checks Apply against the same events one by
// one (applyOneByOne) over random batches (batchGen), under caps that evict
// in the middle of a batch: after every batch the two indexes must agree
// byte for byte (snapshots: arena, clock, free lists, limbo), by Digest and
// on lookups in every namespace the batches used, and Apply must return
// the same error for every event. A holder whose first events are
// removals and clears must not be created by them (it is not by Remove and
// Clear).
func TestApplyMatchesEventByEvent(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 15
	}
	for seed := range seeds {
		cfg := Config{MaxNodes: []int{0, 60, 300}[seed%3]}
		bs := []int{4, 16, 1, 2}[seed%4]
		g := newBatchGen(uint64(seed), bs)
		a, _ := New(cfg)
		b, _ := New(cfg)
		names := slots.NewTable()
		for e := range 4 {
			names.Intern("engine-" + itoa(e))
		}
		holders := []Holder{{0, 0}, {1, 0}, {2, 1}, {3, 0}}
		nss := []Namespace{nsA, {Model: "m", LoRA: "lora-0"}, {Model: "m", LoRA: "lora-1"}, {Model: "m", CacheSalt: "salt"},
			{Model: "m", LoRA: "lora-0", CacheSalt: "salt"}, {Model: "m", LoRA: "lora-1", CacheSalt: "salt"}}
		errsA := make([]error, 16)
		errsB := make([]error, 16)
		for op := range 80 {
			hd := holders[g.r.IntN(len(holders))]
			evs := g.batch(hd)
			a.Apply(hd, nsA, evs, errsA)
			applyOneByOne(b, hd, nsA, evs, errsB)
			for i := range evs {
				if !errors.Is(errsA[i], errsB[i]) && (errsA[i] != nil || errsB[i] != nil) {
					t.Fatalf("seed %d op %d event %d: Apply: %v, one by one: %v", seed, op, i, errsA[i], errsB[i])
				}
			}
			if _, okA := a.holderIdx[hd]; okA != (func() bool { _, ok := b.holderIdx[hd]; return ok })() {
				t.Fatalf("seed %d op %d: holder %v known after Apply: %v, after one by one: %v", seed, op, hd, okA, !okA)
			}
			sa, sb := snapshotBytes(t, a, names), snapshotBytes(t, b, names)
			if a.Digest() != b.Digest() || !bytes.Equal(sa, sb) {
				t.Fatalf("seed %d op %d: Apply and one by one built different indexes (batch of %d events)", seed, op, len(evs))
			}
			if a.Stats() != b.Stats() {
				t.Fatalf("seed %d op %d: stats differ: %+v vs %+v", seed, op, a.Stats(), b.Stats())
			}
			for _, ns := range nss {
				q := g.prompts[g.r.IntN(len(g.prompts))][:bs*g.r.IntN(300)]
				if diff := cmp.Diff(lookup(b, ns, q), lookup(a, ns, q)); diff != "" {
					t.Fatalf("seed %d op %d: lookups differ (-one by one +Apply):\n%s", seed, op, diff)
				}
			}
		}
		checkInvariants(t, a)
	}
}

// TestApplyTooManyHolders: with every holder index taken, Apply fails each
// BlockStored event of a new holder as Store does and ignores its other
// events, creating nothing.
func TestApplyTooManyHolders(t *testing.T) {
	ix, _ := New(Config{})
	ev := &kvevents.BlockStored{BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2}, BlockSize: 2}
	for i := range maxHolders {
		// A block of its own per holder (one block with 65536 holders
		// would make each Store scan them all).
		own := &kvevents.BlockStored{BlockHashes: []uint64{1}, TokenIDs: []uint32{uint32(i), 2}, BlockSize: 2}
		if err := ix.Store(Holder{Engine: slots.Slot(i)}, nsA, own); err != nil {
			t.Fatal(err)
		}
	}
	before := ix.Digest()
	evs := []kvevents.Event{
		{Kind: kvevents.KindBlockRemoved, Removed: &kvevents.BlockRemoved{BlockHashes: []uint64{1}, AllTiers: true}},
		{Kind: kvevents.KindBlockStored, Stored: ev},
		{Kind: kvevents.KindAllBlocksCleared},
		{Kind: kvevents.KindBlockStored, Stored: ev},
	}
	errs := make([]error, len(evs))
	ix.Apply(Holder{Engine: slots.Slot(maxHolders)}, nsA, evs, errs)
	if diff := cmp.Diff([]error{nil, ErrTooManyHolders, nil, ErrTooManyHolders}, errs, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
		t.Fatalf("errs (-want +got):\n%s", diff)
	}
	if ix.Digest() != before || len(ix.holderIdx) != maxHolders {
		t.Fatal("Apply of a holder over the limit changed the index")
	}
}

// TestConcurrentApply runs batches from three writers (long ones, so Apply
// releases the lock inside a batch) under an evicting cap against lookups
// (run it with -race), then checks the invariants.
func TestConcurrentApply(t *testing.T) {
	type rec struct {
		h   Holder
		evs []kvevents.Event
	}
	var recs [3][]rec
	for w := range recs {
		g := newBatchGen(uint64(100+w), 16)
		g.next = uint64(w+1) << 40
		hd := Holder{Engine: slots.Slot(w)}
		for range 150 {
			recs[w] = append(recs[w], rec{hd, g.batch(hd)})
		}
	}
	ix, _ := New(Config{MaxNodes: 300})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs := make([]error, 16)
			for _, r := range recs[w] {
				ix.Apply(r.h, nsA, r.evs, errs)
			}
		}()
	}
	var rg sync.WaitGroup
	for range 2 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			q := newBatchGen(100, 16).prompts[0]
			var out []Match
			for {
				select {
				case <-stop:
					return
				default:
				}
				out = ix.Lookup(nsA, q, out[:0])
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	checkInvariants(t, ix)
	if ix.Stats().Evictions == 0 {
		t.Fatal("no evictions: the cap did not bite")
	}
}
