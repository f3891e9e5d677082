// Package kvindex is the prefix index of KV-cache residency: which engine
// (and data-parallel rank) holds which prefix of which token sequence, in
// which storage tier, built from the engines' KV events.
//
// Blocks are keyed by sluice's own chained hash of each full block's token
// ids, seeded by the namespace (model, LoRA adapter, cache salt) and the
// block size, so a request's token ids hash to the same keys without copying
// any engine's hash algorithm. Each holder keeps a map from its engine's
// block hashes to nodes so that removals, which name engine hashes, work,
// and, only for engines with several KV-cache groups, which groups hold
// each hash (a block stays while any indexed group holds it). The rules for
// groups, namespaces, tiers and EAGLE are in docs/kv-events.md.
//
// Layout, chosen for small memory per (block, engine) pair (see
// BENCHMARKS.md: about 40 bytes with one holder per block) and lookups that
// chase few pointers: nodes are 20-byte records in one slice indexed by
// uint32, without pointers; an open-addressing table of 4-byte slots maps
// block hash → node; a node carries its one holder inline and moves its
// holders to a side slice when it has several; a per-holder open-addressing
// map of 12-byte slots holds engine hash → node. Eviction is a clock over
// 2-bit usage counts and a leaf bitmap instead of an LRU list (nodes.go).
// References carry no generation: a freed slot that a stale reference may
// still name waits in limbo until the references are swept.
//
// Concurrency: all methods are safe for concurrent use. Writers (Store,
// Remove, Clear, RemoveEngine) serialise on a lock and each holds it for one
// event; Lookup takes a read lock, so many lookups run in parallel and a
// lookup waits at most for one event's worth of writing. Clone copies the
// index under the read lock too, so that a snapshot can be taken without
// pausing lookups and serialised (from the copy) without pausing writers.
package kvindex

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/slots"
)

// Namespace separates blocks that must never match each other even when
// their token ids agree.
type Namespace struct {
	Model     string
	LoRA      string
	CacheSalt string
}

// Holder is one KV cache: an engine's data-parallel rank.
type Holder struct {
	Engine slots.Slot
	Rank   int32
}

// Config holds the index's optional settings.
type Config struct {
	// MaxNodes caps the number of blocks indexed (across all holders); the
	// least recently used leaf blocks are evicted beyond it. 0 means 4M
	// (about 180 MB at full use with one holder per block).
	MaxNodes int
}

// defaultMaxNodes is the node cap of a zero Config.MaxNodes.
const defaultMaxNodes = 4 << 20

const maxHolders = 1 << 16

// Validate reports settings out of range.
func (c Config) Validate() error {
	if c.MaxNodes < 0 || c.MaxNodes > 1<<31 {
		return fmt.Errorf("kvindex.Config.MaxNodes = %d: must be in [0, 2^31] (0 = default %d)", c.MaxNodes, defaultMaxNodes)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxNodes == 0 {
		c.MaxNodes = defaultMaxNodes
	}
	return c
}

// Sentinel errors returned by Store.
var (
	// ErrUnknownParent: the event's parent hash is not a block this holder
	// is known to hold (lost events, or the parent was evicted). Nothing
	// from the event is indexed; callers count it and may mark the holder's
	// residency uncertain.
	ErrUnknownParent = errors.New("kvindex: parent block unknown for this holder")
	// ErrGroupNotIndexed: the event belongs to a KV-cache group the index
	// does not keep for this holder, because the engine declared it, or
	// showed it (a sparse event), not to describe a reusable prefix, or
	// because its group_idx is 64 or more. Nothing is indexed; callers count
	// the event as ignored, not as bad. See docs/kv-events.md.
	ErrGroupNotIndexed = errors.New("kvindex: KV-cache group not indexed")
	// ErrInvalidEvent: the event is not kvevents.BlockStored.Canonical
	// (token count, block size, extra keys); the decoders' checks
	// (kvevents.Limits.CheckStored) never let one through.
	ErrInvalidEvent = errors.New("kvindex: invalid event")
	// ErrTooManyHolders: more than 65536 (engine, rank) pairs.
	ErrTooManyHolders = errors.New("kvindex: too many holders")
)

// Tier bits of a (node, holder) entry. tierOther holds blocks of a medium
// sluice does not know (a newer engine's tier), so that their chains and
// removals still resolve.
const (
	tierGPU uint8 = 1 << iota
	tierCPU
	tierDisk
	tierExternal
	tierOther
	allTiers = tierGPU | tierCPU | tierDisk | tierExternal | tierOther
	numTiers = 5
)

func tierOf(m kvevents.Medium) uint8 {
	switch m {
	case kvevents.MediumGPU:
		return tierGPU
	case kvevents.MediumCPU:
		return tierCPU
	case kvevents.MediumDisk:
		return tierDisk
	case kvevents.MediumExternal:
		return tierExternal
	}
	return tierOther
}

// maxGroups bounds the KV-cache group indexes a holder's blocks are tracked
// by (one bit each of a uint64).
const maxGroups = 64

func groupBit(g int32) uint64 { return 1 << uint(g) }

// holderEntry packs a holder index (low 16 bits), its tier bits (next 8)
// and, in bits 24–30, how many children of the node the same holder holds
// (saturating at maxKids); tiers 0 means no entry. Bit 31 is never set in
// an entry: node.h0 uses it to point at a spill instead.
type holderEntry uint32

const (
	maxKids     = 127
	spilledFlag = holderEntry(1) << 31
)

func mkEntry(h uint16, tiers uint8) holderEntry { return holderEntry(uint32(h) | uint32(tiers)<<16) }
func (e holderEntry) holder() uint16            { return uint16(e) }
func (e holderEntry) tiers() uint8              { return uint8(e >> 16) }
func (e holderEntry) kids() uint8               { return uint8(e>>24) & maxKids }

// withTiers replaces e's tiers, keeping its holder and child count.
func (e holderEntry) withTiers(t uint8) holderEntry {
	return e&^(0xff<<16) | holderEntry(t)<<16
}

// withKids replaces e's child count.
func (e holderEntry) withKids(k uint8) holderEntry { return e&0xffffff | holderEntry(k)<<24 }

type holderState struct {
	id        Holder
	live      bool
	blockSize int // largest block size seen; shorter single-block stores are partial pages
	refs      refMap
	// pairs counts the nodes holding this holder index. holes is nonzero
	// when the holder may hold a block without holding its parent block (a
	// middle block was removed, or a chain was stored under a parent the
	// holder no longer holds); while it is zero, the blocks the holder holds
	// along any chain form a prefix of it, which Lookup's fast path needs.
	// Both belong to the holder index, not the Holder, and survive its
	// reuse; holes resets when pairs reaches 0.
	pairs int
	holes int
	// groups maps an engine hash to the KV-cache groups (bit g = group_idx
	// g) that hold it, for hashes in refs held by anything but group 0
	// alone: a hash in refs and not here is held by group 0 only. A
	// single-group engine therefore never adds an entry (docs/kv-events.md).
	groups groupMap
	// excluded holds the groups that do not describe a prefix; their events
	// are not indexed. seen holds the groups that stored indexed blocks. Both
	// survive Clear (they are the engine's configuration).
	excluded uint64
	seen     uint64
	// lookahead is set once the holder's hashes cover tokens beyond their
	// blocks (EAGLE): Lookup then does not count a match's last block.
	lookahead bool
	// aliased is set once the holder named a block it held by a second
	// engine hash; stale is set while refs may name nodes the holder no
	// longer holds (see Index.limbo).
	aliased bool
	stale   bool
}

// groupsOf returns the groups holding engine hash eh, which hs's refs hold.
func (hs *holderState) groupsOf(eh uint64) uint64 {
	if hs.groups.n > 0 {
		if m, ok := hs.groups.get(eh); ok {
			return m
		}
	}
	return 1
}

// setGroups records that groups m hold engine hash eh.
func (hs *holderState) setGroups(eh, m uint64) {
	if m == 1 {
		hs.groups.del(eh)
		return
	}
	hs.groups.put(eh, m)
}

type tree struct {
	blockSize int
	seed      uint64
}

// Index is the prefix index. The zero value is not usable; call New.
type Index struct {
	cfg Config

	mu sync.RWMutex // write lock for events, read lock for Lookup

	nodes []node
	// free holds reusable node slots; limbo holds slots freed while some
	// holder was marked stale, which wait for a sweep of those holders'
	// references (so that no reference names a reused slot).
	free   []uint32
	limbo  []uint32
	nstale int // holders marked stale
	live   int
	table  nodeTable
	// usageBits holds a 2-bit usage count per node (32 per word), leafBits
	// one bit per node set for live leaves, hand the clock's next node.
	usageBits []uint64
	leafBits  []uint64
	hand      uint32
	spills    []spill
	freeSpil  []uint32

	holders     []holderState
	holderIdx   map[Holder]uint16
	freeHolders []uint16

	trees map[Namespace][]tree

	// counters
	pairs      int
	tierPairs  [numTiers]int
	evictions  uint64
	partials   uint64
	staleRefs  uint64
	lookups    atomic.Uint64
	lookupHits atomic.Uint64

	// cloneSpills is the one array that a clone's spills share (CloneInto
	// reuses it); nil in an index that is not a clone.
	cloneSpills []holderEntry
}

// idxBits is how many bits of a table slot the node index+1 needs: the
// arena holds at most MaxNodes live nodes plus limboSweepAt slots in limbo.
func idxBits(maxNodes int) uint {
	return uint(bits.Len64(uint64(maxNodes) + uint64(maxNodes)/8 + 1024 + 1))
}

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ix := &Index{
		cfg:       cfg.withDefaults(),
		holderIdx: map[Holder]uint16{},
		trees:     map[Namespace][]tree{},
	}
	ix.table.init(0, idxBits(ix.cfg.MaxNodes))
	return ix, nil
}

// ---- holders and nodes (callers hold mu for writing) ----

func (ix *Index) holderFor(h Holder) (uint16, error) {
	if i, ok := ix.holderIdx[h]; ok {
		return i, nil
	}
	var i uint16
	if n := len(ix.freeHolders); n > 0 {
		i = ix.freeHolders[n-1]
		ix.freeHolders = ix.freeHolders[:n-1]
	} else {
		if len(ix.holders) >= maxHolders {
			return 0, ErrTooManyHolders
		}
		i = uint16(len(ix.holders))
		ix.holders = append(ix.holders, holderState{})
	}
	old := &ix.holders[i]
	ix.holders[i] = holderState{id: h, live: true, pairs: old.pairs, holes: old.holes}
	ix.holderIdx[h] = i
	return i, nil
}

func (ix *Index) treeFor(ns Namespace, bs int) uint64 {
	ts := ix.trees[ns]
	for _, t := range ts {
		if t.blockSize == bs {
			return t.seed
		}
	}
	seed := treeSeed(ns, bs)
	ix.trees[ns] = append(ts[:len(ts):len(ts)], tree{blockSize: bs, seed: seed})
	return seed
}

// ---- events ----

// Store records that holder h holds the blocks of ev in ev.Medium, in
// namespace ns (the engine's model, and ev's own LoRAName and CacheSalt
// where set), for KV-cache group ev.Group. The chain starts at ev's
// parent, resolved through h's own engine hashes; a parent h is not known
// to hold returns ErrUnknownParent and indexes nothing. Each full block is
// indexed under (ns, ev.BlockSize); a single-block event shorter than the
// largest block size seen from h (an SGLang short last page) is a partial
// block and is not indexed. A medium sluice does not know is kept in a tier
// of its own.
//
// Groups: a block is held while any indexed group of h holds it. An event
// that declares a non-prefix GroupKind, or a Sparse event while another
// group of h is indexed, excludes its group for h: the group's holdings are
// dropped, its later events are ignored, and Store returns
// ErrGroupNotIndexed, as it does for any event of an excluded group. A
// Sparse event of h's only group is ignored the same way but excludes
// nothing, so that one odd event cannot empty a single-group holder.
// Storing a block again refreshes its recency and adds the tier and the
// group.
func (ix *Index) Store(h Holder, ns Namespace, ev *kvevents.BlockStored) error {
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
	// The first chunk's token ids start loading while the lock is taken
	// and the holder and parent are resolved.
	if !nonPrefix {
		prefetchTokens(ev.TokenIDs, 0, min(nb, storeChunk), bs)
	}
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
	// Blocks are handled in chunks: prefetch the lines the chunk will use
	// that need no hash (prefetchApply), hash the chunk, load its
	// block-table slots together (touchTable), then apply it block by
	// block. The cache misses of a chunk overlap instead of each block
	// waiting for its own in turn. The chained hashes depend only on the
	// tokens and the parent's hash, never on the index, so hashing ahead
	// computes what hashing block by block would (storeRef in the tests is
	// that loop).
	var hbuf [storeChunk]uint64
	for c0 := 0; c0 < nb; c0 += storeChunk {
		c1 := min(c0+storeChunk, nb)
		hashes := hbuf[:c1-c0]
		ix.prefetchApply(&hs.refs, ev.BlockHashes[c0:c1])
		if ev.ExtraKeys == nil {
			hashBlocks(hashes, prevHash, ev.TokenIDs[c0*bs:c1*bs], bs)
		} else {
			p := prevHash
			for i := c0; i < c1; i++ {
				p = chain(p, withExtra(contentHash(ev.TokenIDs[i*bs:(i+1)*bs]), ev.ExtraKeys[i]))
				hashes[i-c0] = p
			}
		}
		ix.touchTable(hashes)
		for i := c0; i < c1; i++ {
			hash := hashes[i-c0]
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
	}
	return nil
}

// storeChunk is how many blocks of an event Store hashes and touches at a
// time.
const storeChunk = 32

// prefetchApply prefetches, for a chunk of an event, the slots of refs
// that the chunk's engine hashes ehs start probing at, and the nodes and
// clock bits of the free slots its new blocks will take (from the end of
// the free list): lines that applying the chunk reads or writes, at random
// places. It needs no hashing, so it runs before the chunk is hashed and
// the lines arrive while it is.
func (ix *Index) prefetchApply(refs *refMap, ehs []uint64) {
	if rs := refs.slots; len(rs) > 0 {
		for _, eh := range ehs {
			prefetchLines(&rs[refHome(eh, len(rs))].klo, 1)
		}
	}
	for j := range min(len(ehs), len(ix.free)) {
		idx := ix.free[len(ix.free)-1-j]
		n := &ix.nodes[idx]
		prefetchLines(&n.hlo, 1)
		prefetchLines((*uint32)(&n.h0), 1)
		prefetchLines((*uint32)(unsafe.Pointer(&ix.usageBits[idx>>5])), 1)
		prefetchLines((*uint32)(unsafe.Pointer(&ix.leafBits[idx>>6])), 1)
	}
}

// touchTable loads the block-table slots of hashes, so that their misses
// overlap.
func (ix *Index) touchTable(hashes []uint64) {
	var sink uint64
	slots, tlen := ix.table.slots, uint64(len(ix.table.slots))
	for _, h := range hashes {
		sink += uint64(slots[reduce(h, tlen)])
	}
	lookupSink.Store(sink)
}

// excludeGroup stops indexing group g for holder hi and drops what only g
// held. It walks the holder's references once per (holder, group).
func (ix *Index) excludeGroup(hi uint16, g int32) {
	hs := &ix.holders[hi]
	bit := groupBit(g)
	if hs.excluded&bit != 0 {
		return
	}
	hs.excluded |= bit
	var drop []uint64
	hs.refs.each(func(eh uint64, _ uint32) {
		if hs.groupsOf(eh)&bit != 0 {
			drop = append(drop, eh)
		}
	})
	for _, eh := range drop {
		if rest := hs.groupsOf(eh) &^ bit; rest != 0 {
			hs.setGroups(eh, rest)
			continue
		}
		r, _ := hs.refs.get(eh)
		hs.refs.del(eh)
		hs.groups.del(eh)
		if idx, ok := ix.deref(r, hi); ok && ix.clearTiers(idx, hi, allTiers) == 0 {
			if hs.aliased {
				ix.markStale(hi) // another engine hash may name idx
			}
			ix.pruneIfEmpty(idx)
		}
	}
}

// Remove clears ev's blocks for holder h in group ev.Group: the named tier,
// or every tier when ev.AllTiers. A block another indexed group of h still
// holds stays (tiers are tracked per holder, not per group); a removal in a
// group that does not hold the block, or in an excluded group, changes
// nothing. Hashes h is not known to hold are ignored. Blocks left with no
// holder and no children are pruned, cascading to their parents.
func (ix *Index) Remove(h Holder, ev *kvevents.BlockRemoved) {
	mask := allTiers
	if !ev.AllTiers {
		mask = tierOf(ev.Medium)
	}
	g := ev.Group
	if g < 0 || g >= maxGroups {
		return
	}
	bit := groupBit(g)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	hi, ok := ix.holderIdx[h]
	if !ok {
		return
	}
	hs := &ix.holders[hi]
	if hs.excluded&bit != 0 {
		return
	}
	for _, eh := range ev.BlockHashes {
		r, ok := hs.refs.get(eh)
		if !ok {
			continue
		}
		idx, ok := ix.deref(r, hi)
		if !ok {
			hs.refs.del(eh)
			hs.groups.del(eh)
			ix.staleRefs++
			continue
		}
		if g != 0 || hs.groups.n > 0 {
			m := hs.groupsOf(eh)
			if m&bit == 0 {
				continue
			}
			if rest := m &^ bit; rest != 0 {
				hs.setGroups(eh, rest)
				continue
			}
		}
		if ix.clearTiers(idx, hi, mask) != 0 {
			continue
		}
		hs.refs.del(eh)
		hs.groups.del(eh)
		if hs.aliased {
			ix.markStale(hi) // another engine hash may name idx
		}
		ix.pruneIfEmpty(idx)
	}
}

func (ix *Index) pruneIfEmpty(idx uint32) {
	if n := &ix.nodes[idx]; n.h0 == 0 && n.nchild == 0 {
		ix.freeNode(idx)
	}
}

// Clear drops holder h from every block, as AllBlocksCleared or a new
// engine epoch requires.
func (ix *Index) Clear(h Holder) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if hi, ok := ix.holderIdx[h]; ok {
		ix.clearHolder(hi)
	}
}

func (ix *Index) clearHolder(hi uint16) {
	hs := &ix.holders[hi]
	var es []uint32
	hs.refs.each(func(_ uint64, r uint32) {
		if idx, ok := ix.deref(r, hi); ok {
			es = append(es, idx)
		}
	})
	for _, idx := range es {
		// Several engine hashes may name one node, and pruning frees
		// ancestors: clear only what the holder still holds.
		if ix.entryOf(idx, hi) != nil && ix.clearTiers(idx, hi, allTiers) == 0 {
			ix.pruneIfEmpty(idx)
		}
	}
	hs.refs = refMap{}
	hs.groups = groupMap{}
	hs.blockSize = 0
	hs.lookahead = false
	hs.aliased = false
	ix.unmarkStale(hi)
}

// RemoveEngine drops every rank of engine e, as engine removal requires,
// and forgets the holders.
func (ix *Index) RemoveEngine(e slots.Slot) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for hi := range ix.holders {
		hs := &ix.holders[hi]
		if !hs.live || hs.id.Engine != e {
			continue
		}
		ix.clearHolder(uint16(hi))
		delete(ix.holderIdx, hs.id)
		*hs = holderState{pairs: hs.pairs, holes: hs.holes}
		ix.freeHolders = append(ix.freeHolders, uint16(hi))
	}
}
