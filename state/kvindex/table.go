package kvindex

import "math/bits"

// The index's hash tables are hand-written rather than Go maps or a
// library's (swiss tables such as Go's own map, dolthub/swiss,
// cockroachdb/swiss): those store a whole key and value per slot plus a
// control byte, 16–24 bytes for a uint64 → uint32 entry, where the block
// table needs 4 (the key is already in the node it points to) and the
// engine-hash map 12. At the index's scale (millions of blocks) those bytes
// are most of its memory; see BENCHMARKS.md.

// reduce maps a well-mixed 64-bit value to [0, n) (Lemire's multiply-shift
// range reduction), so a table's length need not be a power of two.
func reduce(x uint64, n uint64) uint64 {
	hi, _ := bits.Mul64(x, n)
	return hi
}

// grownSize returns the next table length after n (at least 16): 2× up
// to 512 slots, where memory hardly matters and rehashing often would,
// then 1.25×, so that a table's load stays between 70 and 87.5 %.
func grownSize(n int) int {
	if n < 512 {
		return max(16, 2*n)
	}
	return n + n/4
}

// refGrownSize is grownSize for the engine-hash maps, which double up to
// 2048 slots (24 KB): below that a holder's map is a small part of the
// index's memory however many holders there are, and a holder that starts
// or refills from empty (a new engine, a cleared cache) would otherwise
// rehash every entry about three times on the way (1.25× steps from 512
// slots); measured in BenchmarkApply, where that was a fifth of Store.
func refGrownSize(n int) int {
	if n < 2048 {
		return max(16, 2*n)
	}
	return n + n/4
}

// cyclicDist is how far slot to lies after slot from in a table of size n.
func cyclicDist(from, to, n uint64) uint64 {
	if to >= from {
		return to - from
	}
	return to + n - from
}

// The tables grow past a load of loadNum/loadDen (see grownSize). A lower
// load for the block table (3/4) measured no faster lookups.
const loadNum, loadDen = 7, 8

// nodeTable maps a sluice block hash to a node, by open addressing with
// linear probing. A slot is 4 bytes: the node index + 1 in the low idxBits
// bits and, above them, the same bits of the block hash's low word as a
// fingerprint, so a probe touches a node only on a fingerprint match. The
// home slot comes from the hash's high bits (reduce), the fingerprint from
// its low bits, so the two are independent. Deletion shifts entries back,
// so there are no tombstones.
type nodeTable struct {
	slots   []uint32
	n       int
	idxMask uint32 // low bits holding index+1
}

func (t *nodeTable) init(capacity int, idxBits uint) {
	size := 16
	for size*loadNum < (capacity+1)*loadDen {
		size = grownSize(size)
	}
	t.slots = make([]uint32, size)
	t.n = 0
	t.idxMask = uint32(uint64(1)<<idxBits - 1)
}

func (t *nodeTable) home(h uint64) uint64 { return reduce(h, uint64(len(t.slots))) }

func (t *nodeTable) fp(h uint64) uint32 { return uint32(h) &^ t.idxMask }

// get returns the index of the node with hash h.
func (t *nodeTable) get(nodes []node, h uint64) (uint32, bool) {
	s := t.slots
	fp := t.fp(h)
	for i := t.home(h); ; {
		e := s[i]
		if e == 0 {
			return 0, false
		}
		if e&^t.idxMask == fp {
			if idx := e&t.idxMask - 1; nodes[idx].hash() == h {
				return idx, true
			}
		}
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
}

// candidate returns the first entry on h's probe path whose fingerprint
// matches (index+1), or 0: the node get will most likely read, which a
// batched lookup touches early so that the misses overlap.
func (t *nodeTable) candidate(h uint64) uint32 {
	s := t.slots
	fp := t.fp(h)
	for i := t.home(h); ; {
		e := s[i]
		if e == 0 || e&^t.idxMask == fp {
			return e & t.idxMask
		}
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
}

// put inserts h → idx; h must not be present.
func (t *nodeTable) put(nodes []node, h uint64, idx uint32) {
	if (t.n+1)*loadDen > len(t.slots)*loadNum {
		t.resize(nodes, grownSize(len(t.slots)))
	}
	t.insert(h, t.fp(h)|(idx+1))
	t.n++
}

func (t *nodeTable) insert(h uint64, e uint32) {
	s := t.slots
	i := t.home(h)
	for s[i] != 0 {
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
	s[i] = e
}

func (t *nodeTable) resize(nodes []node, size int) {
	old := t.slots
	t.slots = make([]uint32, size)
	for _, e := range old {
		if e != 0 {
			t.insert(nodes[e&t.idxMask-1].hash(), e)
		}
	}
}

func (t *nodeTable) del(nodes []node, h uint64) {
	s := t.slots
	size := uint64(len(s))
	fp := t.fp(h)
	i := t.home(h)
	for {
		e := s[i]
		if e == 0 {
			return
		}
		if e&^t.idxMask == fp && nodes[e&t.idxMask-1].hash() == h {
			break
		}
		if i++; i == size {
			i = 0
		}
	}
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		e := s[j]
		if e == 0 {
			break
		}
		// Move e into the hole at i unless its home lies cyclically in (i, j].
		if home := t.home(nodes[e&t.idxMask-1].hash()); cyclicDist(home, j, size) >= cyclicDist(i, j, size) {
			s[i] = e
			i = j
		}
	}
	s[i] = 0
	t.n--
}

// refMap maps an engine block hash to a node (index + 1) for one holder.
// A slot is 12 bytes (the 64-bit key in two words, then the value), so a
// probe usually touches one cache line. A value naming a node the holder no
// longer holds is stale (see Index.deref).
type refMap struct {
	slots []refSlot
	n     int
}

type refSlot struct {
	klo, khi uint32
	v        uint32 // 0: empty
}

func (e *refSlot) key() uint64 { return uint64(e.klo) | uint64(e.khi)<<32 }

func refHome(k uint64, n int) uint64 { return reduce(k*0x9e3779b97f4a7c15, uint64(n)) }

func (m *refMap) get(k uint64) (uint32, bool) {
	if m.n == 0 {
		return 0, false
	}
	s := m.slots
	lo, hi := uint32(k), uint32(k>>32)
	for i := refHome(k, len(s)); ; {
		e := &s[i]
		if e.v == 0 {
			return 0, false
		}
		if e.klo == lo && e.khi == hi {
			return e.v, true
		}
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
}

func (m *refMap) put(k uint64, v uint32) {
	if (m.n+1)*loadDen > len(m.slots)*loadNum {
		m.resize(refGrownSize(len(m.slots)))
	}
	s := m.slots
	lo, hi := uint32(k), uint32(k>>32)
	i := refHome(k, len(s))
	for s[i].v != 0 {
		if s[i].klo == lo && s[i].khi == hi {
			s[i].v = v
			return
		}
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
	s[i] = refSlot{lo, hi, v}
	m.n++
}

// reserve grows the table once so n entries fit below the load factor.
func (m *refMap) reserve(n int) {
	size := 16
	for size*loadNum < (n+1)*loadDen {
		size = refGrownSize(size)
	}
	if size > len(m.slots) {
		m.resize(size)
	}
}

func (m *refMap) resize(size int) {
	old := m.slots
	m.slots = make([]refSlot, size)
	s := m.slots
	for _, e := range old {
		if e.v == 0 {
			continue
		}
		i := refHome(e.key(), size)
		for s[i].v != 0 {
			if i++; i == uint64(size) {
				i = 0
			}
		}
		s[i] = e
	}
}

func (m *refMap) del(k uint64) {
	if m.n == 0 {
		return
	}
	s := m.slots
	size := uint64(len(s))
	lo, hi := uint32(k), uint32(k>>32)
	i := refHome(k, len(s))
	for {
		if s[i].v == 0 {
			return
		}
		if s[i].klo == lo && s[i].khi == hi {
			break
		}
		if i++; i == size {
			i = 0
		}
	}
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if s[j].v == 0 {
			break
		}
		if home := refHome(s[j].key(), len(s)); cyclicDist(home, j, size) >= cyclicDist(i, j, size) {
			s[i] = s[j]
			i = j
		}
	}
	s[i] = refSlot{}
	m.n--
	if m.n == 0 {
		*m = refMap{}
	}
}

func (m *refMap) each(fn func(k uint64, v uint32)) {
	for i := range m.slots {
		if e := &m.slots[i]; e.v != 0 {
			fn(e.key(), e.v)
		}
	}
}

// groupMap maps an engine block hash to a 64-bit set of KV-cache groups.
// Only holders of hybrid models have entries (see holderState.groups), so
// it keeps the simpler 16-byte slot.
type groupMap struct {
	slots []groupSlot
	n     int
}

type groupSlot struct {
	k, v uint64 // v == 0: empty
}

func (m *groupMap) home(k uint64) uint64 { return refHome(k, len(m.slots)) }

func (m *groupMap) get(k uint64) (uint64, bool) {
	if m.n == 0 {
		return 0, false
	}
	s := m.slots
	for i := m.home(k); ; {
		e := &s[i]
		if e.v == 0 {
			return 0, false
		}
		if e.k == k {
			return e.v, true
		}
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
}

func (m *groupMap) put(k, v uint64) {
	if (m.n+1)*loadDen > len(m.slots)*loadNum {
		m.resize(grownSize(len(m.slots)))
	}
	s := m.slots
	i := m.home(k)
	for s[i].v != 0 {
		if s[i].k == k {
			s[i].v = v
			return
		}
		if i++; i == uint64(len(s)) {
			i = 0
		}
	}
	s[i] = groupSlot{k, v}
	m.n++
}

func (m *groupMap) reserve(n int) {
	size := 16
	for size*loadNum < (n+1)*loadDen {
		size = grownSize(size)
	}
	if size > len(m.slots) {
		m.resize(size)
	}
}

func (m *groupMap) resize(size int) {
	old := m.slots
	m.slots = make([]groupSlot, size)
	s := m.slots
	for _, e := range old {
		if e.v == 0 {
			continue
		}
		i := m.home(e.k)
		for s[i].v != 0 {
			if i++; i == uint64(size) {
				i = 0
			}
		}
		s[i] = e
	}
}

func (m *groupMap) del(k uint64) {
	if m.n == 0 {
		return
	}
	s := m.slots
	size := uint64(len(s))
	i := m.home(k)
	for {
		if s[i].v == 0 {
			return
		}
		if s[i].k == k {
			break
		}
		if i++; i == size {
			i = 0
		}
	}
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if s[j].v == 0 {
			break
		}
		if home := m.home(s[j].k); cyclicDist(home, j, size) >= cyclicDist(i, j, size) {
			s[i] = s[j]
			i = j
		}
	}
	s[i] = groupSlot{}
	m.n--
	if m.n == 0 {
		*m = groupMap{}
	}
}

func (m *groupMap) each(fn func(k, v uint64)) {
	for _, e := range m.slots {
		if e.v != 0 {
			fn(e.k, e.v)
		}
	}
}
