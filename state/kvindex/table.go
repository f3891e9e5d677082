package kvindex

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
// matches its node is stale: the node was evicted or pruned meanwhile.
type refMap struct {
	keys  []uint64
	vals  []uint64 // 0 = empty
	shift uint8
	n     int
}

func (m *refMap) home(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> m.shift }

func (m *refMap) get(k uint64) (uint64, bool) {
	if m.n == 0 {
		return 0, false
	}
	mask := uint64(len(m.keys) - 1)
	for i := m.home(k); ; i = (i + 1) & mask {
		v := m.vals[i]
		if v == 0 {
			return 0, false
		}
		if m.keys[i] == k {
			return v, true
		}
	}
}

func (m *refMap) put(k, v uint64) {
	if (m.n+1)*8 > len(m.keys)*7 {
		m.resize(max(16, 2*len(m.keys)))
	}
	mask := uint64(len(m.keys) - 1)
	i := m.home(k)
	for ; m.vals[i] != 0; i = (i + 1) & mask {
		if m.keys[i] == k {
			m.vals[i] = v
			return
		}
	}
	m.keys[i], m.vals[i] = k, v
	m.n++
}

// reserve grows the table once so n entries fit below the load factor.
func (m *refMap) reserve(n int) {
	size := 16
	for size*7 < (n+1)*8 {
		size *= 2
	}
	if size > len(m.keys) {
		m.resize(size)
	}
}

func (m *refMap) resize(size int) {
	oldK, oldV := m.keys, m.vals
	m.keys, m.vals = make([]uint64, size), make([]uint64, size)
	m.shift = uint8(64 - log2(size))
	mask := uint64(size - 1)
	for j, v := range oldV {
		if v == 0 {
			continue
		}
		i := m.home(oldK[j])
		for m.vals[i] != 0 {
			i = (i + 1) & mask
		}
		m.keys[i], m.vals[i] = oldK[j], v
	}
}

func (m *refMap) del(k uint64) {
	if m.n == 0 {
		return
	}
	mask := uint64(len(m.keys) - 1)
	i := m.home(k)
	for {
		if m.vals[i] == 0 {
			return
		}
		if m.keys[i] == k {
			break
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; m.vals[j] != 0; j = (j + 1) & mask {
		home := m.home(m.keys[j])
		if (j-home)&mask >= (j-i)&mask {
			m.keys[i], m.vals[i] = m.keys[j], m.vals[j]
			i = j
		}
	}
	m.vals[i], m.keys[i] = 0, 0
	m.n--
	if m.n == 0 {
		*m = refMap{}
	}
}

func (m *refMap) each(fn func(k, v uint64)) {
	for i, v := range m.vals {
		if v != 0 {
			fn(m.keys[i], v)
		}
	}
}

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}
