// Package loadtable holds the load that engines report per data-parallel
// rank and serves it, aggregated per engine, to pickers on the request path.
//
// Writers (one consumer per stream) call Apply. Apply validates the report,
// updates that engine's per-rank state and precomputes the engine's
// aggregated View as an immutable record, published with an atomic store.
// Readers capture a Snapshot (an atomic load and the current time) and read
// Views from it by slot: a slice index, a short generation check and a
// freshness comparison, without locks or allocation.
package loadtable

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/state/slots"
)

// Table is the engine-reported load table. It is safe for concurrent use.
type Table struct {
	slots *slots.Table
	cfg   Config
	now   func() time.Time

	mu      sync.Mutex // serialises writers; guards engines and nextGen
	engines map[string]*engineState
	nextGen uint64

	// gen is the newest generation whose record is fully published; every
	// record with gen <= this value is reachable from its cell.
	gen   atomic.Uint64
	cells atomic.Pointer[[]*cell] // by slot; grown copy-on-write under mu
}

// cell holds the current record of one slot.
type cell struct {
	cur atomic.Pointer[record]
}

// record is one published state of an engine: its aggregated view, or no
// view. Records are immutable except for prev, which the writer cuts to bound
// the history kept for snapshots.
type record struct {
	gen uint64
	// deadline is view.CapturedAt + freshness in Unix nanoseconds: the view
	// is fresh while now <= deadline. It is math.MinInt64 when the engine
	// has no complete view, so one comparison answers both questions.
	deadline int64
	view     View
	prev     atomic.Pointer[record]
}

// historyDepth is how many superseded records per engine stay reachable, so
// that a Snapshot keeps returning the view it first saw for an engine even
// when up to historyDepth reports for that engine land while it is in use.
const historyDepth = 8

// noRecord is the state of an engine before its first report: every cell
// starts with it, and it ends every record chain that has not been cut.
var noRecord = &record{deadline: math.MinInt64}

// engineState is the writer-side state of one engine in its current epoch.
type engineState struct {
	slot  slots.Slot
	epoch uint64
	ranks int32 // advertised data-parallel size; 0 = not advertised
	rank  []rankState
}

// rankState is the latest report of one rank and its throughput estimate.
type rankState struct {
	present    bool
	seq        uint64
	capturedAt time.Time
	running    int64
	waiting    int64
	kvUsed     int64
	kvCap      int64
	native     bool
	n          Native

	hasSample    bool // sampleTokens/sampleBusy hold a baseline
	sampleTokens int64
	sampleBusy   int64
	rate         float64 // prefill tokens per second; valid if rate > 0
}

// New returns an empty table whose engines get their slots from t.
func New(t *slots.Table, cfg Config) (*Table, error) {
	if t == nil {
		return nil, errors.New("loadtable: nil slots table")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tbl := &Table{
		slots:   t,
		cfg:     cfg.withDefaults(),
		now:     cfg.Now,
		engines: map[string]*engineState{},
	}
	if tbl.now == nil {
		tbl.now = time.Now
	}
	tbl.cells.Store(&[]*cell{})
	return tbl, nil
}

// Apply records r. It returns nil when r was applied; a wrapped ErrMalformed
// or ErrClockSkew when r is invalid; ErrStaleEpoch when r's epoch is older
// than the engine's current one; ErrDuplicate when r's seq is not above the
// last applied seq of its (engine, rank) in this epoch. Only a nil return
// changes the table. A newer epoch discards all of the engine's ranks and
// throughput history before r is applied. Apply interns r.EngineID in the
// slots table. It is safe for concurrent use; reports of one (engine, rank)
// should come from one ordered stream.
func (t *Table) Apply(r Report) error {
	if err := r.validate(); err != nil {
		return err
	}
	if ahead := r.CapturedAt.Sub(t.now()); ahead > t.cfg.ClockSkew {
		return fmt.Errorf("%w: engine %q rank %d: captured_at is %v ahead of the router clock (allowed %v); fix the engine clock or raise ClockSkew",
			ErrClockSkew, r.EngineID, r.Rank, ahead, t.cfg.ClockSkew)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.engines[r.EngineID]
	reset := e == nil || r.Epoch > e.epoch
	switch {
	case !reset && r.Epoch < e.epoch:
		return ErrStaleEpoch
	case !reset && int(r.Rank) < len(e.rank) && e.rank[r.Rank].present && r.Seq <= e.rank[r.Rank].seq:
		return ErrDuplicate
	}
	ranks := r.Ranks
	if ranks == 0 && !reset {
		ranks = e.ranks
	}
	if ranks == 0 && r.Rank > 0 {
		return fmt.Errorf("%w: engine %q rank %d: ranks not advertised, so only rank 0 is valid; set ranks to the data-parallel size",
			ErrMalformed, r.EngineID, r.Rank)
	}
	if ranks > 0 && r.Rank >= ranks {
		return fmt.Errorf("%w: engine %q rank %d: must be below the advertised ranks %d", ErrMalformed, r.EngineID, r.Rank, ranks)
	}

	if e == nil {
		e = &engineState{slot: t.slots.Intern(r.EngineID)}
		t.engines[r.EngineID] = e
	}
	if reset {
		e.epoch = r.Epoch
		e.ranks = 0
		e.rank = e.rank[:0]
	}
	if r.Ranks > 0 && r.Ranks != e.ranks {
		e.ranks = r.Ranks
		if len(e.rank) > int(r.Ranks) {
			clear(e.rank[r.Ranks:])
			e.rank = e.rank[:r.Ranks]
		}
	}
	if int(r.Rank) >= len(e.rank) {
		e.rank = append(e.rank, make([]rankState, int(r.Rank)+1-len(e.rank))...)
	}
	e.rank[r.Rank].update(&r)
	view, ok := e.aggregate()
	t.publish(e.slot, ok, view)
	return nil
}

// update applies r to the rank, advancing its throughput estimate.
func (rs *rankState) update(r *Report) {
	rs.present = true
	rs.seq = r.Seq
	rs.capturedAt = r.CapturedAt
	rs.running, rs.waiting, rs.kvUsed, rs.kvCap = r.Running, r.Waiting, r.KVUsedTokens, r.KVCapacityTokens
	rs.native = r.Native != nil
	if !rs.native {
		rs.n = Native{}
		return
	}
	rs.n = *r.Native
	tokens, busy := rs.n.PrefillUncachedTokensTotal, rs.n.PrefillBusyMicrosTotal
	if !rs.hasSample {
		rs.hasSample, rs.sampleTokens, rs.sampleBusy = true, tokens, busy
		return
	}
	dTokens, dBusy := tokens-rs.sampleTokens, busy-rs.sampleBusy
	switch {
	case dTokens < 0 || dBusy < 0:
		// The counters went backwards without an epoch change: take this
		// sample as the new baseline and keep the last rate.
		rs.sampleTokens, rs.sampleBusy = tokens, busy
	case dTokens > 0 && dBusy > 0:
		rs.rate = float64(dTokens) * 1e6 / float64(dBusy)
		rs.sampleTokens, rs.sampleBusy = tokens, busy
	}
	// Otherwise at most one counter grew: keep the baseline so the next
	// rate spans both increments.
}

// aggregate sums the engine's ranks into a View. It reports false unless
// every rank of the advertised size (1 if not advertised) has a report.
func (e *engineState) aggregate() (View, bool) {
	n := max(int(e.ranks), 1)
	if len(e.rank) < n {
		return View{}, false
	}
	v := View{Ranks: int32(n), Native: true}
	rateKnown := true
	for i := range n {
		rs := &e.rank[i]
		if !rs.present {
			return View{}, false
		}
		if i == 0 || rs.capturedAt.Before(v.CapturedAt) {
			v.CapturedAt = rs.capturedAt
		}
		v.Running += rs.running
		v.Waiting += rs.waiting
		v.KVUsedTokens += rs.kvUsed
		v.KVCapacityTokens += rs.kvCap
		if !rs.native || rs.kvCap <= 0 || rs.n.MaxRunningRequests <= 0 {
			v.Native = false
		}
		v.WaitingUncachedTokens += rs.n.WaitingUncachedTokens
		v.TotalTokens += rs.n.TotalTokens
		v.MaxRunningRequests += rs.n.MaxRunningRequests
		if rs.rate > 0 {
			v.PrefillRate += rs.rate
		} else {
			rateKnown = false
		}
	}
	if !rateKnown {
		v.PrefillRate = 0
	}
	if !v.Native {
		v.WaitingUncachedTokens, v.TotalTokens, v.MaxRunningRequests = 0, 0, 0
	} else if v.PrefillRate > 0 {
		secs := float64(v.WaitingUncachedTokens) / v.PrefillRate
		if d := secs * float64(time.Second); d >= math.MaxInt64 {
			v.QueueTime = math.MaxInt64
		} else {
			v.QueueTime = time.Duration(d)
		}
		v.HasQueueTime = true
	}
	return v, true
}

// publish makes (ok, view) the current record of slot under a new
// generation. t.mu must be held.
func (t *Table) publish(slot slots.Slot, ok bool, view View) {
	c := t.cell(slot)
	t.nextGen++
	rec := &record{gen: t.nextGen, deadline: math.MinInt64}
	if ok {
		rec.view = view
		rec.deadline = unixNanos(view.CapturedAt.Add(t.cfg.Freshness))
	}
	rec.prev.Store(c.cur.Load())
	c.cur.Store(rec)
	// Cut the chain so that at most historyDepth superseded records stay
	// reachable.
	p := rec
	for i := 0; i < historyDepth && p != nil; i++ {
		p = p.prev.Load()
	}
	if p != nil && p != noRecord {
		p.prev.Store(nil)
	}
	t.gen.Store(t.nextGen)
}

// cell returns slot's cell, growing the cell slice if needed. t.mu must be
// held.
func (t *Table) cell(slot slots.Slot) *cell {
	cells := *t.cells.Load()
	if int(slot) < len(cells) {
		return cells[slot]
	}
	grown := make([]*cell, max(int(slot)+1, t.slots.Len()))
	copy(grown, cells)
	for i := len(cells); i < len(grown); i++ {
		grown[i] = &cell{}
		grown[i].cur.Store(noRecord)
	}
	t.cells.Store(&grown)
	return grown[slot]
}

// RemoveEngine forgets everything about the engine with the given id, as
// when it leaves the registry: it has no view from then on, and its next
// report starts afresh (any epoch is accepted). Unknown ids are ignored.
func (t *Table) RemoveEngine(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.engines[id]
	if !ok {
		return
	}
	delete(t.engines, id)
	t.publish(e.slot, false, View{})
}

// ResetEngineBefore drops an engine's load when its state belongs to an epoch older than epoch:
// another stream (KV events) saw the engine restart, so its old reports no longer describe it.
// It reports whether anything was dropped; the engine's next report starts afresh.
func (t *Table) ResetEngineBefore(id string, epoch uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.engines[id]
	if !ok || e.epoch >= epoch {
		return false
	}
	delete(t.engines, id)
	t.publish(e.slot, false, View{})
	return true
}

// Engines returns the ids of engines with state in the table (including
// engines whose reports are stale or rank-incomplete), sorted. It is meant
// for diagnostics and allocates.
func (t *Table) Engines() []string {
	t.mu.Lock()
	ids := make([]string, 0, len(t.engines))
	for id := range t.engines {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// Now reads the table's clock (Config.Now), the time Snapshot judges freshness at.
func (t *Table) Now() time.Time { return t.now() }

// Snapshot captures the table at the current time. It is an atomic load and
// a clock read and does not allocate.
func (t *Table) Snapshot() Snapshot { return t.SnapshotAt(t.now()) }

// SnapshotAt captures the table with now as the time freshness is judged
// against, for callers that already read the clock for the request.
func (t *Table) SnapshotAt(now time.Time) Snapshot {
	// Load gen before cells: every cell reachable by a record with
	// gen <= this value was published before it.
	gen := t.gen.Load()
	return Snapshot{now: now, nowNanos: unixNanos(now), gen: gen, cells: *t.cells.Load()}
}

// Bounds of the times representable in int64 Unix nanoseconds.
var (
	minNanosTime = time.Unix(0, math.MinInt64)
	maxNanosTime = time.Unix(0, math.MaxInt64)
)

// unixNanos returns t in Unix nanoseconds, saturating outside the int64
// range (years before 1678 or after 2262) instead of overflowing.
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(minNanosTime):
		return math.MinInt64
	case t.After(maxNanosTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// RankLoad is one data-parallel rank's latest report as the table holds it, for diagnostics
// (the decider's console); pickers read the summed View instead.
type RankLoad struct {
	Rank int32
	// Reported is false for a rank of the advertised size that has not reported in this
	// epoch; the other fields are then zero.
	Reported bool
	// Seq and CapturedAt are the rank's last applied report's; Fresh says whether that report
	// is within the freshness window at the time Ranks was asked about.
	Seq        uint64
	CapturedAt time.Time
	Fresh      bool
	// Running, Waiting, KVUsedTokens and KVCapacityTokens are the rank's basic fields.
	Running, Waiting, KVUsedTokens, KVCapacityTokens int64
	// Native reports whether the rank sent the native extension; WaitingUncachedTokens is
	// then its field (zero otherwise).
	Native                bool
	WaitingUncachedTokens int64
	// PrefillRate is the rank's prefill throughput estimate in uncached tokens per second,
	// 0 while unknown.
	PrefillRate float64
}

// Age returns how old the rank's report is at now (0 when CapturedAt is ahead of now, or
// the rank has not reported).
func (r RankLoad) Age(now time.Time) time.Duration {
	if !r.Reported {
		return 0
	}
	return max(now.Sub(r.CapturedAt), 0)
}

// Ranks appends the engine's per-rank load, judged fresh or not against now, to dst and
// returns it with the engine's epoch: one entry per rank of the advertised data-parallel size
// (or per rank seen, when the size is not advertised), in rank order. It reports false for an
// engine with no state in the table. It takes the writers' lock for one copy of the engine's
// ranks, so it suits diagnostics, not the request path.
func (t *Table) Ranks(id string, now time.Time, dst []RankLoad) ([]RankLoad, uint64, bool) {
	nowNanos := unixNanos(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.engines[id]
	if !ok {
		return dst, 0, false
	}
	n := max(int(e.ranks), len(e.rank))
	for i := range n {
		rl := RankLoad{Rank: int32(i)}
		if i < len(e.rank) && e.rank[i].present {
			rs := &e.rank[i]
			rl.Reported, rl.Seq, rl.CapturedAt = true, rs.seq, rs.capturedAt
			rl.Fresh = nowNanos <= unixNanos(rs.capturedAt.Add(t.cfg.Freshness))
			rl.Running, rl.Waiting, rl.KVUsedTokens, rl.KVCapacityTokens = rs.running, rs.waiting, rs.kvUsed, rs.kvCap
			rl.Native, rl.PrefillRate = rs.native, rs.rate
			if rs.native {
				rl.WaitingUncachedTokens = rs.n.WaitingUncachedTokens
			}
		}
		dst = append(dst, rl)
	}
	return dst, e.epoch, true
}
