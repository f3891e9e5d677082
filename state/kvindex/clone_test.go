package kvindex

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// buildMixed applies events from..to-1 of a scenario that exercises what a
// copy must carry: several holders and ranks, tiers and an unknown medium,
// EAGLE, a second KV-cache group and its exclusion, removals that prune,
// clears, and LRU eviction under a small node cap.
func buildMixed(t *testing.T, ix *Index, engines []slots.Slot, from, to int) {
	t.Helper()
	for s := from; s < to; s++ {
		hd := h(engines[s%len(engines)], int32(s%3))
		hashes := []uint64{uint64(s) << 8, uint64(s)<<8 | 1, uint64(s)<<8 | 2}
		ev := stored(hashes, 0, false, append(toks(0, 1), toks(s, 2)...), kvevents.Medium(s%3))
		if s%13 == 0 {
			ev.Medium = kvevents.MediumUnknown
		}
		ev.Lookahead = s%11 == 0
		if err := ix.Store(hd, nsA, ev); err != nil {
			t.Fatal(err)
		}
		if s%4 == 1 {
			if err := ix.Store(hd, nsA, grouped(stored(hashes, 0, false, ev.TokenIDs, 0), 1)); err != nil && !errors.Is(err, ErrGroupNotIndexed) {
				t.Fatal(err)
			}
		}
		if s%7 == 0 {
			ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: hashes[1:], AllTiers: true, Group: 1})
		}
		if s == 150 {
			_ = ix.Store(hd, nsA, &kvevents.BlockStored{BlockHashes: hashes[:1], BlockSize: bs, Group: 1, Sparse: true})
		}
		if s%5 == 0 {
			ix.Remove(hd, &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(s)<<8 | 2}, AllTiers: true})
		}
		if s%17 == 0 {
			ix.Clear(hd)
		}
		if s == 120 {
			ix.RemoveEngine(engines[0])
		}
	}
}

// TestClone: a clone has the original's contents and behaves like it under
// the same later events (eviction order included), and writes to one never
// show in the other, whether it is fresh or made in the memory of an older
// copy of a larger or a smaller index.
func TestClone(t *testing.T) {
	names := slots.NewTable()
	engines := []slots.Slot{names.Intern("engine-a"), names.Intern("engine-b"), names.Intern("engine-c")}
	cfg := Config{MaxNodes: 40}
	sizeOnly := cmpopts.IgnoreFields(Stats{}, "Bytes") // capacities differ
	for name, reuse := range map[string]func() *Index{
		"fresh": func() *Index { return nil },
		"into a larger copy": func() *Index {
			big, _ := New(Config{MaxNodes: 400})
			buildMixed(t, big, []slots.Slot{names.Intern("engine-x"), names.Intern("engine-y"), engines[1], engines[2]}, 0, 400)
			return big.Clone()
		},
		"into a smaller copy": func() *Index {
			small, _ := New(cfg)
			buildMixed(t, small, engines[:1], 0, 10)
			return small.Clone()
		},
	} {
		t.Run(name, func(t *testing.T) {
			full, _ := New(cfg)
			buildMixed(t, full, engines, 0, 200)
			orig, _ := New(cfg)
			buildMixed(t, orig, engines, 0, 100)
			q := append(toks(0, 1), toks(98, 2)...)
			wantLookup := lookup(orig, nsA, q)
			before, beforeStats := orig.Digest(), orig.Stats()

			c := orig.CloneInto(reuse())
			checkInvariants(t, c)
			if c.Digest() != before {
				t.Errorf("clone Digest() %x, want %x", c.Digest(), before)
			}
			if diff := cmp.Diff(beforeStats, c.Stats(), sizeOnly); diff != "" {
				t.Errorf("clone Stats() mismatch (-orig +clone):\n%s", diff)
			}
			if diff := cmp.Diff(wantLookup, lookup(c, nsA, q)); diff != "" {
				t.Errorf("clone Lookup mismatch (-orig +clone):\n%s", diff)
			}
			var buf bytes.Buffer
			if err := c.WriteSnapshot(&buf, names); err != nil {
				t.Fatal(err)
			}
			restored, err := ReadSnapshot(&buf, cfg, names)
			if err != nil {
				t.Fatalf("ReadSnapshot(clone's snapshot): %v", err)
			}
			if restored.Digest() != before {
				t.Errorf("restored clone Digest() %x, want %x", restored.Digest(), before)
			}

			// Writes to the original do not reach the clone...
			buildMixed(t, orig, engines, 100, 200)
			if orig.Digest() != full.Digest() {
				t.Errorf("original after the rest: Digest() %x, full build %x", orig.Digest(), full.Digest())
			}
			if c.Digest() != before {
				t.Errorf("clone Digest() changed to %x by writes to the original", c.Digest())
			}
			if diff := cmp.Diff(wantLookup, lookup(c, nsA, q)); diff != "" {
				t.Errorf("clone Lookup changed by writes to the original (-before +after):\n%s", diff)
			}
			// ...and the clone, given the same events, ends where the
			// original did, without touching it.
			fullDigest, origStats := orig.Digest(), orig.Stats()
			buildMixed(t, c, engines, 100, 200)
			checkInvariants(t, c)
			if c.Digest() != full.Digest() {
				t.Errorf("clone after the rest: Digest() %x, full build %x", c.Digest(), full.Digest())
			}
			// The original, not full: a lookup's use mark changes which
			// block the clock evicts, and full saw no lookups.
			if diff := cmp.Diff(origStats, c.Stats(), sizeOnly, cmpopts.IgnoreFields(Stats{}, "Lookups", "LookupHits")); diff != "" {
				t.Errorf("clone Stats() after the rest mismatch (-original +clone):\n%s", diff)
			}
			if orig.Digest() != fullDigest {
				t.Errorf("original Digest() changed to %x by writes to the clone", orig.Digest())
			}
			if full.Stats().Evictions == 0 {
				t.Error("test does not exercise eviction")
			}
		})
	}
}

// BenchmarkClone copies the 1M-block index of BenchmarkLookup; the time is
// how long a snapshot pauses ingestion.
func BenchmarkClone(b *testing.B) {
	ix, _ := buildLookupIndex(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = ix.Clone()
	}
	b.ReportMetric(float64(ix.Stats().Bytes)/(1<<20), "index-MiB")
}

// BenchmarkCloneInto is BenchmarkClone reusing the previous copy's memory,
// as a snapshotter that keeps its last copy does.
func BenchmarkCloneInto(b *testing.B) {
	ix, _ := buildLookupIndex(b)
	c := ix.Clone()
	b.ReportAllocs()
	for b.Loop() {
		c = ix.CloneInto(c)
	}
}
