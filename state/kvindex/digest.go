package kvindex

// Digest returns an order-independent fingerprint of the index's logical
// content: every block (its hash and parent's), every (block, holder,
// tiers) entry, every engine-hash reference that names a block its holder
// holds, with the KV-cache groups holding it, each holder's excluded groups and EAGLE flag, and every
// namespace's block sizes. Two indexes that agree on these have equal digests however
// they were built (events, snapshot, replay); holders are identified by
// slot, so compare indexes that share a slots.Table.
func (ix *Index) Digest() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var d uint64
	var one [1]holderEntry
	for i := range ix.nodes {
		n := &ix.nodes[i]
		if n.isFree() {
			continue
		}
		h := n.hash()
		var ph uint64
		if n.parent != 0 {
			ph = ix.nodes[n.parent-1].hash()
		}
		d += mix64(h ^ mix64(ph^1))
		for _, e := range ix.entries(n, &one) {
			id := ix.holders[e.holder()].id
			d += mix64(h ^ mix64(uint64(id.Engine)<<32|uint64(uint32(id.Rank))) ^ mix64(uint64(e.tiers())|2<<8))
		}
	}
	for i := range ix.holders {
		hs := &ix.holders[i]
		if !hs.live {
			continue
		}
		hid := mix64(uint64(hs.id.Engine)<<32 | uint64(uint32(hs.id.Rank)))
		hs.refs.each(func(k uint64, r uint32) {
			if idx, ok := ix.deref(r, uint16(i)); ok {
				d += mix64(hid ^ mix64(k^3) ^ mix64(ix.nodes[idx].hash()^4) ^ mix64(hs.groupsOf(k)^6))
			}
		})
		d += mix64(hid ^ mix64(hs.excluded^7) ^ mix64(hs.seen^8) ^ uint64(btoi(hs.lookahead)))
	}
	for ns, ts := range ix.trees {
		for _, t := range ts {
			d += mix64(t.seed ^ 5 ^ uint64(len(ns.Model)))
		}
	}
	return d
}
