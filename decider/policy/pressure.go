package policy

import (
	"cmp"
	"math/bits"

	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// comparePressure orders two engines by stage pressure; negative means a is less pressured.
// Both native: plain and prefill compare estimated prefill queue time (when both have it), then
// waiting uncached tokens, waiting requests and running requests; decode compares waiting
// requests, running requests, KV usage fraction and KV tokens used. Reported ties, and any pair
// where either engine lacks a fresh native view, compare router-local in-flight requests. Engine
// id is deliberately not a tie-breaker: callers decide what a tie means.
func comparePressure(stage registry.Role, a, b observation) int {
	if a.native() && b.native() {
		var c int
		if stage == registry.RoleDecode {
			c = compareDecode(&a.view, &b.view)
		} else {
			c = comparePrefill(&a.view, &b.view)
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(a.inflight, b.inflight)
}

func comparePrefill(a, b *loadtable.View) int {
	if a.HasQueueTime && b.HasQueueTime {
		if c := cmp.Compare(a.QueueTime, b.QueueTime); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.WaitingUncachedTokens, b.WaitingUncachedTokens); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Waiting, b.Waiting); c != 0 {
		return c
	}
	return cmp.Compare(a.Running, b.Running)
}

func compareDecode(a, b *loadtable.View) int {
	if c := cmp.Compare(a.Waiting, b.Waiting); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Running, b.Running); c != 0 {
		return c
	}
	// Usage fraction used/capacity, compared by cross-multiplying in 128 bits so neither float
	// rounding nor overflow decides. Native views guarantee capacity > 0 and counts >= 0.
	if c := compareProducts(a.KVUsedTokens, b.KVCapacityTokens, b.KVUsedTokens, a.KVCapacityTokens); c != 0 {
		return c
	}
	return cmp.Compare(a.KVUsedTokens, b.KVUsedTokens)
}

// compareProducts compares x1*y1 with x2*y2 for non-negative operands without overflow.
func compareProducts(x1, y1, x2, y2 int64) int {
	h1, l1 := bits.Mul64(uint64(x1), uint64(y1))
	h2, l2 := bits.Mul64(uint64(x2), uint64(y2))
	if c := cmp.Compare(h1, h2); c != 0 {
		return c
	}
	return cmp.Compare(l1, l2)
}
