package loadtable

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/state/clock"
	"github.com/sluicehq/sluice/state/slots"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func newTable(t testing.TB, cfg Config) (*Table, *slots.Table, *clock.Manual) {
	t.Helper()
	st := slots.NewTable()
	clk := clock.NewManual(t0)
	cfg.Now = clk.Now
	tbl, err := New(st, cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return tbl, st, clk
}

// basic returns a valid basic report of engine id, rank 0, epoch 1.
func basic(id string, seq uint64, at time.Time, running, waiting int64) Report {
	return Report{EngineID: id, Epoch: 1, Seq: seq, CapturedAt: at,
		Running: running, Waiting: waiting, KVUsedTokens: 100, KVCapacityTokens: 1000}
}

func native(r Report, n Native) Report {
	r.Native = &n
	return r
}

func ranked(r Report, rank, ranks int32) Report {
	r.Rank, r.Ranks = rank, ranks
	return r
}

func epoch(r Report, e uint64) Report {
	r.Epoch = e
	return r
}

func view(t *testing.T, tbl *Table, st *slots.Table, id string) (View, bool) {
	t.Helper()
	s, ok := st.Lookup(id)
	if !ok {
		return View{}, false
	}
	snap := tbl.Snapshot()
	v, ok := snap.View(s)
	ref := snap.ViewRef(s)
	if ok != (ref != nil) || (ref != nil && *ref != v) {
		t.Errorf("ViewRef = %+v, disagrees with View = %+v, %v", ref, v, ok)
	}
	return v, ok
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "zero is defaults", cfg: Config{}},
		{name: "explicit", cfg: Config{Freshness: time.Second, ClockSkew: time.Second}},
		{name: "negative freshness", cfg: Config{Freshness: -1}, want: "loadtable: Freshness -1ns: must be >= 0 (0 selects the default 5s)"},
		{name: "negative skew", cfg: Config{ClockSkew: -time.Second}, want: "loadtable: ClockSkew -1s: must be >= 0 (0 accepts no report from the future)"},
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
			if _, err := New(slots.NewTable(), tc.cfg); (err != nil) != (tc.want != "") {
				t.Errorf("New(...) error = %v, want error %v", err, tc.want != "")
			}
		})
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil, ...) = nil error, want an error")
	}
}

func TestApplyRejects(t *testing.T) {
	t.Parallel()
	ok := basic("e", 1, t0, 1, 1)
	tests := []struct {
		name    string
		r       Report
		want    error
		wantMsg string
	}{
		{name: "no engine id", r: func() Report { r := ok; r.EngineID = ""; return r }(), want: ErrMalformed, wantMsg: "engine_id: must be non-empty"},
		{name: "negative rank", r: ranked(ok, -1, 0), want: ErrMalformed, wantMsg: "rank -1: must be >= 0"},
		{name: "negative ranks", r: ranked(ok, 0, -2), want: ErrMalformed, wantMsg: "ranks -2"},
		{name: "rank at ranks", r: ranked(ok, 2, 2), want: ErrMalformed, wantMsg: "rank 2: must be below ranks 2"},
		{name: "rank without ranks", r: ranked(ok, 1, 0), want: ErrMalformed, wantMsg: "only rank 0 is valid"},
		{name: "zero captured_at", r: basic("e", 1, time.Time{}, 0, 0), want: ErrMalformed, wantMsg: "captured_at: required"},
		{name: "negative running", r: basic("e", 1, t0, -1, 0), want: ErrMalformed, wantMsg: "running -1: must be >= 0"},
		{name: "negative waiting", r: basic("e", 1, t0, 0, -1), want: ErrMalformed, wantMsg: "waiting -1: must be >= 0"},
		{name: "negative kv capacity", r: func() Report { r := ok; r.KVCapacityTokens = -5; return r }(), want: ErrMalformed, wantMsg: "kv_capacity_tokens -5"},
		{name: "negative native field", r: native(ok, Native{MaxRunningRequests: -1}), want: ErrMalformed, wantMsg: "native max_running_requests -1"},
		{name: "future beyond skew", r: basic("e", 1, t0.Add(time.Millisecond), 0, 0), want: ErrClockSkew, wantMsg: "1ms ahead of the router clock (allowed 0s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, _ := newTable(t, Config{})
			err := tbl.Apply(tc.r)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Apply(...) = %v, want %v containing %q", err, tc.want, tc.wantMsg)
			}
			if got := tbl.Engines(); len(got) != 0 {
				t.Errorf("Engines() = %v after a rejected report, want none", got)
			}
			if st.Len() != 0 {
				t.Errorf("rejected report interned a slot")
			}
		})
	}
}

func TestClockSkew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		skew    time.Duration
		ahead   time.Duration
		wantErr bool
	}{
		{name: "no skew, now", skew: 0, ahead: 0},
		{name: "no skew, future", skew: 0, ahead: time.Nanosecond, wantErr: true},
		{name: "within skew", skew: time.Second, ahead: time.Second},
		{name: "beyond skew", skew: time.Second, ahead: time.Second + 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, _ := newTable(t, Config{ClockSkew: tc.skew})
			err := tbl.Apply(basic("e", 1, t0.Add(tc.ahead), 1, 2))
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrClockSkew)) {
				t.Fatalf("Apply(...) = %v, want ErrClockSkew %v", err, tc.wantErr)
			}
			v, ok := view(t, tbl, st, "e")
			if ok == tc.wantErr {
				t.Fatalf("View ok = %v, want %v", ok, !tc.wantErr)
			}
			if ok && v.Age(t0) != 0 {
				t.Errorf("Age(now) = %v for a future capture, want 0", v.Age(t0))
			}
		})
	}
}

func TestFreshness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		captured time.Time // zero = t0
		after    time.Duration
		wantOK   bool
	}{
		{name: "just captured", after: 0, wantOK: true},
		{name: "at the default window", after: 5 * time.Second, wantOK: true},
		{name: "past the default window", after: 5*time.Second + 1, wantOK: false},
		{name: "custom window", cfg: Config{Freshness: time.Second}, after: 1500 * time.Millisecond, wantOK: false},
		{name: "ancient capture does not overflow into fresh", captured: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, clk := newTable(t, tc.cfg)
			captured := t0
			if !tc.captured.IsZero() {
				captured = tc.captured
			}
			if err := tbl.Apply(basic("e", 1, captured, 3, 4)); err != nil {
				t.Fatal(err)
			}
			clk.Set(t0.Add(tc.after))
			v, ok := view(t, tbl, st, "e")
			if ok != tc.wantOK {
				t.Fatalf("View ok = %v, want %v", ok, tc.wantOK)
			}
			if ok && (v.Age(clk.Now()) != tc.after || v.Running != 3 || v.Waiting != 4) {
				t.Errorf("View = %+v, Age = %v", v, v.Age(clk.Now()))
			}
			// A stale engine stays listed for diagnostics.
			if diff := cmp.Diff([]string{"e"}, tbl.Engines()); diff != "" {
				t.Errorf("Engines() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRanks(t *testing.T) {
	t.Parallel()
	r := basic("e", 1, t0, 1, 2)
	tests := []struct {
		name    string
		reports []Report
		now     time.Time
		wantOK  bool
		want    View
	}{
		{
			name:    "one of two ranks fails open",
			reports: []Report{ranked(r, 0, 2)},
			now:     t0,
		},
		{
			name:    "all ranks sum, oldest capture wins",
			reports: []Report{ranked(r, 0, 2), ranked(basic("e", 1, t0.Add(-time.Second), 10, 20), 1, 2)},
			now:     t0,
			wantOK:  true,
			want:    View{CapturedAt: t0.Add(-time.Second), Ranks: 2, Running: 11, Waiting: 22, KVUsedTokens: 200, KVCapacityTokens: 2000},
		},
		{
			name:    "one rank stale hides the engine",
			reports: []Report{ranked(r, 0, 2), ranked(basic("e", 1, t0.Add(-6*time.Second), 10, 20), 1, 2)},
			now:     t0,
		},
		{
			name:    "rank 1 alone is not a view",
			reports: []Report{ranked(r, 1, 2)},
			now:     t0,
		},
		{
			name: "unadvertised later report keeps the advertised size",
			reports: []Report{
				ranked(r, 0, 2), ranked(r, 1, 2),
				ranked(basic("e", 2, t0, 5, 5), 1, 0),
			},
			now:    t0,
			wantOK: true,
			want:   View{CapturedAt: t0, Ranks: 2, Running: 6, Waiting: 7, KVUsedTokens: 200, KVCapacityTokens: 2000},
		},
		{
			name: "shrinking advertised size drops higher ranks",
			reports: []Report{
				ranked(r, 0, 3), ranked(r, 1, 3), ranked(r, 2, 3),
				ranked(basic("e", 2, t0, 5, 5), 0, 1),
			},
			now:    t0,
			wantOK: true,
			want:   View{CapturedAt: t0, Ranks: 1, Running: 5, Waiting: 5, KVUsedTokens: 100, KVCapacityTokens: 1000},
		},
		{
			name: "growing advertised size needs the new ranks",
			reports: []Report{
				ranked(r, 0, 1),
				ranked(basic("e", 2, t0, 5, 5), 0, 2),
			},
			now: t0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, clk := newTable(t, Config{})
			for i, rep := range tc.reports {
				if err := tbl.Apply(rep); err != nil {
					t.Fatalf("Apply(reports[%d]) = %v", i, err)
				}
			}
			clk.Set(tc.now)
			got, ok := view(t, tbl, st, "e")
			if ok != tc.wantOK {
				t.Fatalf("View ok = %v, want %v (view %+v)", ok, tc.wantOK, got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("View mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSequencing(t *testing.T) {
	t.Parallel()
	r := basic("e", 5, t0, 1, 1)
	tests := []struct {
		name        string
		next        Report
		wantErr     error
		wantRunning int64 // rank 0's running after next; -1 = no view
	}{
		{name: "higher seq applies", next: basic("e", 6, t0, 9, 1), wantRunning: 9},
		{name: "same seq is a duplicate", next: basic("e", 5, t0, 9, 1), wantErr: ErrDuplicate, wantRunning: 1},
		{name: "lower seq is a duplicate", next: basic("e", 4, t0, 9, 1), wantErr: ErrDuplicate, wantRunning: 1},
		{name: "older epoch is stale", next: epoch(basic("e", 99, t0, 9, 1), 0), wantErr: ErrStaleEpoch, wantRunning: 1},
		{name: "newer epoch resets, any seq", next: epoch(basic("e", 0, t0, 9, 1), 2), wantRunning: 9},
		{name: "seq is per rank", next: ranked(basic("e", 1, t0, 9, 1), 1, 2), wantRunning: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, _ := newTable(t, Config{})
			if err := tbl.Apply(r); err != nil {
				t.Fatal(err)
			}
			if err := tbl.Apply(tc.next); !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Apply(next) = %v, want %v", err, tc.wantErr)
			}
			v, ok := view(t, tbl, st, "e")
			if tc.wantRunning < 0 {
				if ok {
					t.Errorf("View = %+v, want none (rank-incomplete)", v)
				}
				return
			}
			if !ok || v.Running != tc.wantRunning {
				t.Errorf("View = %+v, %v; want Running %d", v, ok, tc.wantRunning)
			}
		})
	}
}

func TestEpochReset(t *testing.T) {
	t.Parallel()
	tbl, st, _ := newTable(t, Config{})
	n := Native{MaxRunningRequests: 8, WaitingUncachedTokens: 1000}
	steps := []struct {
		name       string
		r          Report
		wantErr    error
		wantOK     bool
		wantRate   float64
		wantRanks  int32
		wantEngine []string
	}{
		{name: "epoch 1 rank 0", r: native(ranked(basic("e", 1, t0, 1, 1), 0, 2), n), wantRanks: 2},
		{name: "epoch 1 rank 1", r: native(ranked(basic("e", 1, t0, 1, 1), 1, 2), n), wantOK: true, wantRanks: 2},
		{name: "epoch 1 rank 0 rate", r: native(ranked(basic("e", 2, t0, 1, 1), 0, 2), withCounters(n, 1000, 1_000_000)), wantOK: true, wantRanks: 2},
		{name: "epoch 1 rank 0 second sample", r: native(ranked(basic("e", 3, t0, 1, 1), 0, 2), withCounters(n, 3000, 2_000_000)), wantOK: true, wantRanks: 2},
		{name: "epoch 1 rank 1 rate", r: native(ranked(basic("e", 2, t0, 1, 1), 1, 2), withCounters(n, 100, 100_000)), wantOK: true, wantRate: 3000, wantRanks: 2},
		{name: "epoch 1 rank 1 second sample", r: native(ranked(basic("e", 3, t0, 1, 1), 1, 2), withCounters(n, 1100, 600_000)), wantOK: true, wantRate: 4000, wantRanks: 2},
		{name: "epoch 2 drops other ranks and rates", r: epoch(native(ranked(basic("e", 1, t0, 1, 1), 0, 2), withCounters(n, 9000, 9_000_000)), 2), wantRanks: 2},
		{name: "epoch 1 is now stale", r: native(ranked(basic("e", 9, t0, 1, 1), 1, 2), n), wantErr: ErrStaleEpoch, wantRanks: 2},
		{name: "epoch 2 rank 1 completes without a rate", r: epoch(native(ranked(basic("e", 1, t0, 1, 1), 1, 2), n), 2), wantOK: true, wantRanks: 2},
	}
	for _, step := range steps {
		if err := tbl.Apply(step.r); !errors.Is(err, step.wantErr) || (err == nil) != (step.wantErr == nil) {
			t.Fatalf("%s: Apply(...) = %v, want %v", step.name, err, step.wantErr)
		}
		v, ok := view(t, tbl, st, "e")
		if ok != step.wantOK {
			t.Fatalf("%s: View ok = %v, want %v", step.name, ok, step.wantOK)
		}
		if ok && (v.PrefillRate != step.wantRate || v.Ranks != step.wantRanks) {
			t.Errorf("%s: View PrefillRate = %v, Ranks = %d; want %v, %d", step.name, v.PrefillRate, v.Ranks, step.wantRate, step.wantRanks)
		}
	}
}

func withCounters(n Native, tokens, busyMicros int64) Native {
	n.PrefillUncachedTokensTotal, n.PrefillBusyMicrosTotal = tokens, busyMicros
	return n
}

func TestNativeAndThroughput(t *testing.T) {
	t.Parallel()
	n := Native{WaitingUncachedTokens: 4000, TotalTokens: 500, MaxRunningRequests: 16}
	b := basic("e", 0, t0, 2, 3)
	seqd := func(r Report, seq uint64) Report { r.Seq = seq; return r }
	tests := []struct {
		name    string
		reports []Report
		want    View
	}{
		{
			name:    "basic only",
			reports: []Report{b},
			want:    View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000},
		},
		{
			name:    "native, one sample: no rate",
			reports: []Report{native(b, n)},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				Native: true, WaitingUncachedTokens: 4000, TotalTokens: 500, MaxRunningRequests: 16},
		},
		{
			name: "native, two samples: rate and queue time",
			reports: []Report{
				native(b, withCounters(n, 10_000, 1_000_000)),
				native(seqd(b, 1), withCounters(n, 12_000, 2_000_000)), // 2000 tokens in 1 s
			},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				Native: true, WaitingUncachedTokens: 4000, TotalTokens: 500, MaxRunningRequests: 16,
				PrefillRate: 2000, QueueTime: 2 * time.Second, HasQueueTime: true},
		},
		{
			name: "only one counter grew: baseline kept, rate spans both",
			reports: []Report{
				native(b, withCounters(n, 10_000, 1_000_000)),
				native(seqd(b, 1), withCounters(n, 11_000, 1_000_000)),
				native(seqd(b, 2), withCounters(n, 14_000, 3_000_000)), // 4000 tokens in 2 s
			},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				Native: true, WaitingUncachedTokens: 4000, TotalTokens: 500, MaxRunningRequests: 16,
				PrefillRate: 2000, QueueTime: 2 * time.Second, HasQueueTime: true},
		},
		{
			name: "idle keeps the last rate",
			reports: []Report{
				native(b, withCounters(n, 10_000, 1_000_000)),
				native(seqd(b, 1), withCounters(n, 14_000, 2_000_000)), // 4000/s
				native(seqd(b, 2), withCounters(n, 14_000, 2_000_000)),
			},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				Native: true, WaitingUncachedTokens: 4000, TotalTokens: 500, MaxRunningRequests: 16,
				PrefillRate: 4000, QueueTime: time.Second, HasQueueTime: true},
		},
		{
			name: "counters going backwards rebase and keep the rate",
			reports: []Report{
				native(b, withCounters(n, 10_000, 1_000_000)),
				native(seqd(b, 1), withCounters(n, 14_000, 2_000_000)), // 4000/s
				native(seqd(b, 2), withCounters(n, 100, 100)),
				native(seqd(b, 3), withCounters(n, 1100, 500_100)), // 2000/s
			},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				Native: true, WaitingUncachedTokens: 4000, TotalTokens: 500, MaxRunningRequests: 16,
				PrefillRate: 2000, QueueTime: 2 * time.Second, HasQueueTime: true},
		},
		{
			name: "basic report after a rate: not native, rate kept",
			reports: []Report{
				native(b, withCounters(n, 10_000, 1_000_000)),
				native(seqd(b, 1), withCounters(n, 12_000, 2_000_000)),
				seqd(b, 2),
			},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				PrefillRate: 2000},
		},
		{
			name:    "zero max running is not native",
			reports: []Report{native(b, Native{WaitingUncachedTokens: 4000})},
			want:    View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000},
		},
		{
			name:    "zero kv capacity is not native",
			reports: []Report{native(func() Report { r := b; r.KVCapacityTokens = 0; return r }(), n)},
			want:    View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100},
		},
		{
			name: "one basic rank makes the engine basic",
			reports: []Report{
				native(ranked(b, 0, 2), n),
				ranked(b, 1, 2),
			},
			want: View{CapturedAt: t0, Ranks: 2, Running: 4, Waiting: 6, KVUsedTokens: 200, KVCapacityTokens: 2000},
		},
		{
			name: "engine rate needs every rank",
			reports: []Report{
				native(ranked(b, 0, 2), withCounters(n, 0, 0)),
				native(ranked(seqd(b, 1), 0, 2), withCounters(n, 1000, 1_000_000)),
				native(ranked(b, 1, 2), withCounters(n, 0, 0)),
			},
			want: View{CapturedAt: t0, Ranks: 2, Running: 4, Waiting: 6, KVUsedTokens: 200, KVCapacityTokens: 2000,
				Native: true, WaitingUncachedTokens: 8000, TotalTokens: 1000, MaxRunningRequests: 32},
		},
		{
			name: "engine rate sums ranks",
			reports: []Report{
				native(ranked(b, 0, 2), withCounters(n, 0, 0)),
				native(ranked(seqd(b, 1), 0, 2), withCounters(n, 1000, 1_000_000)),
				native(ranked(b, 1, 2), withCounters(n, 0, 0)),
				native(ranked(seqd(b, 1), 1, 2), withCounters(n, 3000, 1_000_000)),
			},
			want: View{CapturedAt: t0, Ranks: 2, Running: 4, Waiting: 6, KVUsedTokens: 200, KVCapacityTokens: 2000,
				Native: true, WaitingUncachedTokens: 8000, TotalTokens: 1000, MaxRunningRequests: 32,
				PrefillRate: 4000, QueueTime: 2 * time.Second, HasQueueTime: true},
		},
		{
			name: "nothing waiting has zero queue time",
			reports: []Report{
				native(b, withCounters(Native{MaxRunningRequests: 1}, 0, 0)),
				native(seqd(b, 1), withCounters(Native{MaxRunningRequests: 1}, 10, 10)),
			},
			want: View{CapturedAt: t0, Ranks: 1, Running: 2, Waiting: 3, KVUsedTokens: 100, KVCapacityTokens: 1000,
				Native: true, MaxRunningRequests: 1, PrefillRate: 1e6, HasQueueTime: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, _ := newTable(t, Config{})
			for i, r := range tc.reports {
				if err := tbl.Apply(r); err != nil {
					t.Fatalf("Apply(reports[%d]) = %v", i, err)
				}
			}
			got, ok := view(t, tbl, st, "e")
			if !ok {
				t.Fatal("View: no view")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("View mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRemoveEngine(t *testing.T) {
	t.Parallel()
	tbl, st, _ := newTable(t, Config{})
	for _, id := range []string{"b", "a"} {
		if err := tbl.Apply(epoch(basic(id, 3, t0, 1, 1), 7)); err != nil {
			t.Fatal(err)
		}
	}
	tbl.RemoveEngine("a")
	tbl.RemoveEngine("unknown")
	if _, ok := view(t, tbl, st, "a"); ok {
		t.Error("View(a) after RemoveEngine: have a view, want none")
	}
	if _, ok := view(t, tbl, st, "b"); !ok {
		t.Error("View(b): no view, want one")
	}
	if diff := cmp.Diff([]string{"b"}, tbl.Engines()); diff != "" {
		t.Errorf("Engines() mismatch (-want +got):\n%s", diff)
	}
	// A removed engine starts afresh: an older epoch and a lower seq apply.
	if err := tbl.Apply(epoch(basic("a", 1, t0, 4, 4), 1)); err != nil {
		t.Fatalf("Apply after RemoveEngine = %v", err)
	}
	if v, ok := view(t, tbl, st, "a"); !ok || v.Running != 4 {
		t.Errorf("View(a) = %+v, %v; want Running 4", v, ok)
	}
}

func TestSnapshotIsConsistent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		laterWrites int
		wantRunning int64
	}{
		{name: "one later report", laterWrites: 1, wantRunning: 1},
		{name: "history depth later reports", laterWrites: historyDepth, wantRunning: 1},
		{name: "beyond history depth: oldest retained", laterWrites: historyDepth + 3, wantRunning: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tbl, st, _ := newTable(t, Config{})
			if err := tbl.Apply(basic("e", 1, t0, 1, 0)); err != nil {
				t.Fatal(err)
			}
			snap := tbl.Snapshot()
			slot, _ := st.Lookup("e")
			if v, _ := snap.View(slot); v.Running != 1 {
				t.Fatalf("View before writes: Running = %d, want 1", v.Running)
			}
			for i := range tc.laterWrites {
				if err := tbl.Apply(basic("e", uint64(2+i), t0, int64(2+i), 0)); err != nil {
					t.Fatal(err)
				}
			}
			// A new engine after the snapshot is not visible in it.
			if err := tbl.Apply(basic("late", 1, t0, 1, 0)); err != nil {
				t.Fatal(err)
			}
			v, ok := snap.View(slot)
			if !ok || v.Running != tc.wantRunning {
				t.Errorf("old snapshot View = %+v, %v; want Running %d", v, ok, tc.wantRunning)
			}
			late, _ := st.Lookup("late")
			if _, ok := snap.View(late); ok {
				t.Errorf("old snapshot sees an engine first reported after it")
			}
			if v, _ := tbl.Snapshot().View(slot); v.Running != int64(1+tc.laterWrites) {
				t.Errorf("new snapshot View Running = %d, want %d", v.Running, 1+tc.laterWrites)
			}
		})
	}
	var zero Snapshot
	if _, ok := zero.View(0); ok {
		t.Error("zero Snapshot has a view")
	}
}

func TestConcurrentApply(t *testing.T) {
	t.Parallel()
	tbl, st, _ := newTable(t, Config{Freshness: time.Hour})
	const engines, ranks, reports = 8, 4, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Repeat-read consistency is covered deterministically by
				// TestSnapshotIsConsistent; here writers outpace the
				// bounded history on purpose, so check only that no view
				// is partial or torn.
				snap := tbl.Snapshot()
				for s := range st.Len() {
					if v, ok := snap.View(slots.Slot(s)); ok {
						if v.Ranks != ranks || v.Running%ranks != 0 {
							t.Errorf("partial or torn view %+v", v)
						}
					}
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for e := range engines {
		for rk := range ranks {
			writers.Add(1)
			go func() {
				defer writers.Done()
				for seq := range reports {
					// Running is 1 on every rank, so a complete view has
					// Running == ranks; anything else is partial or torn.
					r := ranked(basic(fmt.Sprintf("e%d", e), uint64(seq+1), t0, 1, int64(seq)), int32(rk), ranks)
					if err := tbl.Apply(r); err != nil {
						t.Errorf("Apply = %v", err)
						return
					}
				}
			}()
		}
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	snap := tbl.Snapshot()
	for e := range engines {
		s, _ := st.Lookup(fmt.Sprintf("e%d", e))
		v, ok := snap.View(s)
		if !ok || v.Running != ranks || v.Waiting != ranks*(reports-1) {
			t.Errorf("final view of e%d = %+v, %v", e, v, ok)
		}
	}
}

func benchTable(b *testing.B) (*Table, []slots.Slot) {
	tbl, st, clk := newTable(b, Config{})
	_ = clk
	ss := make([]slots.Slot, 64)
	for i := range ss {
		id := fmt.Sprintf("engine-%02d", i)
		r := native(basic(id, 1, t0, 3, 4), Native{WaitingUncachedTokens: 100, MaxRunningRequests: 8})
		if err := tbl.Apply(r); err != nil {
			b.Fatal(err)
		}
		ss[i], _ = st.Lookup(id)
	}
	return tbl, ss
}

// sink keeps benchmark results alive.
var sink int64

func BenchmarkSnapshot(b *testing.B) {
	tbl, _ := benchTable(b)
	tbl.now = time.Now
	b.ReportAllocs()
	for b.Loop() {
		_ = tbl.Snapshot()
	}
}

func BenchmarkView(b *testing.B) {
	tbl, ss := benchTable(b)
	snap := tbl.Snapshot()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v, ok := snap.View(ss[i&63])
		if !ok {
			b.Fatal("no view")
		}
		sink = v.Running
	}
}

// BenchmarkSnapshotAndView64 is one pick's worth of load reads: a snapshot
// and the views of 64 engines.
func BenchmarkSnapshotAndView64(b *testing.B) {
	tbl, ss := benchTable(b)
	b.ReportAllocs()
	for b.Loop() {
		snap := tbl.SnapshotAt(t0)
		var sum int64
		for _, s := range ss {
			v, ok := snap.View(s)
			if !ok {
				b.Fatal("no view")
			}
			sum += v.Running + v.WaitingUncachedTokens
		}
		sink = sum
	}
}

func BenchmarkApply(b *testing.B) {
	tbl, _ := benchTable(b)
	r := native(basic("engine-07", 1, t0, 3, 4), Native{WaitingUncachedTokens: 100, MaxRunningRequests: 8})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Seq = uint64(i + 2)
		if err := tbl.Apply(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkViewRef(b *testing.B) {
	tbl, ss := benchTable(b)
	snap := tbl.Snapshot()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v := snap.ViewRef(ss[i&63])
		if v == nil {
			b.Fatal("no view")
		}
		sink = v.Running
	}
}

// BenchmarkSnapshotAndViewRef64 is BenchmarkSnapshotAndView64 through
// ViewRef.
func BenchmarkSnapshotAndViewRef64(b *testing.B) {
	tbl, ss := benchTable(b)
	b.ReportAllocs()
	for b.Loop() {
		snap := tbl.SnapshotAt(t0)
		var sum int64
		for _, s := range ss {
			v := snap.ViewRef(s)
			if v == nil {
				b.Fatal("no view")
			}
			sum += v.Running + v.WaitingUncachedTokens
		}
		sink = sum
	}
}

func TestResetEngineBefore(t *testing.T) {
	t.Parallel()
	st := slots.NewTable()
	tb, err := New(st, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply(Report{EngineID: "e", Epoch: 5, Seq: 1, CapturedAt: time.Now(), Running: 1, KVCapacityTokens: 8}); err != nil {
		t.Fatal(err)
	}
	if tb.ResetEngineBefore("e", 5) || tb.ResetEngineBefore("e", 4) {
		t.Fatal("ResetEngineBefore dropped load of the same or a newer epoch")
	}
	s, _ := st.Lookup("e")
	if _, ok := tb.Snapshot().View(s); !ok {
		t.Fatal("load lost")
	}
	if !tb.ResetEngineBefore("e", 6) {
		t.Fatal("ResetEngineBefore kept load of an older epoch")
	}
	if _, ok := tb.Snapshot().View(s); ok {
		t.Error("view still present after the reset")
	}
	if err := tb.Apply(Report{EngineID: "e", Epoch: 1, Seq: 1, CapturedAt: time.Now(), Running: 1, KVCapacityTokens: 8}); err != nil {
		t.Errorf("a report after the reset must start afresh: %v", err)
	}
}

// TestRanksPerRank reads each rank as last reported: ranks of the advertised size that have not
// reported are listed as such, freshness is judged per rank, a shrunk size drops ranks, a new
// epoch starts over and a removed engine is unknown.
func TestRanksPerRank(t *testing.T) {
	t.Parallel()
	tbl, st, clk := newTable(t, Config{Freshness: 2 * time.Second})
	if got, _, ok := tbl.Ranks("e", t0, nil); ok || len(got) != 0 {
		t.Fatalf("Ranks of an unknown engine = %v, %v; want none, false", got, ok)
	}
	mustApply(t, tbl, ranked(basic("e", 1, t0, 3, 1), 0, 4))
	mustApply(t, tbl, native(ranked(basic("e", 1, t0.Add(-time.Second), 5, 2), 2, 4), Native{WaitingUncachedTokens: 700, TotalTokens: 10, MaxRunningRequests: 8}))
	now := t0.Add(1500 * time.Millisecond)
	got, ep, ok := tbl.Ranks("e", now, make([]RankLoad, 0, 8))
	if !ok || ep != 1 {
		t.Fatalf("Ranks = %v, epoch %d, %v; want epoch 1, true", got, ep, ok)
	}
	want := []RankLoad{
		{Rank: 0, Reported: true, Seq: 1, CapturedAt: t0, Fresh: true, Running: 3, Waiting: 1, KVUsedTokens: 100, KVCapacityTokens: 1000},
		{Rank: 1},
		{Rank: 2, Reported: true, Seq: 1, CapturedAt: t0.Add(-time.Second), Fresh: false, Running: 5, Waiting: 2, KVUsedTokens: 100, KVCapacityTokens: 1000,
			Native: true, WaitingUncachedTokens: 700},
		{Rank: 3},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Ranks (-want +got):\n%s", d)
	}
	if a := got[0].Age(now); a != 1500*time.Millisecond {
		t.Errorf("rank 0 Age = %v, want 1.5s", a)
	}
	if a := got[1].Age(now); a != 0 {
		t.Errorf("unreported rank Age = %v, want 0", a)
	}
	if a := got[0].Age(t0.Add(-time.Second)); a != 0 {
		t.Errorf("Age before the capture = %v, want 0 (clock skew)", a)
	}
	// The summed view is unknown while ranks 1 and 3 have not reported; Ranks still lists them.
	if _, ok := view(t, tbl, st, "e"); ok {
		t.Error("View known with ranks missing")
	}
	// A smaller advertised size drops the ranks above it.
	clk.Set(t0.Add(time.Second))
	mustApply(t, tbl, ranked(basic("e", 2, t0.Add(time.Second), 4, 0), 0, 2))
	if got, _, _ := tbl.Ranks("e", t0.Add(time.Second), nil); len(got) != 2 || got[0].Seq != 2 || got[1].Reported {
		t.Errorf("after dp size 2: Ranks = %+v, want rank 0 at seq 2 and rank 1 unreported", got)
	}
	// A newer epoch discards the old ranks.
	mustApply(t, tbl, epoch(basic("e", 1, t0.Add(time.Second), 9, 9), 2))
	if got, ep, _ := tbl.Ranks("e", t0.Add(time.Second), nil); ep != 2 || len(got) != 1 || got[0].Running != 9 {
		t.Errorf("after epoch 2: Ranks = %+v epoch %d, want one rank running 9 in epoch 2", got, ep)
	}
	tbl.RemoveEngine("e")
	if got, _, ok := tbl.Ranks("e", now, nil); ok || len(got) != 0 {
		t.Errorf("Ranks of a removed engine = %v, %v; want none, false", got, ok)
	}
}

func mustApply(t *testing.T, tbl *Table, r Report) {
	t.Helper()
	if err := tbl.Apply(r); err != nil {
		t.Fatalf("Apply(%+v) = %v", r, err)
	}
}
