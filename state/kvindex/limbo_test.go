package kvindex

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/state/kvevents"
)

// TestEvictedReferencesStayStale churns an index far past its node cap so
// that evicted slots go through limbo and are reused, and checks that an
// engine hash naming an evicted block never reaches the block that took
// its slot: a removal of it changes nothing and a chain stored under it is
// an unknown parent. References carry no generation, so this is what the
// limbo and its sweeps guarantee.
func TestEvictedReferencesStayStale(t *testing.T) {
	const maxNodes = 50
	ix, _ := New(Config{MaxNodes: maxNodes})
	a, b := h(1, 0), h(2, 0)
	r := rand.New(rand.NewPCG(3, 4))
	holdsA := func(s int) bool {
		return slices.ContainsFunc(ix.Lookup(nsA, toks(s, 1), nil), func(m Match) bool { return m.Engine == a.Engine })
	}
	sweeps, lastLen := 0, 0
	for s := range 6000 {
		if err := ix.Store(a, nsA, stored([]uint64{uint64(s + 1)}, 0, false, toks(s, 1), 0)); err != nil {
			t.Fatal(err)
		}
		if s%2 == 0 {
			if err := ix.Store(b, nsA, stored([]uint64{uint64(s + 1)}, 0, false, toks(s, 1), 0)); err != nil {
				t.Fatal(err)
			}
		}
		if len(ix.limbo) < lastLen {
			sweeps++
		}
		lastLen = len(ix.limbo)
		j := r.IntN(s + 1)
		if j == s {
			continue
		}
		if holdsA(j) {
			continue // still indexed: nothing to check
		}
		pairs := ix.Stats().Pairs
		ix.Remove(a, &kvevents.BlockRemoved{BlockHashes: []uint64{uint64(j + 1)}, AllTiers: true})
		if got := ix.Stats().Pairs; got != pairs {
			t.Fatalf("step %d: removing evicted block %d's engine hash changed pairs %d → %d", s, j, pairs, got)
		}
		err := ix.Store(a, nsA, stored([]uint64{1 << 40}, uint64(j+1), true, toks(9999, 1), 0))
		if !errors.Is(err, ErrUnknownParent) {
			t.Fatalf("step %d: Store under evicted block %d's engine hash = %v, want ErrUnknownParent", s, j, err)
		}
	}
	checkInvariants(t, ix)
	checkHoles(t, ix)
	if st := ix.Stats(); st.Evictions < 5000 || sweeps < 3 {
		t.Errorf("evictions %d, limbo sweeps %d: the test does not exercise slot reuse", st.Evictions, sweeps)
	}
	if n, limit := len(ix.nodes), maxNodes+maxNodes/8+1024+1; n > limit {
		t.Errorf("arena has %d slots, more than the bound %d", n, limit)
	}
}
