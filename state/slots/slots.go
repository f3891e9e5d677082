// Package slots assigns dense small-integer handles to engine ids so that hot
// paths can index slices instead of hashing strings.
//
// A slot is allocated the first time an id is interned and is never reused
// for another id during the Table's lifetime, so a slot held by a reader can
// never silently start denoting a different engine. Tables sharing one slot
// space (registry, load table, in-flight tracker) should be given the same
// *Table.
package slots

import (
	"sync"
	"sync/atomic"
)

// Slot is the dense handle of one engine id within a Table. Slots are
// allocated from 0 upwards and never reused for another id.
type Slot uint32

// Table maps engine ids to slots and back. It is safe for concurrent use:
// Lookup, ID and Len are lock-free and allocation-free; Intern takes a lock
// only when it allocates a new slot.
//
// The zero Table is empty and ready to use, but NewTable is the documented
// constructor.
type Table struct {
	mu   sync.Mutex                      // serialises slot allocation
	byID atomic.Pointer[map[string]Slot] // immutable once published
	ids  atomic.Pointer[[]string]        // slot -> id; immutable once published
}

// NewTable returns an empty Table.
func NewTable() *Table {
	t := &Table{}
	m := map[string]Slot{}
	ids := []string{}
	t.byID.Store(&m)
	t.ids.Store(&ids)
	return t
}

// Intern returns the slot of id, allocating the next free slot if id has
// never been seen. It is a write path: allocating a slot copies the id map
// (copy-on-write), so its cost grows with the number of distinct ids ever
// interned. Any string, including "", is a valid id here; callers validate ids.
func (t *Table) Intern(id string) Slot {
	if s, ok := t.Lookup(id); ok {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[string]Slot
	if p := t.byID.Load(); p != nil {
		old = *p
	}
	if s, ok := old[id]; ok {
		return s
	}
	var oldIDs []string
	if p := t.ids.Load(); p != nil {
		oldIDs = *p
	}
	s := Slot(len(oldIDs))
	m := make(map[string]Slot, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[id] = s
	ids := make([]string, len(oldIDs)+1)
	copy(ids, oldIDs)
	ids[s] = id
	// Publish ids first so that a reader that finds the slot via byID can
	// always resolve it back with ID.
	t.ids.Store(&ids)
	t.byID.Store(&m)
	return s
}

// Lookup returns the slot of id and true, or 0 and false if id has never been
// interned. It is lock-free and does not allocate.
func (t *Table) Lookup(id string) (Slot, bool) {
	p := t.byID.Load()
	if p == nil {
		return 0, false
	}
	s, ok := (*p)[id]
	return s, ok
}

// ID returns the id interned as s, or "" if s has not been allocated.
// It is lock-free and does not allocate.
func (t *Table) ID(s Slot) string {
	p := t.ids.Load()
	if p == nil || int64(s) >= int64(len(*p)) {
		return ""
	}
	return (*p)[s]
}

// Len returns the number of slots allocated so far, which is the largest
// allocated slot plus one. Per-slot slices sized to Len can be indexed by any
// slot returned so far.
func (t *Table) Len() int {
	p := t.ids.Load()
	if p == nil {
		return 0
	}
	return len(*p)
}
