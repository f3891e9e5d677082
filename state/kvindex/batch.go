package kvindex

import (
	"unsafe"

	"github.com/sluicehq/sluice/state/kvevents"
)

// EventNamespace is the namespace of a BlockStored event from a batch in
// namespace base: the event's own LoRAName and CacheSalt, where set,
// replace base's (docs/kv-events.md).
func EventNamespace(base Namespace, ev *kvevents.BlockStored) Namespace {
	if ev.LoRAName != "" {
		base.LoRA = ev.LoRAName
	}
	if ev.CacheSalt != "" {
		base.CacheSalt = ev.CacheSalt
	}
	return base
}

// applyPrefetchNext turns Apply's prefetching of the next event on; only
// BenchmarkApplyAlternating turns it off, to measure what it brings.
var applyPrefetchNext = true

// applyRelockBlocks is how many blocks Apply applies under one hold of the
// write lock before it lets waiting lookups in (between two events).
const applyRelockBlocks = 512

// Apply applies the events of one batch from holder h (one Kafka record's
// events) in order: a BlockStored event as Store(h, EventNamespace(base,
// ev), ev), a BlockRemoved event as Remove, an AllBlocksCleared event as
// Clear. errs must have room for len(evs) entries; errs[i] is set to Store's
// error for a BlockStored event and to nil for the others. The result is
// the same as those calls one by one (TestApplyMatchesEventByEvent); the
// batch is faster because it takes the write lock once per
// applyRelockBlocks blocks rather than once per event, resolves the holder
// and the tree once, and starts loading the next event's token ids and
// engine-hash slots while the current event is applied. A lookup waits at
// most for about applyRelockBlocks blocks' worth of writing (or one longer
// event).
func (ix *Index) Apply(h Holder, base Namespace, evs []kvevents.Event, errs []error) {
	errs = errs[:len(evs)]
	clear(errs)
	if len(evs) == 0 {
		return
	}
	if st := evs[0].Stored; evs[0].Kind == kvevents.KindBlockStored && checkStored(st) == nil && !nonPrefix(st) {
		prefetchTokens(st.TokenIDs, 0, min(len(st.BlockHashes), storeChunk), st.BlockSize)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var (
		hi      uint16
		hiErr   error
		resolve = true // hi is not resolved yet
		held    int    // blocks applied under this hold of the lock
		// The last tree resolved: the events of a batch share one.
		lastNS   Namespace
		lastBS   int
		lastSeed uint64
	)
	seedOf := func(ns Namespace, bs int) uint64 {
		if bs != lastBS || ns != lastNS {
			lastNS, lastBS, lastSeed = ns, bs, ix.treeFor(ns, bs)
		}
		return lastSeed
	}
	for i := range evs {
		if held >= applyRelockBlocks {
			ix.mu.Unlock()
			ix.mu.Lock()
			held = 0
		}
		ev := &evs[i]
		switch ev.Kind {
		case kvevents.KindBlockStored:
			st := ev.Stored
			if err := checkStored(st); err != nil {
				errs[i] = err
				continue
			}
			if resolve {
				hi, hiErr = ix.holderFor(h)
				resolve = false
			}
			if hiErr != nil {
				errs[i] = hiErr
				continue
			}
			if applyPrefetchNext && i+1 < len(evs) {
				ix.prefetchNext(&ix.holders[hi], &evs[i+1], len(st.BlockHashes))
			}
			errs[i] = ix.storeLocked(hi, seedOf, EventNamespace(base, st), st)
			held += len(st.BlockHashes)
		case kvevents.KindBlockRemoved:
			rm := ev.Removed
			if rm.Group < 0 || rm.Group >= maxGroups {
				continue
			}
			mask := allTiers
			if !rm.AllTiers {
				mask = tierOf(rm.Medium)
			}
			ix.removeLocked(h, rm, mask)
			held += len(rm.BlockHashes)
		case kvevents.KindAllBlocksCleared:
			if j, ok := ix.holderIdx[h]; ok {
				held += ix.holders[j].refs.n
				ix.clearHolder(j)
			}
		}
	}
}

// prefetchNext starts loading, for the event after one of nb blocks that
// holder hs is about to store, the lines its Store will read first: its
// first chunk's token ids, its parent's and its blocks' engine-hash slots,
// and the nodes and clock bits of the free slots its new blocks will take
// (after the nb the current event takes). Prefetches are hints: a wrong
// guess costs a line of bandwidth, never a wrong result.
func (ix *Index) prefetchNext(hs *holderState, next *kvevents.Event, nb int) {
	if next.Kind != kvevents.KindBlockStored {
		return
	}
	st := next.Stored
	if st.BlockSize <= 0 || len(st.TokenIDs) < len(st.BlockHashes)*st.BlockSize {
		return // not canonical: Store rejects it without reading anything
	}
	n := min(len(st.BlockHashes), storeChunk)
	prefetchTokens(st.TokenIDs, 0, n, st.BlockSize)
	if rs := hs.refs.slots; len(rs) > 0 {
		if st.HasParent {
			prefetchLines(&rs[refHome(st.ParentHash, len(rs))].klo, 1)
		}
		for _, eh := range st.BlockHashes[:n] {
			prefetchLines(&rs[refHome(eh, len(rs))].klo, 1)
		}
	}
	for j := nb; j < min(nb+n, len(ix.free)); j++ {
		idx := ix.free[len(ix.free)-1-j]
		nd := &ix.nodes[idx]
		prefetchLines(&nd.hlo, 1)
		prefetchLines((*uint32)(&nd.h0), 1)
		prefetchLines((*uint32)(unsafe.Pointer(&ix.usageBits[idx>>5])), 1)
		prefetchLines((*uint32)(unsafe.Pointer(&ix.leafBits[idx>>6])), 1)
	}
}
