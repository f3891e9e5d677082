package policy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/affinity"
	"github.com/sluicehq/sluice/state/registry"
)

func newAffinity(t testing.TB) *affinity.Store {
	t.Helper()
	s, err := affinity.New(affinity.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPick(t *testing.T, p Policy, engines []*registry.Engine, req Request) Pick {
	t.Helper()
	pk, err := p.Pick(context.Background(), engines, req)
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	return pk
}

func TestSessionAware(t *testing.T) {
	t.Parallel()
	t.Run("no key binds nothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		store := newAffinity(t)
		p := newSessionAware(f.deps, admission.Limits{}, store, time.Minute)
		if pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain}); pk.Reason != "no_session" || store.Len() != 0 {
			t.Errorf("Pick() reason %q with %d bindings; want no_session and none", pk.Reason, store.Len())
		}
	})
	t.Run("first call binds, later calls reuse regardless of pressure", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		p := newSessionAware(f.deps, admission.Limits{}, newAffinity(t), time.Minute)
		req := Request{Model: "m", BucketID: "b1", Stage: registry.RolePlain, SessionKey: "s1"}
		first := mustPick(t, p, es, req)
		if first.Reason != reasonAssigned {
			t.Fatalf("first Pick reason = %q, want assigned", first.Reason)
		}
		f.report(first.Engine.ID, nativeLoad(100000, 50, 50)) // now much busier than the other
		for range 5 {
			if pk := mustPick(t, p, es, req); pk.Engine != first.Engine || pk.Reason != "session_primary" {
				t.Fatalf("Pick() = %s (%s), want %s (session_primary)", pk.Engine.ID, pk.Reason, first.Engine.ID)
			}
		}
	})
	t.Run("rejected bound engine fails the attempt and keeps its binding", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		store := newAffinity(t)
		p := newSessionAware(f.deps, admission.Limits{MaxRunningRequests: 10}, store, time.Minute)
		req := Request{Model: "m", BucketID: "b1", Stage: registry.RolePlain, SessionKey: "s1"}
		bound := mustPick(t, p, es, req).Engine
		f.report(bound.ID, nativeLoad(0, 0, 10))
		_, err := p.Pick(context.Background(), es, req)
		var rj *RejectedError
		if !errors.As(err, &rj) || rj.Rejections[0].EngineID != bound.ID {
			t.Fatalf("Pick() error = %v, want rejection of %s", err, bound.ID)
		}
		scope := affinity.Scope{Model: "m", Bucket: "b1", Stage: uint8(registry.RolePlain), Key: "s1"}
		if id, ok := store.Get(scope); !ok || id != bound.ID {
			t.Errorf("binding after rejection = %q, %v; want %s kept", id, ok, bound.ID)
		}
	})
	t.Run("binding outside the group is replaced", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		p := newSessionAware(f.deps, admission.Limits{}, newAffinity(t), time.Minute)
		req := Request{Model: "m", BucketID: "b1", Stage: registry.RolePlain, SessionKey: "s1"}
		bound := mustPick(t, p, es, req).Engine
		var others []*registry.Engine
		for _, w := range es {
			if w != bound {
				others = append(others, w)
			}
		}
		pk := mustPick(t, p, others, req)
		if pk.Engine != others[0] || pk.Reason != reasonAssigned {
			t.Fatalf("Pick() = %s (%s), want %s assigned", pk.Engine.ID, pk.Reason, others[0].ID)
		}
		if again := mustPick(t, p, es, req); again.Engine != others[0] {
			t.Errorf("rebinding did not stick: %s", again.Engine.ID)
		}
	})
	t.Run("bindings are scoped by bucket and stage", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b")
		store := newAffinity(t)
		p := newSessionAware(f.deps, admission.Limits{}, store, time.Minute)
		mustPick(t, p, es, Request{Model: "m", BucketID: "b1", Stage: registry.RolePlain, SessionKey: "s"})
		mustPick(t, p, es, Request{Model: "m", BucketID: "b2", Stage: registry.RolePlain, SessionKey: "s"})
		if store.Len() != 2 {
			t.Errorf("bindings = %d, want one per bucket", store.Len())
		}
	})
	t.Run("concurrent first requests converge", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		es := f.engines(registry.RolePlain, "a", "b", "c", "d")
		p := newSessionAware(f.deps, admission.Limits{}, newAffinity(t), time.Minute)
		req := Request{Model: "m", BucketID: "b1", Stage: registry.RolePlain, SessionKey: "race"}
		var wg sync.WaitGroup
		got := make([]*registry.Engine, 16)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pk, err := p.Pick(context.Background(), es, req)
				if err == nil {
					got[i] = pk.Engine
				}
			}()
		}
		wg.Wait()
		for _, w := range got {
			if w == nil || w != got[0] {
				t.Fatalf("concurrent first picks diverged: %v", got)
			}
		}
	})
}

func TestSticky(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePlain, "a", "b", "c")
	store := newAffinity(t)
	p := newSticky(f.deps, admission.Limits{}, store, time.Minute, newRoundRobin(f.deps, admission.Limits{}))
	// Different routing keys spread by the round-robin fallback, then stick.
	var first []string
	for _, key := range []string{"t1", "t2", "t3"} {
		pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, RoutingKey: key})
		first = append(first, pk.Engine.ID)
	}
	if first[0] != "a" || first[1] != "b" || first[2] != "c" {
		t.Errorf("round-robin fallback assignments = %v, want [a b c]", first)
	}
	for i, key := range []string{"t1", "t2", "t3"} {
		pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, RoutingKey: key})
		if pk.Engine.ID != first[i] || pk.Reason != "sticky_primary" {
			t.Errorf("key %s: Pick() = %s (%s), want %s sticky_primary", key, pk.Engine.ID, pk.Reason, first[i])
		}
	}
	if pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePlain, SessionKey: "not-a-routing-key"}); pk.Reason != "no_routing_key" {
		t.Errorf("Pick() without routing key reason = %q", pk.Reason)
	}
	// The sticky policy checks the engine its fallback returns.
	strict := newSticky(f.deps, admission.Limits{MaxInflightRequests: 1}, newAffinity(t), time.Minute, newRoundRobin(f.deps, admission.Limits{}))
	f.inflight(es[0], 1)
	if _, err := strict.Pick(context.Background(), es, Request{Model: "m", Stage: registry.RolePlain, RoutingKey: "x"}); err == nil {
		t.Error("sticky admitted a fallback pick at its in-flight cap")
	}
}
