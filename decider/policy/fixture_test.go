package policy

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// fixture is the real in-memory state policies read: a registry, a load table and an in-flight
// tracker sharing one slot table.
type fixture struct {
	t     testing.TB
	slots *slots.Table
	reg   *registry.Registry
	load  *loadtable.Table
	inf   *inflight.Tracker
	deps  Deps
	epoch map[string]uint64
	// now is the in-flight tracker's clock (dispatch times); time.Now unless a test sets it.
	now func() time.Time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	st := slots.NewTable()
	load, err := loadtable.New(st, loadtable.Config{Freshness: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, slots: st, reg: registry.New(st), load: load, epoch: map[string]uint64{}, now: time.Now}
	f.inf, err = inflight.New(st, inflight.Config{}, func() time.Time { return f.now() })
	if err != nil {
		t.Fatal(err)
	}
	f.deps = Deps{Load: load, InFlight: f.inf}
	return f
}

// engines registers engines of one role for model "m" and returns them sorted by id.
func (f *fixture) engines(role registry.Role, ids ...string) []*registry.Engine {
	f.t.Helper()
	for _, id := range ids {
		w := registry.Engine{ID: id, URL: "http://" + id + ".test:8000", Models: []string{"m"}, Role: role}
		if err := f.reg.Upsert(w); err != nil {
			f.t.Fatal(err)
		}
	}
	var out []*registry.Engine
	for _, w := range f.reg.Snapshot().Candidates("m", role) {
		for _, id := range ids {
			if w.ID == id {
				out = append(out, w)
			}
		}
	}
	return out
}

// report applies a fresh single-rank report.
func (f *fixture) report(id string, r loadtable.Report) {
	f.t.Helper()
	f.epoch[id]++
	r.EngineID = id
	r.Epoch = 1
	r.Seq = f.epoch[id]
	if r.CapturedAt.IsZero() {
		r.CapturedAt = time.Now()
	}
	if err := f.load.Apply(r); err != nil {
		f.t.Fatalf("Apply(%s): %v", id, err)
	}
}

func (f *fixture) inflight(w *registry.Engine, n int) {
	f.t.Helper()
	for range n {
		if _, err := f.inf.Acquire(w.Slot); err != nil {
			f.t.Fatal(err)
		}
	}
}

// nativeLoad is a native report with the given waiting-uncached tokens, waiting and running.
func nativeLoad(uncached, waiting, running int64) loadtable.Report {
	return loadtable.Report{Running: running, Waiting: waiting, KVUsedTokens: 100, KVCapacityTokens: 1000,
		Native: &loadtable.Native{WaitingUncachedTokens: uncached, TotalTokens: 100 + uncached, MaxRunningRequests: 64}}
}

// seq returns an intN that yields the given values in order.
func seq(vals ...int) func(int) int {
	i := 0
	return func(n int) int {
		v := vals[i%len(vals)]
		i++
		if v >= n {
			panic("seq value out of range")
		}
		return v
	}
}
