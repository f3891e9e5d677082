package kvindex

import "math/bits"

// reduce maps a well-mixed 64-bit value to [0, n) (Lemire's multiply-shift
// range reduction), so a table's length need not be a power of two.
func reduce(x uint64, n uint64) uint64 {
	hi, _ := bits.Mul64(x, n)
	return hi
}

// grownSize returns the next table length after n (at least 16): 1.5×, so
// the average load stays higher than with doubling.
func grownSize(n int) int { return max(16, n+n/2) }

// cyclicDist is how far slot to lies after slot from in a table of size n.
func cyclicDist(from, to, n uint64) uint64 {
	if to >= from {
		return to - from
	}
	return to + n - from
}

// nodeTable maps a sluice block hash to a node, by open addressing with
// linear probing. A slot packs the hash's top 32 bits (a fingerprint) with
// the node index + 1, so a probe reads one 8-byte slot and touches the node
// only on a fingerprint match. Deletion shifts entries back, so there are no
// tombstones.
type nodeTable struct {
	slots []uint64
	mask  uint64
	n     int
}

func (t *nodeTable) init(capacity int) {
	size := 16
	for size*3/4 < capacity {
		size *= 2
	}
	t.slots = make([]uint64, size)
	t.mask = uint64(size - 1)
	t.n = 0
}

func (t *nodeTable) get(nodes []node, h uint64) (uint32, bool) {
	fp := h >> 32
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i]
		if e == 0 {
			return 0, false
		}
		if e>>32 == fp {
			if idx := uint32(e) - 1; nodes[idx].hash == h {
				return idx, true
			}
		}
	}
}

// put inserts h → idx; h must not be present.
func (t *nodeTable) put(nodes []node, h uint64, idx uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow(nodes)
	}
	e := h>>32<<32 | uint64(idx+1)
	i := h & t.mask
	for t.slots[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = e
	t.n++
}

func (t *nodeTable) grow(nodes []node) {
	old := t.slots
	t.slots = make([]uint64, 2*len(old))
	t.mask = uint64(len(t.slots) - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := nodes[uint32(e)-1].hash & t.mask
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = e
	}
}

func (t *nodeTable) del(nodes []node, h uint64) {
	fp := h >> 32
	i := h & t.mask
	for {
		e := t.slots[i]
		if e == 0 {
			return
		}
		if e>>32 == fp && nodes[uint32(e)-1].hash == h {
			break
		}
		i = (i + 1) & t.mask
	}
	for j := (i + 1) & t.mask; ; j = (j + 1) & t.mask {
		e := t.slots[j]
		if e == 0 {
			break
		}
		home := nodes[uint32(e)-1].hash & t.mask
		// Move e into the hole at i unless its home lies cyclically in (i, j].
		if (j-home)&t.mask >= (j-i)&t.mask {
			t.slots[i] = e
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
}

// refMap maps an engine block hash to a node reference (generation << 32 |
// node index + 1) for one holder. A reference whose generation no longer
// matches its node is stale: the node was evicted or pruned meanwhile. Key
// and value share a slot, so a probe touches one cache line.
type refMap struct {
	slots []refSlot
	n     int
}

type refSlot struct {
	k, v uint64 // v == 0: empty
}

// refMap grows past a load of refLoadNum/refLoadDen, by 1.5×.
const refLoadNum, refLoadDen = 7, 8

func (m *refMap) home(k uint64) uint64 {
	return reduce(k*0x9e3779b97f4a7c15, uint64(len(m.slots)))
}

func (m *refMap) get(k uint64) (uint64, bool) {
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

func (m *refMap) put(k, v uint64) {
	if (m.n+1)*refLoadDen > len(m.slots)*refLoadNum {
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
	s[i] = refSlot{k, v}
	m.n++
}

// reserve grows the table once so n entries fit below the load factor.
func (m *refMap) reserve(n int) {
	size := 16
	for size*refLoadNum < (n+1)*refLoadDen {
		size = grownSize(size)
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
		i := m.home(e.k)
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
		home := m.home(s[j].k)
		if cyclicDist(home, j, size) >= cyclicDist(i, j, size) {
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

func (m *refMap) each(fn func(k, v uint64)) {
	for _, e := range m.slots {
		if e.v != 0 {
			fn(e.k, e.v)
		}
	}
}
