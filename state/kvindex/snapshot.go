package kvindex

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/state/slots"
)

// Snapshot format (little-endian): magic "SLKVIDX\x00", version uint32,
// then namespaces, holders (engine id, rank, block size, engine-hash refs,
// excluded KV-cache groups, flags, per-hash group sets) and the node arena
// verbatim with its usage counts, clock hand, free and limbo slots (so
// eviction order and slot reuse survive), then a CRC-32C of everything
// before it. Engines are written by id, not slot, because slots are
// process-local. Versions 1 (before KV-cache groups) and 2 (LRU list and
// generation-checked references) are still read.
const (
	snapshotMagic   = "SLKVIDX\x00"
	snapshotVersion = 3
	// snapshotVersionLRU is the layout with an LRU list and references
	// carrying a generation; snapshotVersionNoGroups the one before
	// KV-cache groups (its holders have group 0 only).
	snapshotVersionLRU      = 2
	snapshotVersionNoGroups = 1
	holderFlagLookahead     = 1
	holderFlagAliased       = 2
	holderFlagStale         = 4
)

// ErrCorruptSnapshot matches every error ReadSnapshot returns for bad input.
var ErrCorruptSnapshot = errors.New("kvindex: corrupt snapshot")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type snapWriter struct {
	w   *bufio.Writer
	crc uint32
	buf [8]byte
}

func (s *snapWriter) bytes(b []byte) {
	s.crc = crc32.Update(s.crc, castagnoli, b)
	_, _ = s.w.Write(b) // a bufio.Writer keeps its first error; it surfaces at Flush
}
func (s *snapWriter) u32(v uint32) { binary.LittleEndian.PutUint32(s.buf[:4], v); s.bytes(s.buf[:4]) }
func (s *snapWriter) u64(v uint64) { binary.LittleEndian.PutUint64(s.buf[:8], v); s.bytes(s.buf[:8]) }
func (s *snapWriter) str(v string) { s.u32(uint32(len(v))); s.bytes([]byte(v)) }

// WriteSnapshot writes the whole index to w. names maps engine slots to
// ids. Writers wait while it runs; lookups do not.
func (ix *Index) WriteSnapshot(w io.Writer, names *slots.Table) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := &snapWriter{w: bufio.NewWriterSize(w, 1<<16)}
	s.bytes([]byte(snapshotMagic))
	s.u32(snapshotVersion)
	s.u32(uint32(len(ix.trees)))
	// Namespaces in a fixed order, so that equal indexes write equal bytes.
	nss := slices.SortedFunc(maps.Keys(ix.trees), func(a, b Namespace) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.LoRA, b.LoRA), strings.Compare(a.CacheSalt, b.CacheSalt))
	})
	for _, ns := range nss {
		ts := ix.trees[ns]
		s.str(ns.Model)
		s.str(ns.LoRA)
		s.str(ns.CacheSalt)
		s.u32(uint32(len(ts)))
		for _, t := range ts {
			s.u32(uint32(t.blockSize))
		}
	}
	s.u32(uint32(len(ix.holders)))
	for i := range ix.holders {
		hs := &ix.holders[i]
		if !hs.live {
			s.u32(0)
			continue
		}
		id := names.ID(hs.id.Engine)
		if id == "" {
			return fmt.Errorf("write kv index snapshot: engine slot %d has no id", hs.id.Engine)
		}
		s.u32(1)
		s.str(id)
		s.u32(uint32(hs.id.Rank))
		s.u32(uint32(hs.blockSize))
		s.u32(uint32(hs.refs.n))
		hs.refs.each(func(k uint64, v uint32) { s.u64(k); s.u32(v) })
		s.u64(hs.excluded)
		s.u64(hs.seen)
		var flags uint32
		if hs.lookahead {
			flags |= holderFlagLookahead
		}
		if hs.aliased {
			flags |= holderFlagAliased
		}
		if hs.stale {
			flags |= holderFlagStale
		}
		s.u32(flags)
		s.u32(uint32(hs.groups.n))
		hs.groups.each(func(k, v uint64) { s.u64(k); s.u64(v) })
	}
	s.u32(uint32(len(ix.nodes)))
	s.u32(ix.hand)
	var one [1]holderEntry
	for i := range ix.nodes {
		n := &ix.nodes[i]
		s.u64(n.hash())
		s.u32(n.parent)
		s.u32(n.nchild)
		es := ix.entries(n, &one)
		s.u32(uint32(len(es)))
		for _, e := range es {
			s.u32(uint32(e.withKids(0))) // child counts are derived; rebuild recounts them
		}
	}
	for i := range (len(ix.nodes) + 31) / 32 {
		s.u64(atomic.LoadUint64(&ix.usageBits[i])) // Lookup sets usage under the read lock
	}
	for _, l := range [...][]uint32{ix.free, ix.limbo} {
		s.u32(uint32(len(l)))
		for _, idx := range l {
			s.u32(idx)
		}
	}
	crc := s.crc
	binary.LittleEndian.PutUint32(s.buf[:4], crc)
	_, _ = s.w.Write(s.buf[:4]) // surfaces at Flush
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("write kv index snapshot: %w", err)
	}
	return nil
}

type snapReader struct {
	r   *bufio.Reader
	crc uint32
	err error
	buf [8]byte
}

func (s *snapReader) fill(b []byte) {
	if s.err != nil {
		clear(b)
		return
	}
	if _, err := io.ReadFull(s.r, b); err != nil {
		s.err = fmt.Errorf("%w: truncated (%w)", ErrCorruptSnapshot, err)
		clear(b)
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, b)
}
func (s *snapReader) u32() uint32 { s.fill(s.buf[:4]); return binary.LittleEndian.Uint32(s.buf[:4]) }
func (s *snapReader) u64() uint64 { s.fill(s.buf[:8]); return binary.LittleEndian.Uint64(s.buf[:8]) }
func (s *snapReader) count(limit int, what string) int {
	n := s.u32()
	if s.err == nil && int64(n) > int64(limit) {
		s.err = fmt.Errorf("%w: %d %s, more than %d", ErrCorruptSnapshot, n, what, limit)
		return 0
	}
	return int(n)
}
func (s *snapReader) str() string {
	n := s.count(1<<20, "string bytes")
	b := make([]byte, n)
	s.fill(b)
	return string(b)
}

// ReadSnapshot builds an index from a snapshot written by WriteSnapshot
// (any version), interning engine ids in names. It returns an error
// matching ErrCorruptSnapshot, and no index, for a truncated, altered or
// inconsistent snapshot, and an error when the snapshot holds more nodes
// than cfg.MaxNodes.
func ReadSnapshot(r io.Reader, cfg Config, names *slots.Table) (*Index, error) {
	ix, err := New(cfg)
	if err != nil {
		return nil, err
	}
	s := &snapReader{r: bufio.NewReaderSize(r, 1<<16)}
	magic := make([]byte, len(snapshotMagic))
	s.fill(magic)
	if s.err == nil && string(magic) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	version := s.u32()
	if s.err == nil && (version < snapshotVersionNoGroups || version > snapshotVersion) {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorruptSnapshot, version, snapshotVersion)
	}
	for range s.count(1<<20, "namespaces") {
		ns := Namespace{Model: s.str(), LoRA: s.str(), CacheSalt: s.str()}
		for range s.count(1<<10, "block sizes") {
			ix.treeFor(ns, int(s.u32()))
		}
	}
	// Before version 3 a reference carried its node's generation; those
	// whose generation no longer matched were stale. They are checked once
	// the nodes are read.
	type oldRef struct {
		h   uint16
		k   uint64
		gen uint32
	}
	var oldRefs []oldRef
	nh := s.count(maxHolders, "holders")
	ix.holders = make([]holderState, 0, min(nh, 1024))
	for i := range nh {
		hs := holderState{}
		if s.u32() == 1 {
			id := s.str()
			hs.id = Holder{Engine: names.Intern(id), Rank: int32(s.u32())}
			hs.live = true
			hs.blockSize = int(s.u32())
			nrefs := s.count(1<<31, "refs")
			// Size the map once: refs arrive in the writer's slot order, and inserting them into a
			// growing table with the same hash clusters them into quadratic probing.
			hs.refs.reserve(min(nrefs, 1<<26))
			for range nrefs {
				k := s.u64()
				var v uint32
				if version >= snapshotVersion {
					v = s.u32()
				} else {
					v64 := s.u64()
					v = uint32(v64)
					oldRefs = append(oldRefs, oldRef{uint16(i), k, uint32(v64 >> 32)})
				}
				if s.err != nil {
					break
				}
				if v == 0 {
					s.err = fmt.Errorf("%w: empty engine-hash reference", ErrCorruptSnapshot)
					break
				}
				hs.refs.put(k, v)
			}
			hs.seen = 1 // version 1: everything was group 0
			if version >= snapshotVersionLRU {
				hs.excluded = s.u64()
				hs.seen = s.u64()
				flags := s.u32()
				hs.lookahead = flags&holderFlagLookahead != 0
				if version >= snapshotVersion {
					hs.aliased = flags&holderFlagAliased != 0
					hs.stale = flags&holderFlagStale != 0
				}
				ng := s.count(1<<31, "group sets")
				hs.groups.reserve(min(ng, 1<<26))
				for range ng {
					k, v := s.u64(), s.u64()
					if s.err != nil {
						break
					}
					if _, ok := hs.refs.get(k); !ok || v == 0 {
						s.err = fmt.Errorf("%w: group set for an engine hash the holder does not hold", ErrCorruptSnapshot)
						break
					}
					hs.groups.put(k, v)
				}
			}
			if _, dup := ix.holderIdx[hs.id]; dup && s.err == nil {
				s.err = fmt.Errorf("%w: holder %v twice", ErrCorruptSnapshot, hs.id)
			}
			ix.holderIdx[hs.id] = uint16(i)
			if hs.stale {
				ix.nstale++
			}
		} else {
			ix.freeHolders = append(ix.freeHolders, uint16(i))
		}
		ix.holders = append(ix.holders, hs)
		if s.err != nil {
			return nil, s.err
		}
	}
	if version >= snapshotVersion {
		err = ix.readNodes(s)
	} else {
		err = ix.readOldNodes(s, func(gens []uint32) {
			for _, o := range oldRefs {
				hs := &ix.holders[o.h]
				v, _ := hs.refs.get(o.k)
				if idx := v - 1; int(idx) >= len(gens) || gens[idx] != o.gen || ix.nodes[idx].isFree() {
					hs.refs.del(o.k)
					hs.groups.del(o.k)
				}
			}
		})
	}
	if err != nil {
		return nil, err
	}
	want := s.crc
	var tail [4]byte
	if _, err := io.ReadFull(s.r, tail[:]); err != nil && s.err == nil {
		s.err = fmt.Errorf("%w: truncated checksum", ErrCorruptSnapshot)
	}
	if s.err != nil {
		return nil, s.err
	}
	if got := binary.LittleEndian.Uint32(tail[:]); got != want {
		return nil, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorruptSnapshot, got, want)
	}
	if _, err := s.r.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing bytes", ErrCorruptSnapshot)
	}
	if err := ix.rebuild(version >= snapshotVersion); err != nil {
		return nil, err
	}
	return ix, nil
}

// readEntries reads a node's holder entries into it.
func (ix *Index) readEntries(s *snapReader, n *node) {
	k := s.count(maxHolders, "holder entries")
	switch {
	case k == 1:
		n.h0 = holderEntry(s.u32())
		if n.h0 == 0 || n.h0&spilledFlag != 0 {
			s.err = fmt.Errorf("%w: bad holder entry %08x", ErrCorruptSnapshot, uint32(n.h0))
		}
	case k > 1:
		list := make([]holderEntry, k)
		for j := range list {
			list[j] = holderEntry(s.u32())
		}
		ix.spills = append(ix.spills, spill{e: list})
		n.h0 = spillRef(len(ix.spills) - 1)
	}
}

// readNodes reads the arena of a current-version snapshot.
func (ix *Index) readNodes(s *snapReader) error {
	nn := s.count(ix.cfg.MaxNodes+ix.cfg.MaxNodes/8+1024, "node slots")
	ix.hand = s.u32()
	ix.nodes = make([]node, 0, min(nn, 1<<20))
	for range nn {
		var n node
		n.setHash(s.u64())
		n.parent, n.nchild = s.u32(), s.u32()
		ix.readEntries(s, &n)
		if s.err != nil {
			return s.err
		}
		ix.nodes = append(ix.nodes, n)
	}
	ix.usageBits = make([]uint64, (nn+31)/32)
	for i := range ix.usageBits {
		ix.usageBits[i] = s.u64()
	}
	for _, l := range [...]*[]uint32{&ix.free, &ix.limbo} {
		k := s.count(nn, "free slots")
		*l = make([]uint32, 0, k)
		for range k {
			*l = append(*l, s.u32())
		}
	}
	return s.err
}

// readOldNodes reads the arena of a version 1 or 2 snapshot (LRU links and
// generations), keeping slot positions; checkRefs gets the generations.
func (ix *Index) readOldNodes(s *snapReader, checkRefs func(gens []uint32)) error {
	nn := s.count(ix.cfg.MaxNodes, "nodes")
	_, _, _ = s.u32(), s.u32(), s.u32() // free list head, LRU ends: rebuilt
	ix.nodes = make([]node, 0, min(nn, 1<<20))
	gens := make([]uint32, 0, min(nn, 1<<20))
	ix.usageBits = make([]uint64, (nn+31)/32)
	for i := range nn {
		var n node
		n.setHash(s.u64())
		n.parent, n.nchild = s.u32(), s.u32()
		_, _ = s.u32(), s.u32() // prev, next
		gens = append(gens, s.u32())
		used := s.u32()
		h0 := holderEntry(s.u32())
		sp := s.count(maxHolders, "holder entries")
		list := make([]holderEntry, 0, sp+1)
		if h0 != 0 {
			list = append(list, h0)
		}
		for range sp {
			list = append(list, holderEntry(s.u32()))
		}
		if s.err != nil {
			return s.err
		}
		for _, e := range list {
			if e&spilledFlag != 0 {
				return fmt.Errorf("%w: node %d has a bad holder entry %08x", ErrCorruptSnapshot, i, uint32(e))
			}
		}
		switch {
		case len(list) == 1:
			n.h0 = list[0]
		case len(list) > 1:
			ix.spills = append(ix.spills, spill{e: list})
			n.h0 = spillRef(len(ix.spills) - 1)
		}
		if n.isFree() {
			n = node{}
			ix.free = append(ix.free, uint32(i))
		} else {
			u := uint64(1)
			if used != 0 {
				u = usageMax
			}
			ix.usageBits[i/32] |= u << (i % 32 * 2)
		}
		ix.nodes = append(ix.nodes, n)
	}
	if s.err == nil {
		checkRefs(gens)
	}
	return s.err
}

// rebuild recomputes what the snapshot does not store (node table, leaf
// bits, holder fingerprints, child counts, counters) and checks the arena's
// links, so a snapshot whose checksum matches but whose content is
// inconsistent is still rejected. With exactRefs (a current-version
// snapshot) the free and limbo lists are as written and every reference of
// a holder not marked stale must name a block it holds; otherwise references
// that do not are dropped.
func (ix *Index) rebuild(exactRefs bool) error {
	n := uint32(len(ix.nodes))
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, args...)...)
	}
	listed := make([]bool, n)
	for _, l := range [...][]uint32{ix.free, ix.limbo} {
		for _, f := range l {
			if f >= n || listed[f] || !ix.nodes[f].isFree() || ix.nodes[f] != (node{}) {
				return bad("free slot %d bad", f)
			}
			listed[f] = true
		}
	}
	if ix.hand > n {
		return bad("clock hand %d out of range", ix.hand)
	}
	ix.leafBits = make([]uint64, (n+63)/64)
	if len(ix.usageBits) < int((n+31)/32) {
		return bad("usage counts missing")
	}
	ix.table.init(int(n), idxBits(ix.cfg.MaxNodes))
	children := make([]uint32, n)
	for i := range ix.nodes {
		nd := &ix.nodes[i]
		if nd.isFree() {
			if !listed[i] {
				return bad("free slot %d not listed", i)
			}
			if ix.usage(uint32(i)) != 0 {
				return bad("free slot %d has a usage count", i)
			}
			continue
		}
		if nd.parent > n || (nd.parent != 0 && (ix.nodes[nd.parent-1].isFree() || nd.parent-1 == uint32(i))) {
			return bad("node %d links out of range", i)
		}
		if nd.parent != 0 {
			children[nd.parent-1]++
		}
		if _, dup := ix.table.get(ix.nodes, nd.hash()); dup {
			return bad("block hash %x twice", nd.hash())
		}
		ix.table.put(ix.nodes, nd.hash(), uint32(i))
		ix.live++
		var one [1]holderEntry
		es := ix.entries(nd, &one)
		var hset uint64
		for j, e := range es {
			if e.tiers() == 0 || e.tiers()&^allTiers != 0 || e.kids() != 0 || e&spilledFlag != 0 ||
				int(e.holder()) >= len(ix.holders) || !ix.holders[e.holder()].live {
				return bad("node %d has a bad holder entry %08x", i, uint32(e))
			}
			for _, o := range es[:j] {
				if o.holder() == e.holder() {
					return bad("node %d holds holder %d twice", i, e.holder())
				}
			}
			ix.countPair(0, e.tiers())
			hset ^= holderBit(e.holder())
		}
		if nd.spilled() {
			ix.spills[nd.spillIndex()].hset = hset
		}
	}
	for i := range ix.nodes {
		nd := &ix.nodes[i]
		if nd.isFree() {
			continue
		}
		if nd.nchild != children[i] {
			return bad("node %d counts %d children, has %d", i, nd.nchild, children[i])
		}
		if nd.nchild == 0 {
			ix.setLeaf(uint32(i), true)
		}
	}
	if ix.live > ix.cfg.MaxNodes {
		return fmt.Errorf("read kv index snapshot: %d nodes exceed MaxNodes %d", ix.live, ix.cfg.MaxNodes)
	}
	// A parent chain that loops never reaches a root.
	depth := make([]uint32, n) // 0 = unknown, else depth+1
	for i := range ix.nodes {
		var path []uint32
		j := uint32(i)
		for !ix.nodes[j].isFree() && depth[j] == 0 {
			if len(path) > int(n) {
				return bad("node %d: parent links loop", i)
			}
			path = append(path, j)
			if ix.nodes[j].parent == 0 {
				depth[j] = 1
				break
			}
			j = ix.nodes[j].parent - 1
		}
		for k := len(path) - 1; k >= 0; k-- {
			if depth[path[k]] == 0 {
				depth[path[k]] = depth[ix.nodes[path[k]].parent-1] + 1
			}
		}
	}
	for hi := range ix.holders {
		hs := &ix.holders[hi]
		var drop []uint64
		hs.refs.each(func(k uint64, r uint32) {
			if int(r-1) >= int(n) {
				drop = append(drop, k)
			} else if _, ok := ix.deref(r, uint16(hi)); !ok && !hs.stale {
				drop = append(drop, k)
			}
		})
		if exactRefs && len(drop) > 0 {
			return bad("holder %v has %d references to blocks it does not hold", hs.id, len(drop))
		}
		for _, k := range drop {
			hs.refs.del(k)
			hs.groups.del(k)
		}
	}
	// Recount the hole bookkeeping (see holderState) now that every
	// parent's entries are in place.
	for i := range ix.nodes {
		nd := &ix.nodes[i]
		if nd.isFree() {
			continue
		}
		var one [1]holderEntry
		for _, e := range ix.entries(nd, &one) {
			h := e.holder()
			ix.holders[h].pairs++
			if nd.parent == 0 {
				continue
			}
			if pe := ix.entryOf(nd.parent-1, h); pe == nil {
				ix.holders[h].holes++
			} else if k := pe.kids(); k < maxKids {
				*pe = pe.withKids(k + 1)
			}
		}
	}
	return nil
}
