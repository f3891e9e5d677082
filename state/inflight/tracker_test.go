package inflight

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/clock"
	"github.com/sluicehq/sluice/state/slots"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// newTracker returns a tracker over engines a, b, c (slots 0, 1, 2) on a fake
// clock.
func newTracker(t testing.TB, cfg Config) (*Tracker, *clock.Manual) {
	t.Helper()
	st := slots.NewTable()
	for _, id := range []string{"a", "b", "c"} {
		st.Intern(id)
	}
	clk := clock.NewManual(t0)
	tr, err := New(st, cfg, clk.Now)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return tr, clk
}

func inflight(tr *Tracker) []int64 {
	return []int64{tr.InFlight(0), tr.InFlight(1), tr.InFlight(2)}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "zero is defaults", cfg: Config{}},
		{name: "explicit", cfg: Config{LeaseTTL: time.Minute, SweepInterval: time.Second, MaxLeases: 5, DispatchWindow: 8}},
		{name: "negative ttl", cfg: Config{LeaseTTL: -1}, want: "inflight: LeaseTTL -1ns: must be >= 0 (0 selects the default 10m0s)"},
		{name: "negative sweep", cfg: Config{SweepInterval: -time.Second}, want: "inflight: SweepInterval -1s: must be >= 0 (0 selects the default 1s)"},
		{name: "negative max leases", cfg: Config{MaxLeases: -1}, want: "inflight: MaxLeases -1: must be >= 0 (0 selects the default 1000000)"},
		{name: "huge window", cfg: Config{DispatchWindow: 1 << 20}, want: "inflight: DispatchWindow 1048576: must be between 0 (the default 64) and 4096"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate() = %q, want %q", got, tc.want)
			}
			if _, err := New(slots.NewTable(), tc.cfg, nil); (err != nil) != (tc.want != "") {
				t.Errorf("New(...) error = %v, want error %v", err, tc.want != "")
			}
		})
	}
	if _, err := New(nil, Config{}, nil); err == nil {
		t.Error("New(nil, ...) = nil error, want an error")
	}
}

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		acquire      [][]slots.Slot
		release      []int // indexes into acquire, in order
		wantAcquired []int64
		wantFinal    []int64
		wantReleased []bool
	}{
		{name: "plain", acquire: [][]slots.Slot{{0}}, release: []int{0},
			wantAcquired: []int64{1, 0, 0}, wantFinal: []int64{0, 0, 0}, wantReleased: []bool{true}},
		{name: "pd pair", acquire: [][]slots.Slot{{1, 2}}, release: []int{0},
			wantAcquired: []int64{0, 1, 1}, wantFinal: []int64{0, 0, 0}, wantReleased: []bool{true}},
		{name: "overlapping leases", acquire: [][]slots.Slot{{0}, {0, 1}, {2}}, release: []int{1},
			wantAcquired: []int64{2, 1, 1}, wantFinal: []int64{1, 0, 1}, wantReleased: []bool{true}},
		{name: "double release never double-decrements", acquire: [][]slots.Slot{{0}, {0}}, release: []int{0, 0},
			wantAcquired: []int64{2, 0, 0}, wantFinal: []int64{1, 0, 0}, wantReleased: []bool{true, false}},
		{name: "same engine twice counts twice", acquire: [][]slots.Slot{{2, 2}}, release: []int{0},
			wantAcquired: []int64{0, 0, 2}, wantFinal: []int64{0, 0, 0}, wantReleased: []bool{true}},
		{name: "more engines than a record holds inline", acquire: [][]slots.Slot{{0, 1, 2, 2}, {1}}, release: []int{0, 0},
			wantAcquired: []int64{1, 2, 2}, wantFinal: []int64{0, 1, 0}, wantReleased: []bool{true, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, _ := newTracker(t, Config{})
			var leases []Lease
			for _, ss := range tc.acquire {
				l, err := tr.Acquire(ss...)
				if err != nil {
					t.Fatalf("Acquire(%v) = %v", ss, err)
				}
				want := Lease{ID: l.ID, Expires: t0.Add(DefaultLeaseTTL), Slots: ss}
				if diff := cmp.Diff(want, l); diff != "" {
					t.Errorf("Acquire(%v) mismatch (-want +got):\n%s", ss, diff)
				}
				leases = append(leases, l)
			}
			if diff := cmp.Diff(tc.wantAcquired, inflight(tr)); diff != "" {
				t.Errorf("InFlight after Acquire mismatch (-want +got):\n%s", diff)
			}
			if tr.Leases() != len(tc.acquire) {
				t.Errorf("Leases() = %d, want %d", tr.Leases(), len(tc.acquire))
			}
			var released []bool
			for _, i := range tc.release {
				l, ok := tr.Release(leases[i].ID)
				released = append(released, ok)
				if ok {
					if diff := cmp.Diff(leases[i], l); diff != "" {
						t.Errorf("Release(%q) mismatch (-want +got):\n%s", leases[i].ID, diff)
					}
				}
			}
			if diff := cmp.Diff(tc.wantReleased, released); diff != "" {
				t.Errorf("Release results mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFinal, inflight(tr)); diff != "" {
				t.Errorf("InFlight after Release mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAcquireErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		held    int // leases acquired first
		slots   []slots.Slot
		wantErr error
	}{
		{name: "no engines", wantErr: ErrNoEngines},
		{name: "unknown slot", slots: []slots.Slot{0, 3}, wantErr: ErrUnknownSlot},
		{name: "max leases", cfg: Config{MaxLeases: 2}, held: 2, slots: []slots.Slot{0}, wantErr: ErrTooManyLeases},
		{name: "below max leases", cfg: Config{MaxLeases: 2}, held: 1, slots: []slots.Slot{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, _ := newTracker(t, tc.cfg)
			for range tc.held {
				if _, err := tr.Acquire(1); err != nil {
					t.Fatal(err)
				}
			}
			_, err := tr.Acquire(tc.slots...)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Acquire(%v) = %v, want %v", tc.slots, err, tc.wantErr)
			}
			if err != nil {
				if got := inflight(tr); got[0] != 0 {
					t.Errorf("failed Acquire counted: InFlight = %v", got)
				}
				if tr.Leases() != tc.held {
					t.Errorf("Leases() = %d, want %d", tr.Leases(), tc.held)
				}
			}
		})
	}
}

func TestLeaseIDs(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t, Config{})
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 1000 {
		l, err := tr.Acquire(0)
		if err != nil {
			t.Fatal(err)
		}
		if !hex32.MatchString(l.ID) {
			t.Fatalf("lease ID %q is not 32 hex digits", l.ID)
		}
		if seen[l.ID] {
			t.Fatalf("lease ID %q issued twice", l.ID)
		}
		seen[l.ID] = true
	}
	if _, ok := tr.Release("not-a-lease"); ok {
		t.Error("Release of an unknown id = true")
	}
	// Only the id exactly as issued releases: not in upper case, not truncated, not extended.
	l, err := tr.Acquire(1)
	if err != nil {
		t.Fatal(err)
	}
	// The same first 64 bits with other last ones: the table's key matches, the id does not.
	otherLast := l.ID[:31] + map[bool]string{true: "1", false: "0"}[l.ID[31] == '0']
	for _, id := range []string{strings.ToUpper(l.ID), l.ID[:31], l.ID + "0", "", strings.Repeat("g", 32), otherLast} {
		if _, ok := tr.Release(id); ok {
			t.Errorf("Release(%q) of lease %q = true", id, l.ID)
		}
	}
	if _, ok := tr.Release(l.ID); !ok {
		t.Errorf("Release(%q) = false after the near misses", l.ID)
	}
}

// TestExpiryManyEngines sweeps a lease whose slots do not fit its record: every engine is
// counted down once.
func TestExpiryManyEngines(t *testing.T) {
	t.Parallel()
	tr, clk := newTracker(t, Config{LeaseTTL: time.Minute})
	l, err := tr.Acquire(0, 1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.sweep(t0.Add(time.Minute)); got != 0 {
		t.Errorf("sweep at expiry = %d, want 0", got)
	}
	if got := tr.sweep(t0.Add(time.Minute + 1)); got != 1 {
		t.Errorf("sweep after expiry = %d, want 1", got)
	}
	if diff := cmp.Diff([]int64{0, 0, 0}, inflight(tr)); diff != "" {
		t.Errorf("InFlight after sweep mismatch (-want +got):\n%s", diff)
	}
	clk.Advance(time.Second)
	if _, ok := tr.Release(l.ID); ok {
		t.Error("Release after sweep = true")
	}
	if tr.Expired() != 1 || tr.Leases() != 0 {
		t.Errorf("Expired() = %d, Leases() = %d; want 1, 0", tr.Expired(), tr.Leases())
	}
}

func TestLeaseSlotsAreCopies(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t, Config{})
	in := []slots.Slot{0, 1}
	l, err := tr.Acquire(in...)
	if err != nil {
		t.Fatal(err)
	}
	in[0], l.Slots[1] = 2, 2
	if _, ok := tr.Release(l.ID); !ok {
		t.Fatal("Release = false")
	}
	if diff := cmp.Diff([]int64{0, 0, 0}, inflight(tr)); diff != "" {
		t.Errorf("InFlight mismatch after caller mutated slices (-want +got):\n%s", diff)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	ttl := time.Minute
	tests := []struct {
		name         string
		sweepAt      time.Duration // after acquire; < 0 = no sweep
		releaseAt    time.Duration
		wantSwept    int
		wantReleased bool
	}{
		{name: "released before ttl", sweepAt: -1, releaseAt: ttl / 2, wantReleased: true},
		{name: "released exactly at expiry", sweepAt: -1, releaseAt: ttl, wantReleased: true},
		{name: "sweep at expiry keeps it", sweepAt: ttl, releaseAt: ttl, wantSwept: 0, wantReleased: true},
		{name: "swept after ttl, then release fails", sweepAt: ttl + 1, releaseAt: ttl + 2, wantSwept: 1},
		{name: "past ttl but unswept, release expires it", sweepAt: -1, releaseAt: ttl + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, clk := newTracker(t, Config{LeaseTTL: ttl})
			l, err := tr.Acquire(0, 1)
			if err != nil {
				t.Fatal(err)
			}
			// Two leases acquired a second later outlive every sweep below.
			clk.Advance(time.Second)
			for range 2 {
				if _, err := tr.Acquire(1); err != nil {
					t.Fatal(err)
				}
			}
			start := t0
			if tc.sweepAt >= 0 {
				if got := tr.sweep(start.Add(tc.sweepAt)); got != tc.wantSwept {
					t.Errorf("sweep(+%v) = %d, want %d", tc.sweepAt, got, tc.wantSwept)
				}
			}
			clk.Advance(start.Add(tc.releaseAt).Sub(clk.Now()))
			if _, ok := tr.Release(l.ID); ok != tc.wantReleased {
				t.Errorf("Release at +%v = %v, want %v", tc.releaseAt, ok, tc.wantReleased)
			}
			// Whatever happened, lease l is counted exactly once and gone.
			if diff := cmp.Diff([]int64{0, 2, 0}, inflight(tr)); diff != "" {
				t.Errorf("InFlight mismatch (-want +got):\n%s", diff)
			}
			wantExpired := uint64(0)
			if !tc.wantReleased {
				wantExpired = 1
			}
			if tr.Expired() != wantExpired {
				t.Errorf("Expired() = %d, want %d", tr.Expired(), wantExpired)
			}
			if tr.Leases() != 2 {
				t.Errorf("Leases() = %d, want 2", tr.Leases())
			}
			if _, ok := tr.Release(l.ID); ok {
				t.Error("second Release = true")
			}
			if diff := cmp.Diff([]int64{0, 2, 0}, inflight(tr)); diff != "" {
				t.Errorf("InFlight after second Release mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	tr, clk := newTracker(t, Config{LeaseTTL: time.Minute, SweepInterval: time.Millisecond})
	if _, err := tr.Acquire(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()

	clk.Advance(time.Minute + 1)
	deadline := time.Now().Add(5 * time.Second)
	for tr.Expired() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if tr.Expired() != 1 || tr.InFlight(0) != 0 || tr.Leases() != 0 {
		t.Errorf("after TTL: Expired() = %d, InFlight(0) = %d, Leases() = %d; want 1, 0, 0",
			tr.Expired(), tr.InFlight(0), tr.Leases())
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run() = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestDispatchesSince(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		window int
		at     []time.Duration // dispatch times on slot 0, after t0
		since  time.Time
		forget bool
		want   int64
	}{
		{name: "none", since: t0, want: 0},
		{name: "strictly after", at: []time.Duration{0, 1, 2, 3}, since: t0.Add(1), want: 2},
		{name: "all after zero time", at: []time.Duration{0, 1, 2}, since: time.Time{}, want: 3},
		{name: "none after the last", at: []time.Duration{0, 1, 2}, since: t0.Add(2), want: 0},
		{name: "window saturates", window: 4, at: []time.Duration{1, 2, 3, 4, 5, 6}, since: t0, want: 4},
		{name: "window keeps the newest", window: 4, at: []time.Duration{1, 2, 3, 4, 5, 6}, since: t0.Add(4), want: 2},
		{name: "forget drops history", at: []time.Duration{1, 2}, since: t0, forget: true, want: 0},
		{name: "forget drops history, zero since", at: []time.Duration{1, 2}, since: time.Time{}, forget: true, want: 0},
		{name: "clock stepping back is clamped", at: []time.Duration{5, 3, 6}, since: t0.Add(4), want: 3},
		{name: "window not a power of two", window: 3, at: []time.Duration{1, 2, 3, 4, 5}, since: t0.Add(2), want: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, clk := newTracker(t, Config{DispatchWindow: tc.window})
			for _, d := range tc.at {
				clk.Advance(t0.Add(d).Sub(clk.Now()))
				l, err := tr.Acquire(0)
				if err != nil {
					t.Fatal(err)
				}
				tr.Release(l.ID) // releasing does not undo the dispatch
			}
			if tc.forget {
				tr.ForgetEngine(0)
			}
			if got := tr.DispatchesSince(0, tc.since); got != tc.want {
				t.Errorf("DispatchesSince(0, %v) = %d, want %d", tc.since, got, tc.want)
			}
			if got := tr.DispatchesSince(1, time.Time{}); got != 0 {
				t.Errorf("DispatchesSince(1, ...) = %d on an engine never dispatched to, want 0", got)
			}
		})
	}
}

func TestUnseenSlots(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t, Config{})
	if tr.InFlight(99) != 0 || tr.DispatchesSince(99, time.Time{}) != 0 {
		t.Error("unseen slot has counts")
	}
	tr.ForgetEngine(99) // no panic
}

func TestConcurrentAcquireRelease(t *testing.T) {
	t.Parallel()
	tr, _ := newTracker(t, Config{})
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l, err := tr.Acquire(slots.Slot(g%3), slots.Slot(i%3))
				if err != nil {
					t.Errorf("Acquire = %v", err)
					return
				}
				_ = tr.InFlight(slots.Slot(i % 3))
				if _, ok := tr.Release(l.ID); !ok {
					t.Errorf("Release(%q) = false", l.ID)
				}
				tr.Release(l.ID) // a racing duplicate must not double-decrement
			}
		}()
	}
	go tr.sweep(t0) // a concurrent sweep that finds nothing expired
	wg.Wait()
	if diff := cmp.Diff([]int64{0, 0, 0}, inflight(tr)); diff != "" {
		t.Errorf("InFlight after concurrent use mismatch (-want +got):\n%s", diff)
	}
	if tr.Leases() != 0 {
		t.Errorf("Leases() = %d, want 0", tr.Leases())
	}
}

func BenchmarkInFlight(b *testing.B) {
	tr, _ := newTracker(b, Config{})
	if _, err := tr.Acquire(0, 1, 2); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if tr.InFlight(slots.Slot(i%3)) != 1 {
			b.Fatal("wrong count")
		}
	}
}

func BenchmarkDispatchesSince(b *testing.B) {
	for _, bc := range []struct {
		name  string
		after int // dispatches after the bound, of 100 at 1ms steps
	}{
		{name: "2_recent", after: 2},
		{name: "full_window", after: 64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr, clk := newTracker(b, Config{})
			for range 100 {
				clk.Advance(time.Millisecond)
				if _, err := tr.Acquire(0); err != nil {
					b.Fatal(err)
				}
			}
			since := t0.Add(time.Duration(100-bc.after) * time.Millisecond)
			b.ReportAllocs()
			for b.Loop() {
				if tr.DispatchesSince(0, since) != int64(bc.after) {
					b.Fatal("wrong count")
				}
			}
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	tr, err := New(func() *slots.Table { t := slots.NewTable(); t.Intern("a"); t.Intern("b"); return t }(), Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := tr.Acquire(0, 1)
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := tr.Release(l.ID); !ok {
				b.Fatal("release failed")
			}
		}
	})
}

func BenchmarkNewID(b *testing.B) {
	tr, _ := newTracker(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		var k leaseKey
		tr.newNonce(&k)
		_ = k.String()
	}
}

// TestDispatchesSinceBisects checks every bound against every history length for windows
// below, at and above the linear part of the count (which then bisects), with repeated times.
func TestDispatchesSinceBisects(t *testing.T) {
	t.Parallel()
	for _, window := range []int{1, 3, linearScan, linearScan + 1, 64, 100} {
		for _, dispatches := range []int{0, 1, linearScan - 1, linearScan, linearScan + 1, window - 1, window, window + 1, 2*window + 3, 150} {
			if dispatches < 0 {
				continue
			}
			tr, clk := newTracker(t, Config{DispatchWindow: window})
			var at []time.Time // each dispatch time; two dispatches at each instant
			for i := range dispatches {
				if i%2 == 0 {
					clk.Advance(time.Nanosecond)
				}
				at = append(at, clk.Now())
				if _, err := tr.Acquire(0); err != nil {
					t.Fatal(err)
				}
			}
			kept := at[max(0, len(at)-window):]
			for since := t0.Add(-1); !since.After(clk.Now()); since = since.Add(time.Nanosecond) {
				var want int64
				for _, ts := range kept {
					if ts.After(since) {
						want++
					}
				}
				if got := tr.DispatchesSince(0, since); got != want {
					t.Errorf("window %d, %d dispatches: DispatchesSince(+%v) = %d, want %d", window, dispatches, since.Sub(t0), got, want)
				}
			}
		}
	}
}

// TestReleaseAfterReuse releases a lease whose table entry a later lease took: the old id
// names no lease (its nonce differs), the new one releases, and ids naming entries that were
// never used release nothing.
func TestReleaseAfterReuse(t *testing.T) {
	t.Parallel()
	tr, clk := newTracker(t, Config{LeaseTTL: time.Minute})
	var reused bool
	for range 200 { // the shard is random: retry until the new lease lands in the old entry
		old, err := tr.Acquire(0)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tr.Release(old.ID); !ok {
			t.Fatal("Release = false")
		}
		l, err := tr.Acquire(1)
		if err != nil {
			t.Fatal(err)
		}
		if old.ID[:8] != l.ID[:8] { // another shard
			if _, ok := tr.Release(l.ID); !ok {
				t.Fatal("Release = false")
			}
			continue
		}
		reused = true
		if _, ok := tr.Release(old.ID); ok {
			t.Errorf("Release(%q) of a lease whose entry %q reuses = true", old.ID, l.ID)
		}
		if got := inflight(tr); got[1] != 1 {
			t.Errorf("InFlight = %v after a stale release, want the new lease counted", got)
		}
		// An entry freed by the sweep is reused the same way.
		clk.Advance(time.Minute + 1)
		if n := tr.sweep(clk.Now()); n != 1 {
			t.Fatalf("sweep = %d, want 1", n)
		}
		if _, ok := tr.Release(l.ID); ok {
			t.Error("Release of a swept lease = true")
		}
		break
	}
	if !reused {
		t.Fatal("no lease reused an entry in 200 tries")
	}
	l, err := tr.Acquire(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{
		"0fffffff" + l.ID[8:], // an entry far past the slab
		"f0000000" + l.ID[8:], // shard 15, entry 0: most likely never used, or another lease
	} {
		if id == l.ID {
			continue
		}
		if _, ok := tr.Release(id); ok {
			t.Errorf("Release(%q) = true; only %q is live", id, l.ID)
		}
	}
	if _, ok := tr.Release(l.ID); !ok || tr.Leases() != 0 || tr.InFlight(2) != 0 {
		t.Errorf("Release(%q) = %v; Leases() = %d, InFlight(2) = %d; want true, 0, 0", l.ID, ok, tr.Leases(), tr.InFlight(2))
	}
}
