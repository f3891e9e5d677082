package kvindex

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync/atomic"

	"github.com/sluicehq/sluice/state/slots"
)

// Snapshot format (little-endian): magic "SLKVIDX\x00", version uint32,
// then namespaces, holders (engine id, rank, block size, engine-hash refs;
// from version 2 also excluded KV-cache groups, flags and per-hash group
// sets) and the node arena verbatim (so LRU order, free list and generations
// survive), then a CRC-32C of everything before it. Engines are written by
// id, not slot, because slots are process-local.
const (
	snapshotMagic   = "SLKVIDX\x00"
	snapshotVersion = 2
	// snapshotVersionNoGroups is the version before KV-cache groups; it
	// is still read (its holders have group 0 only).
	snapshotVersionNoGroups = 1
	holderFlagLookahead     = 1
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
	return ix.writeSnapshot(w, names, snapshotVersion)
}

// writeSnapshot writes the given format version; tests write version 1 to
// check it is still read.
func (ix *Index) writeSnapshot(w io.Writer, names *slots.Table, version uint32) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := &snapWriter{w: bufio.NewWriterSize(w, 1<<16)}
	s.bytes([]byte(snapshotMagic))
	s.u32(version)
	s.u32(uint32(len(ix.trees)))
	for ns, ts := range ix.trees {
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
		hs.refs.each(func(k, v uint64) { s.u64(k); s.u64(v) })
		if version < snapshotVersion {
			continue
		}
		s.u64(hs.excluded)
		s.u64(hs.seen)
		var flags uint32
		if hs.lookahead {
			flags |= holderFlagLookahead
		}
		s.u32(flags)
		s.u32(uint32(hs.groups.n))
		hs.groups.each(func(k, v uint64) { s.u64(k); s.u64(v) })
	}
	s.u32(uint32(len(ix.nodes)))
	s.u32(ix.free)
	s.u32(ix.head)
	s.u32(ix.tail)
	for i := range ix.nodes {
		n := &ix.nodes[i]
		s.u64(n.hash)
		s.u32(n.parent)
		s.u32(n.nchild)
		s.u32(n.prev)
		s.u32(n.next)
		s.u32(n.gen)
		s.u32(atomic.LoadUint32(&n.ref)) // Lookup sets it under the read lock
		s.u32(uint32(n.h0.withKids(0)))  // child counts are derived; rebuild recounts them
		var sp []holderEntry
		if n.spill != 0 {
			sp = ix.spills[n.spill-1]
		}
		s.u32(uint32(len(sp)))
		for _, e := range sp {
			s.u32(uint32(e.withKids(0)))
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

// ReadSnapshot builds an index from a snapshot written by WriteSnapshot,
// interning engine ids in names. It returns an error matching
// ErrCorruptSnapshot, and no index, for a truncated, altered or
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
	if s.err == nil && version != snapshotVersion && version != snapshotVersionNoGroups {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorruptSnapshot, version, snapshotVersion)
	}
	for range s.count(1<<20, "namespaces") {
		ns := Namespace{Model: s.str(), LoRA: s.str(), CacheSalt: s.str()}
		for range s.count(1<<10, "block sizes") {
			ix.treeFor(ns, int(s.u32()))
		}
	}
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
				k, v := s.u64(), s.u64()
				if s.err != nil {
					break
				}
				hs.refs.put(k, v)
			}
			hs.seen = 1 // version 1: everything was group 0
			if version >= snapshotVersion {
				hs.excluded = s.u64()
				hs.seen = s.u64()
				hs.lookahead = s.u32()&holderFlagLookahead != 0
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
		} else {
			ix.freeHolders = append(ix.freeHolders, uint16(i))
		}
		ix.holders = append(ix.holders, hs)
		if s.err != nil {
			return nil, s.err
		}
	}
	nn := s.count(ix.cfg.MaxNodes, "nodes")
	ix.free, ix.head, ix.tail = s.u32(), s.u32(), s.u32()
	ix.nodes = make([]node, 0, min(nn, 1<<20))
	for range nn {
		n := node{hash: s.u64(), parent: s.u32(), nchild: s.u32(), prev: s.u32(), next: s.u32(),
			gen: s.u32(), ref: s.u32(), h0: holderEntry(s.u32())}
		sp := s.count(maxHolders, "holder entries")
		if sp > 0 {
			list := make([]holderEntry, sp)
			for j := range list {
				list[j] = holderEntry(s.u32())
			}
			ix.spills = append(ix.spills, list)
			n.spill = uint32(len(ix.spills))
		}
		if s.err != nil {
			return nil, s.err
		}
		ix.nodes = append(ix.nodes, n)
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
	if err := ix.rebuild(); err != nil {
		return nil, err
	}
	return ix, nil
}

// rebuild recomputes what the snapshot does not store (node table,
// counters) and checks the arena's links, so a snapshot whose checksum
// matches but whose content is inconsistent is still rejected.
func (ix *Index) rebuild() error {
	n := uint32(len(ix.nodes))
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, args...)...)
	}
	isFree := make([]bool, n)
	steps := uint32(0)
	for f := ix.free; f != 0; f = ix.nodes[f-1].next {
		if f > n || isFree[f-1] || steps > n {
			return bad("free list broken at %d", f)
		}
		isFree[f-1] = true
		steps++
	}
	for _, l := range [...]uint32{ix.head, ix.tail} {
		if l > n || (l != 0 && isFree[l-1]) {
			return bad("LRU end %d out of range", l)
		}
	}
	ix.table.init(int(n))
	for i := range ix.nodes {
		nd := &ix.nodes[i]
		if isFree[i] {
			continue
		}
		if nd.parent > n || nd.prev > n || nd.next > n || (nd.parent != 0 && isFree[nd.parent-1]) {
			return bad("node %d links out of range", i)
		}
		if _, dup := ix.table.get(ix.nodes, nd.hash); dup {
			return bad("block hash %x twice", nd.hash)
		}
		ix.table.put(ix.nodes, nd.hash, uint32(i))
		ix.live++
		entries := []holderEntry{nd.h0}
		if nd.spill != 0 {
			entries = append(entries, ix.spills[nd.spill-1]...)
		}
		for _, e := range entries {
			if e == 0 && nd.h0 == 0 && nd.spill == 0 {
				continue
			}
			if e.tiers() == 0 || e.tiers()&^allTiers != 0 || e.kids() != 0 || int(e.holder()) >= len(ix.holders) || !ix.holders[e.holder()].live {
				return bad("node %d has a bad holder entry %08x", i, uint32(e))
			}
			ix.countPair(0, e.tiers())
			nd.hset ^= holderBit(e.holder())
		}
	}
	if ix.live > ix.cfg.MaxNodes {
		return fmt.Errorf("read kv index snapshot: %d nodes exceed MaxNodes %d", ix.live, ix.cfg.MaxNodes)
	}
	// Recount the hole bookkeeping (see holderState) now that every
	// parent's entries are in place.
	for i := range ix.nodes {
		if isFree[i] {
			continue
		}
		nd := &ix.nodes[i]
		each := func(e holderEntry) {
			h := e.holder()
			ix.holders[h].pairs++
			if nd.parent == 0 {
				return
			}
			if pe := ix.entryOf(nd.parent-1, h); pe == nil {
				ix.holders[h].holes++
			} else if k := pe.kids(); k < maxKids {
				*pe = pe.withKids(k + 1)
			}
		}
		if nd.h0 != 0 {
			each(nd.h0)
		}
		if nd.spill != 0 {
			for _, e := range ix.spills[nd.spill-1] {
				each(e)
			}
		}
	}
	return nil
}
