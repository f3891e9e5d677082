package policy

import (
	"cmp"
	"math"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// pressure is the part of an engine's load that comparisons read: its report with the
// dispatches since the report folded in. Only set fills one.
type pressure struct {
	waiting, running   int64
	waitingUncached    int64
	kvUsed, kvCapacity int64
	queueTime          time.Duration
	hasQueueTime       bool
}

// set fills p with v's figures and d dispatches made after v was captured folded in. Each such
// dispatch is one request the report cannot count yet, assumed to cost the engine what the
// request being placed would (tokens: its uncached tokens there):
//   - requests (requestsWith): it joins running while the report shows an empty queue and free
//     batch slots (running < max running, native views only), else waiting; so waiting +
//     running grows by exactly d, which is load_based's score.
//   - pending prefill (native views only): waiting uncached tokens grow by d × tokens whether
//     the dispatch queues or runs, since its prefill is still ahead of the request being placed;
//     the estimated queue time is recomputed from them at the reported prefill rate.
//   - KV used (native views only) grows by d × tokens.
//
// Arithmetic saturates; d = 0 leaves the report's figures unchanged. set writes p in place
// (returning the struct by value costs a store-forwarding stall per field on the hot path).
func (p *pressure) set(v *loadtable.View, d, tokens int64) {
	p.waiting, p.running = requestsWith(v, d)
	p.waitingUncached, p.kvUsed, p.kvCapacity = v.WaitingUncachedTokens, v.KVUsedTokens, v.KVCapacityTokens
	p.queueTime, p.hasQueueTime = v.QueueTime, v.HasQueueTime
	if d <= 0 || !v.Native {
		return
	}
	add := satMul(d, max(tokens, 0))
	p.waitingUncached = satAdd(p.waitingUncached, add)
	p.kvUsed = satAdd(p.kvUsed, add)
	if p.hasQueueTime && add > 0 {
		// As loadtable computes it: waiting uncached tokens / prefill rate, saturating.
		if q := float64(p.waitingUncached) / v.PrefillRate * float64(time.Second); q >= math.MaxInt64 {
			p.queueTime = math.MaxInt64
		} else {
			p.queueTime = time.Duration(q)
		}
	}
}

// requestsWith returns v's waiting and running requests with d dispatches since its capture
// placed as set describes.
func requestsWith(v *loadtable.View, d int64) (waiting, running int64) {
	if d <= 0 { // the common case between bursts, kept inlinable
		return v.Waiting, v.Running
	}
	return placeDispatches(v, d)
}

func placeDispatches(v *loadtable.View, d int64) (waiting, running int64) {
	var run int64
	if v.Native && v.Waiting == 0 {
		run = min(d, max(v.MaxRunningRequests-v.Running, 0))
	}
	return satAdd(v.Waiting, d-run), satAdd(v.Running, run)
}

func satAdd(a, b int64) int64 {
	if s := a + b; (s > a) == (b > 0) {
		return s
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

// satMul multiplies non-negative a and b, saturating at MaxInt64.
func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// comparePressure orders two engines by stage pressure; negative means a is less pressured.
// Every figure is the report plus the dispatches since it (pressure.set).
// Both native: plain and prefill compare estimated prefill queue time (when both have it), then
// waiting uncached tokens, waiting requests and running requests; decode compares waiting
// requests, running requests, KV usage fraction and KV tokens used. Reported ties, and any pair
// where either engine lacks a fresh native view, compare router-local in-flight requests. Engine
// id is deliberately not a tie-breaker: callers decide what a tie means.
func comparePressure(stage registry.Role, a, b observation) int {
	if a.native() && b.native() {
		var c int
		if stage == registry.RoleDecode {
			c = compareDecode(&a.load, &b.load)
		} else {
			c = comparePrefill(&a.load, &b.load)
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(a.inflight, b.inflight)
}

func comparePrefill(a, b *pressure) int {
	if a.hasQueueTime && b.hasQueueTime {
		if c := cmp.Compare(a.queueTime, b.queueTime); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.waitingUncached, b.waitingUncached); c != 0 {
		return c
	}
	if c := cmp.Compare(a.waiting, b.waiting); c != 0 {
		return c
	}
	return cmp.Compare(a.running, b.running)
}

func compareDecode(a, b *pressure) int {
	if c := cmp.Compare(a.waiting, b.waiting); c != 0 {
		return c
	}
	if c := cmp.Compare(a.running, b.running); c != 0 {
		return c
	}
	// Usage fraction used/capacity, compared by cross-multiplying in 128 bits so neither float
	// rounding nor overflow decides. Native views guarantee capacity > 0 and counts >= 0.
	if c := compareProducts(a.kvUsed, b.kvCapacity, b.kvUsed, a.kvCapacity); c != 0 {
		return c
	}
	return cmp.Compare(a.kvUsed, b.kvUsed)
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
