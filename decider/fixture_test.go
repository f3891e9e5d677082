package decider

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/affinity"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// fixture is a Decider over real in-memory state.
type fixture struct {
	t    testing.TB
	reg  *registry.Registry
	load *loadtable.Table
	inf  *inflight.Tracker
	d    *Decider
	seq  map[string]uint64
}

func newFixture(t testing.TB, engines []registry.Engine) *fixture {
	return newFixtureWith(t, engines, nil)
}

// newFixtureWith also attaches a prefix source (for cache_aware) and an affinity store.
func newFixtureWith(t testing.TB, engines []registry.Engine, prefix policy.PrefixSource) *fixture {
	t.Helper()
	st := slots.NewTable()
	load, err := loadtable.New(st, loadtable.Config{Freshness: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := inflight.New(st, inflight.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st)
	if err := reg.Replace(engines); err != nil {
		t.Fatal(err)
	}
	aff, err := affinity.New(affinity.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(slog.New(slog.DiscardHandler), reg, policy.Deps{Load: load, InFlight: inf, Prefix: prefix, Affinity: aff}, inf, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, reg: reg, load: load, inf: inf, d: d, seq: map[string]uint64{}}
}

// apply parses and installs a YAML configuration.
func (f *fixture) apply(yaml string) {
	f.t.Helper()
	doc, err := config.Parse([]byte(yaml), config.FormatYAML)
	if err != nil {
		f.t.Fatalf("config.Parse: %v", err)
	}
	if err := f.d.Apply(config.Snapshot{Version: 7, Document: doc, Source: "test"}); err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
}

// running reports a fresh basic load with the given running requests.
func (f *fixture) running(id string, n int64) {
	f.t.Helper()
	f.seq[id]++
	err := f.load.Apply(loadtable.Report{EngineID: id, Epoch: 1, Seq: f.seq[id], CapturedAt: time.Now(),
		Running: n, KVUsedTokens: 1, KVCapacityTokens: 100})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) inFlight(id string) int64 {
	w, ok := f.reg.Snapshot().Get(id)
	if !ok {
		f.t.Fatalf("no worker %q", id)
	}
	return f.inf.InFlight(w.Slot)
}

func engine(id string, role registry.Role, models ...string) registry.Engine {
	if len(models) == 0 {
		models = []string{"m"}
	}
	w := registry.Engine{ID: id, URL: "http://" + id + ".test:8000", Models: models, Role: role}
	if role == registry.RolePrefill {
		w.BootstrapPort = 8998
	}
	return w
}

// roundRobin is a round-robin policy without admission caps or state, for groups whose policy
// a test never reaches or only names.
func roundRobin(t testing.TB) policy.Policy {
	t.Helper()
	p, err := policy.New(config.PolicySpec{Type: config.PolicyRoundRobin}, policy.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
