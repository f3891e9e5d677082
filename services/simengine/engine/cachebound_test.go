package engine

import "testing"

// TestCacheUnboundedMatchesLargeLRU: the unbounded Cache (a set) hits exactly what an LRU too
// large to evict hits, and a small LRU evicts.
func TestCacheUnboundedMatchesLargeLRU(t *testing.T) {
	t.Parallel()
	inf, big, small := NewCache(4, 0, 7), NewCache(4, 1<<20, 7), NewCache(4, 3, 7)
	prompts := [][]uint32{seq(1, 16), seq(1, 10), seq(50, 8), seq(1, 16), seq(50, 12), seq(1, 4)}
	var hi, hb, hs, blocks int
	for _, p := range prompts {
		a, n := inf.Serve(p)
		b, _ := big.Serve(p)
		c, _ := small.Serve(p)
		if a != b {
			t.Errorf("prompt %v: unbounded hit %d, large LRU %d", p[:2], a, b)
		}
		hi, hb, hs, blocks = hi+a, hb+b, hs+c, blocks+n
	}
	// 4 + 2 + 2 + 4 + 3 + 1 = 16 blocks; hits 0, 2, 0, 4, 2, 1.
	if blocks != 16 || hi != 9 || hs >= hi {
		t.Errorf("blocks %d, unbounded hits %d, 3-block LRU hits %d; want 16, 9, fewer", blocks, hi, hs)
	}
}
