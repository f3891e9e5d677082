package loadtable

import (
	"time"

	"github.com/sluicehq/sluice/state/slots"
)

// Snapshot is the load table as captured at one instant. It is a small value
// type, cheap to copy, and safe for concurrent use. Views read from one
// Snapshot are consistent: repeated reads of an engine return the same
// answer, judged against the same Now, even while reports keep arriving
// (exactly so unless more than historyDepth (8) reports for that engine land
// while the snapshot is in use; beyond that the oldest retained view is
// returned). Pickers capture one Snapshot per selection attempt and do not
// keep it longer.
//
// The zero Snapshot has no views.
type Snapshot struct {
	now      time.Time
	nowNanos int64 // now in Unix nanoseconds, compared with record deadlines
	gen      uint64
	cells    []*cell
}

// Now returns the time the snapshot judges freshness against.
func (s Snapshot) Now() time.Time { return s.now }

// View returns the engine's aggregated load and true, or false when its load
// is unknown: no report yet, a rank of the advertised size missing, or the
// oldest rank's report older than the freshness window at Now. Unknown is
// never zero load. View does not lock or allocate.
func (s Snapshot) View(slot slots.Slot) (View, bool) {
	// The body of ViewRef, written out so that both stay inlinable.
	if int(slot) < len(s.cells) {
		r := s.cells[slot].cur.Load()
		if r.gen > s.gen {
			r = r.asOf(s.gen)
		}
		if s.nowNanos <= r.deadline {
			return r.view, true
		}
	}
	return View{}, false
}

// ViewRef is View without the copy: it returns a pointer to the engine's
// aggregated load, shared and immutable (callers must not modify it), or nil
// when the load is unknown. It suits callers that read many engines' views
// per pick, or hand the selected engine's view on without copying.
func (s Snapshot) ViewRef(slot slots.Slot) *View {
	if int(slot) >= len(s.cells) {
		return nil
	}
	r := s.cells[slot].cur.Load()
	if r.gen > s.gen {
		r = r.asOf(s.gen)
	}
	if s.nowNanos > r.deadline {
		return nil
	}
	return &r.view
}

// asOf returns the newest record in r's history published at or before
// generation gen, or the oldest retained record if the history was cut
// before reaching it.
func (r *record) asOf(gen uint64) *record {
	for r.gen > gen {
		p := r.prev.Load()
		if p == nil {
			break
		}
		r = p
	}
	return r
}

// View is an engine's load: the sum over its data-parallel ranks.
type View struct {
	// CapturedAt is the oldest rank's capture time; the view is as old as
	// its stalest part.
	CapturedAt time.Time
	// Ranks is the number of ranks summed.
	Ranks int32
	// Running, Waiting, KVUsedTokens and KVCapacityTokens are the summed
	// basic fields.
	Running, Waiting, KVUsedTokens, KVCapacityTokens int64
	// Native reports whether every rank sent the native extension with
	// KVCapacityTokens > 0 and MaxRunningRequests > 0.
	Native bool
	// WaitingUncachedTokens, TotalTokens and MaxRunningRequests are the
	// summed native fields; zero unless Native.
	WaitingUncachedTokens, TotalTokens, MaxRunningRequests int64
	// PrefillRate is the engine's prefill throughput in uncached tokens per
	// second: the sum of its ranks' rates, or 0 (unknown) unless every rank
	// has one.
	PrefillRate float64
	// QueueTime is the estimated prefill queue time, WaitingUncachedTokens /
	// PrefillRate; valid only when HasQueueTime, which needs Native and a
	// known PrefillRate.
	QueueTime    time.Duration
	HasQueueTime bool
}

// Age returns how old the view is at now: now - CapturedAt, or 0 when
// CapturedAt is ahead of now (allowed clock skew).
func (v View) Age(now time.Time) time.Duration {
	return max(now.Sub(v.CapturedAt), 0)
}
