// Package inflight keeps the router-local count of requests in flight per
// engine, held by leases, and the recent dispatch times per engine.
//
// Decide acquires a lease on the engines it picked (+1 in flight on each and
// a dispatch timestamp); the caller releases it when the response completes
// (-1 on each). A lease not released within its TTL is expired by the
// sweeper, so a caller that dies does not leave phantom load behind.
// Reads (InFlight, DispatchesSince) are lock-free and allocation-free.
package inflight

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/state/slots"
)

// Errors returned by Acquire.
var (
	// ErrTooManyLeases means Config.MaxLeases leases are live; the request
	// should be refused rather than tracked without bound.
	ErrTooManyLeases = errors.New("too many in-flight leases")
	// ErrNoEngines means Acquire was called without engines.
	ErrNoEngines = errors.New("lease needs at least one engine")
	// ErrUnknownSlot means a slot passed to Acquire was never allocated by
	// the tracker's slots table.
	ErrUnknownSlot = errors.New("unknown engine slot")
)

// numShards is the number of lease map shards; a power of two.
const numShards = 16

// Lease is a claim of one in-flight request on one or more engines (one for
// plain serving, prefill and decode for PD).
type Lease struct {
	// ID identifies the lease for Release: 32 lowercase hex digits, the lease's place in the
	// tracker's table (32 bits) and 96 random bits.
	ID string
	// Expires is when the lease stops counting if not released.
	Expires time.Time
	// Slots are the engines the lease counts against, in Acquire order.
	Slots []slots.Slot
}

// Tracker is the in-flight tracker. It is safe for concurrent use.
type Tracker struct {
	slots *slots.Table
	cfg   Config
	now   func() time.Time
	// base is the clock reading at New; a lease record keeps its expiry as the time since
	// base (so comparisons use the monotonic clock, as time.Time's do, when the clock has one).
	base time.Time
	// ids draws lease ids: a pool of ChaCha8 generators, each seeded from crypto/rand.
	ids sync.Pool

	mu      sync.Mutex                // serialises growth of engines
	engines atomic.Pointer[[]*engine] // by slot; grown copy-on-write under mu

	shards   [numShards]shard
	leases   atomic.Int64
	expiredN atomic.Uint64
}

// engine is the per-slot state.
type engine struct {
	inflight atomic.Int64

	// The dispatch ring holds the last len(ring) dispatch times in Unix
	// nanoseconds, non-decreasing in recording order, 0 = none. Writers
	// serialise on mu so that ring order is time order; readers scan
	// backwards from next without locking and stop at the first entry not
	// after their bound.
	mu   sync.Mutex
	next atomic.Uint64 // dispatches recorded so far; the next write goes to ring[next%len(ring)]
	ring []atomic.Int64
}

// recordDispatch appends a dispatch at ns, clamped to be no earlier than the
// previous one so the ring stays sorted even if the wall clock steps back.
func (e *engine) recordDispatch(ns int64) {
	e.mu.Lock()
	n := e.next.Load()
	w := uint64(len(e.ring))
	if n > 0 {
		ns = max(ns, e.ring[(n-1)%w].Load())
	}
	e.ring[n%w].Store(ns)
	e.next.Store(n + 1)
	e.mu.Unlock()
}

// shard is one part of the lease table: a slab of lease records and the list of its free
// entries. A lease id names its shard and entry, so Acquire and Release index an array (no
// hashing, no probing; Acquire reuses the entry released last, which is warm in the cache),
// and a nonce in the id and the record tells the lease from earlier ones in the same entry.
//
// The slab holds no pointers, so the garbage collector never scans it however many leases
// are live, and a lease costs no allocation of its own: a decider whose callers do not
// release, or release late, keeps hundreds of thousands of leases.
type shard struct {
	mu   sync.Mutex
	recs []record
	free []uint32 // free entries of recs, the last freed last
	// more holds the slots of the leases with more than len(record.inline) engines, by entry.
	more map[uint32][]slots.Slot
	_    [16]byte // keep neighbouring shards' locks off one cache line
}

// A lease id is 128 bits: the entry word (the shard in the top shardBits bits, the entry
// within it below) and 96 random bits, the nonce.
const (
	shardBits = 4 // log2(numShards)
	entryBits = 32 - shardBits
	maxEntry  = 1<<entryBits - 1
)

// leaseKey is a lease id's 128 bits.
type leaseKey [16]byte

func (k leaseKey) word() uint32 { return binary.BigEndian.Uint32(k[:4]) }

// nonce is the key's random part.
func (k leaseKey) nonce() nonce {
	return nonce{binary.BigEndian.Uint64(k[4:12]), binary.BigEndian.Uint32(k[12:])}
}

type nonce struct {
	a uint64
	b uint32
}

// record is the tracker's own record of a lease; n == 0 marks a free entry.
type record struct {
	nonce nonce
	// expires is the lease's expiry as the time since Tracker.base, in nanoseconds.
	expires int64
	// n is the number of slots; up to len(inline) they are in inline, beyond in shard.more.
	n      uint32
	inline [2]slots.Slot
}

// New returns a tracker for engines whose slots come from t. now is the
// clock for lease expiry and dispatch times; nil means time.Now. New starts
// no goroutines; call Run to expire leases.
func New(t *slots.Table, cfg Config, now func() time.Time) (*Tracker, error) {
	if t == nil {
		return nil, errors.New("inflight: nil slots table")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	tr := &Tracker{slots: t, cfg: cfg.withDefaults(), now: now, base: now()}
	tr.ids.New = func() any {
		var seed [32]byte
		crand.Read(seed[:]) // never fails (crypto/rand, Go 1.24+)
		return rand.NewChaCha8(seed)
	}
	tr.engines.Store(&[]*engine{})
	return tr, nil
}

// Acquire counts one request in flight on each of engines, records a
// dispatch time on each, and returns the lease to Release. It fails with
// ErrNoEngines, ErrUnknownSlot (wrapped, naming the slot) or
// ErrTooManyLeases, counting nothing. An engine listed twice counts twice.
func (t *Tracker) Acquire(engines ...slots.Slot) (Lease, error) {
	return t.AcquireAt(t.now(), engines...)
}

// AcquireAt is Acquire at now, a reading of the tracker's clock the caller already took
// (Decide reads the clock once per call): the dispatch times are now and the lease expires
// LeaseTTL after it.
func (t *Tracker) AcquireAt(now time.Time, engines ...slots.Slot) (Lease, error) {
	if len(engines) == 0 {
		return Lease{}, ErrNoEngines
	}
	allocated := t.slots.Len()
	for _, s := range engines {
		if int64(s) >= int64(allocated) {
			return Lease{}, fmt.Errorf("%w: slot %d (only %d allocated)", ErrUnknownSlot, s, allocated)
		}
	}
	if t.leases.Add(1) > int64(t.cfg.MaxLeases) {
		t.leases.Add(-1)
		return Lease{}, ErrTooManyLeases
	}
	ns := unixNanos(now)
	expires := now.Add(t.cfg.LeaseTTL)
	rec := record{expires: int64(expires.Sub(t.base)), n: uint32(len(engines))}
	var more []slots.Slot
	if len(engines) > len(rec.inline) {
		more = slices.Clone(engines)
	} else {
		copy(rec.inline[:], engines)
	}
	for _, s := range engines {
		e := t.engine(s)
		e.inflight.Add(1)
		e.recordDispatch(ns)
	}
	var key leaseKey
	si := t.newNonce(&key)
	rec.nonce = key.nonce()
	sh := &t.shards[si]
	sh.mu.Lock()
	var entry uint32
	if n := len(sh.free); n > 0 {
		entry = sh.free[n-1]
		sh.free = sh.free[:n-1]
		sh.recs[entry] = rec
	} else {
		if len(sh.recs) > maxEntry {
			sh.mu.Unlock()
			t.end(engines)
			return Lease{}, ErrTooManyLeases
		}
		entry = uint32(len(sh.recs))
		sh.recs = append(sh.recs, rec)
	}
	if more != nil {
		if sh.more == nil {
			sh.more = map[uint32][]slots.Slot{}
		}
		sh.more[entry] = more
	}
	sh.mu.Unlock()
	binary.BigEndian.PutUint32(key[:4], si<<entryBits|entry)
	return Lease{ID: key.String(), Expires: expires, Slots: slices.Clone(engines)}, nil
}

// Release ends the lease with the given id, counting one request less in
// flight on each of its engines, and returns it. It reports false, and
// changes nothing, if id is unknown, already released or already expired,
// so releasing twice never decrements twice. A lease found past its Expires
// before the sweeper reached it is expired (counted in Expired) and reported
// as false, as it would have been a moment later.
func (t *Tracker) Release(id string) (Lease, bool) {
	key, ok := parseKey(id)
	if !ok {
		return Lease{}, false // not an id Acquire issues
	}
	sh := &t.shards[key.word()>>entryBits]
	entry := key.word() & maxEntry
	sh.mu.Lock()
	var rec record
	if int64(entry) < int64(len(sh.recs)) {
		rec = sh.recs[entry]
	}
	// A free entry, or one reused by a later lease, is not this lease.
	ok = rec.n != 0 && rec.nonce == key.nonce()
	var ss []slots.Slot
	if ok {
		ss = sh.take(entry, &rec)
	}
	sh.mu.Unlock()
	if !ok {
		return Lease{}, false
	}
	t.end(ss)
	if t.expired(rec, t.now()) {
		t.expiredN.Add(1)
		return Lease{}, false
	}
	return Lease{ID: id, Expires: t.base.Add(time.Duration(rec.expires)), Slots: ss}, true
}

// take frees entry, whose lease has record rec, and returns the lease's slots; the caller holds
// sh.mu.
func (sh *shard) take(entry uint32, rec *record) []slots.Slot {
	var ss []slots.Slot
	if int(rec.n) <= len(rec.inline) {
		ss = slices.Clone(rec.inline[:rec.n])
	} else {
		ss = sh.more[entry]
		delete(sh.more, entry)
	}
	sh.recs[entry] = record{}
	sh.free = append(sh.free, entry)
	return ss
}

// expired reports whether a lease with record rec is past its expiry at now.
func (t *Tracker) expired(rec record, now time.Time) bool {
	return now.Sub(t.base) > time.Duration(rec.expires)
}

// end undoes the counting of a lease already removed from its shard.
func (t *Tracker) end(ss []slots.Slot) {
	for _, s := range ss {
		t.engine(s).inflight.Add(-1)
	}
	t.leases.Add(-1)
}

// InFlight returns the number of leases counting against engine s; 0 for a
// slot never used. It is lock-free and does not allocate.
func (t *Tracker) InFlight(s slots.Slot) int64 {
	es := *t.engines.Load()
	if int64(s) >= int64(len(es)) {
		return 0
	}
	return es[s].inflight.Load()
}

// DispatchesSince returns how many of the engine's recent dispatches
// (Acquires) happened strictly after since. Only the last DispatchWindow
// dispatches are remembered, so the count saturates there. It scans back
// from the newest dispatch and stops at the first one not after since; past
// linearScan dispatches it bisects the rest of the window (the ring is
// sorted), so its cost grows with the count up to linearScan and with the
// window's logarithm beyond. It is lock-free and does not allocate.
func (t *Tracker) DispatchesSince(s slots.Slot, since time.Time) int64 {
	es := *t.engines.Load()
	if int64(s) >= int64(len(es)) {
		return 0
	}
	e := es[s]
	after := unixNanos(since)
	next := e.next.Load()
	if next == 0 {
		return 0
	}
	w := uint64(len(e.ring))
	size := min(next, w)
	// isAfter reports whether the dispatch age places before the newest (0 = the newest) is
	// after since; it is true for the ages below the count and false from there on.
	isAfter := func(age uint64) bool {
		ts := e.ring[(next-1-age)%w].Load()
		return ts != 0 && ts > after
	}
	for age := range min(size, linearScan) {
		if !isAfter(age) {
			return int64(age) // the ring is sorted: everything older is not after either
		}
	}
	lo, hi := min(size, linearScan), size // isAfter(lo-1); the count is in [lo, hi]
	for lo < hi {
		if mid := lo + (hi-lo)/2; isAfter(mid) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if e.next.Load() != next {
		// Dispatches recorded meanwhile overwrote the oldest entries, which the bisection may
		// have read: count again from the newest, which stops at the first entry not after.
		return e.countBack(next, size, after)
	}
	return int64(lo)
}

// linearScan is how many dispatches DispatchesSince reads one by one before it bisects.
const linearScan = 8

// countBack counts the dispatches after after, from the newest of the first next recorded
// back through size of them, stopping at the first not after.
func (e *engine) countBack(next, size uint64, after int64) int64 {
	w := uint64(len(e.ring))
	var n int64
	for age := range size {
		ts := e.ring[(next-1-age)%w].Load()
		if ts == 0 || ts <= after {
			break
		}
		n++
	}
	return n
}

// ForgetEngine drops the engine's dispatch history, as when it leaves the
// registry, so that if the same id registers again (it keeps its slot) its
// dispatch history starts empty. Its in-flight count is left to its leases,
// which still release or expire as usual.
func (t *Tracker) ForgetEngine(s slots.Slot) {
	es := *t.engines.Load()
	if int64(s) >= int64(len(es)) {
		return
	}
	e := es[s]
	e.mu.Lock()
	for i := range e.ring {
		e.ring[i].Store(0)
	}
	e.mu.Unlock()
}

// Now reads the tracker's clock.
func (t *Tracker) Now() time.Time { return t.now() }

// Leases returns the number of live leases.
func (t *Tracker) Leases() int { return int(t.leases.Load()) }

// Expired returns how many leases have expired unreleased since New.
func (t *Tracker) Expired() uint64 { return t.expiredN.Load() }

// Run expires leases past their TTL every SweepInterval, decrementing their
// engines as Release would, until ctx is done; it then returns ctx.Err().
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			t.sweep(t.now())
		}
	}
}

// sweep expires every lease whose Expires is before now and returns how
// many it expired.
func (t *Tracker) sweep(now time.Time) int {
	var done [][]slots.Slot
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		done = done[:0]
		sh.mu.Lock()
		for i, rec := range sh.recs {
			if rec.n != 0 && t.expired(rec, now) {
				done = append(done, sh.take(uint32(i), &rec))
			}
		}
		sh.mu.Unlock()
		for _, ss := range done {
			t.end(ss)
		}
		t.expiredN.Add(uint64(len(done)))
		n += len(done)
	}
	return n
}

// engine returns slot s's state, growing the per-slot slice if needed.
func (t *Tracker) engine(s slots.Slot) *engine {
	if es := *t.engines.Load(); int64(s) < int64(len(es)) {
		return es[s]
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	es := *t.engines.Load()
	if int64(s) < int64(len(es)) {
		return es[s]
	}
	grown := make([]*engine, max(int(s)+1, t.slots.Len()))
	copy(grown, es)
	for i := len(es); i < len(grown); i++ {
		grown[i] = &engine{ring: make([]atomic.Int64, t.cfg.DispatchWindow)}
	}
	t.engines.Store(&grown)
	return grown[s]
}

// newNonce writes 96 random bits into k's nonce and returns a random shard, from a ChaCha8
// generator of the pool (a cryptographically strong generator, seeded from crypto/rand; a
// crypto/rand read per lease cost more than the rest of Acquire).
func (t *Tracker) newNonce(k *leaseKey) uint32 {
	g := t.ids.Get().(*rand.ChaCha8)
	r1, r2 := g.Uint64(), g.Uint64()
	t.ids.Put(g)
	binary.BigEndian.PutUint64(k[4:12], r1)
	binary.BigEndian.PutUint32(k[12:], uint32(r2))
	return uint32(r2>>32) & (numShards - 1)
}

const hexDigits = "0123456789abcdef"

// String is the key as the lease id: 32 lowercase hex digits.
func (k leaseKey) String() string {
	var h [32]byte
	for i, b := range k {
		h[2*i], h[2*i+1] = hexDigits[b>>4], hexDigits[b&0x0f]
	}
	return string(h[:])
}

// parseKey is the inverse of leaseKey.String; it accepts exactly the ids String writes (32
// lowercase hex digits), so an id that differs from an issued one in any way, case included,
// names no lease.
func parseKey(id string) (leaseKey, bool) {
	var k leaseKey
	if len(id) != 2*len(k) {
		return k, false
	}
	for i := range k {
		hi, ok1 := fromHex(id[2*i])
		lo, ok2 := fromHex(id[2*i+1])
		if !ok1 || !ok2 {
			return k, false
		}
		k[i] = hi<<4 | lo
	}
	return k, true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Bounds of the times representable in int64 Unix nanoseconds.
var (
	minNanosTime = time.Unix(0, math.MinInt64)
	maxNanosTime = time.Unix(0, math.MaxInt64)
)

// unixNanos returns t in Unix nanoseconds, saturating outside the int64
// range instead of overflowing (so the zero Time counts as the distant past).
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(minNanosTime):
		return math.MinInt64
	case t.After(maxNanosTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}
