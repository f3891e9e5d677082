package kvindex

import (
	"math/rand/v2"
	"testing"
)

// TestRefMapAgainstMap checks refMap's puts, gets and back-shifting
// deletes (over non-power-of-two lengths and wrap-around) against a map.
func TestRefMapAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 3))
		var m refMap
		want := map[uint64]uint32{}
		keyRange := uint64(50 + r.IntN(5000))
		for op := range 20000 {
			k := r.Uint64N(keyRange) * 0x1000193
			switch r.IntN(3) {
			case 0, 1:
				v := uint32(op) + 1
				m.put(k, v)
				want[k] = v
			default:
				m.del(k)
				delete(want, k)
			}
			if op%997 == 0 || op == 19999 {
				if m.n != len(want) {
					t.Fatalf("seed %d op %d: n %d, want %d", seed, op, m.n, len(want))
				}
				for k, v := range want {
					if got, ok := m.get(k); !ok || got != v {
						t.Fatalf("seed %d op %d: get(%x) = %d, %v; want %d", seed, op, k, got, ok, v)
					}
				}
				seen := 0
				m.each(func(k uint64, v uint32) {
					seen++
					if want[k] != v {
						t.Fatalf("seed %d: each gave %x → %d, want %d", seed, k, v, want[k])
					}
				})
				if seen != len(want) {
					t.Fatalf("seed %d: each visited %d, want %d", seed, seen, len(want))
				}
			}
		}
	}
}
