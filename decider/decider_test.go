package decider

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

func decideErr(t *testing.T, f *fixture, req policy.Request) *Error {
	t.Helper()
	_, err := f.d.Decide(context.Background(), req)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Decide() error = %v, want *Error", err)
	}
	return e
}

func TestDecideDefaultBuckets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{
		engine("a1", registry.RolePlain, "plain-model"),
		engine("p1", registry.RolePrefill, "pd-model"),
		engine("d1", registry.RoleDecode, "pd-model"),
	})
	f.apply("{}")
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "plain-model", InputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if dec.BucketID != "plain" || dec.PD || dec.Plain.Engine.ID != "a1" || dec.ConfigVersion != 7 {
		t.Errorf("plain model decision = %+v, want bucket plain engine a1 version 7", dec)
	}
	dec, err = f.d.Decide(context.Background(), policy.Request{Model: "pd-model", InputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if dec.BucketID != "pd" || !dec.PD || dec.Prefill.Engine.ID != "p1" || dec.Decode.Engine.ID != "d1" {
		t.Errorf("pd model decision = %+v, want bucket pd with p1 + d1", dec)
	}
}

func TestDecidePDDecodeFailureMovesBothPicks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{
		engine("p1", registry.RolePrefill), engine("d1", registry.RoleDecode),
		engine("p2", registry.RolePrefill), engine("d2", registry.RoleDecode),
	})
	f.apply(`
buckets:
  - id: first
    rank: 1
    groups:
      pd:
        prefill: {worker_ids: [p1], policy: {type: power_of_two}}
        decode: {worker_ids: [d1], policy: {type: power_of_two, admission: {max_running_requests: 4}}}
  - id: second
    rank: 2
    groups:
      pd:
        prefill: {worker_ids: [p2]}
        decode: {worker_ids: [d2]}
`)
	f.running("d1", 4) // at the cap: rejected
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{dec.BucketID, dec.Prefill.Engine.ID, dec.Decode.Engine.ID}
	if diff := cmp.Diff([]string{"second", "p2", "d2"}, got); diff != "" {
		t.Errorf("Decide() mismatch (-want +got):\n%s", diff)
	}
	if n := f.inFlight("p1"); n != 0 {
		t.Errorf("discarded prefill pick p1 holds %d in-flight, want 0", n)
	}
	if f.inFlight("p2") != 1 || f.inFlight("d2") != 1 {
		t.Errorf("lease did not cover both PD engines: p2=%d d2=%d", f.inFlight("p2"), f.inFlight("d2"))
	}
	ids, ok := f.d.Release(dec.Lease.ID)
	if !ok || f.inFlight("p2") != 0 || f.inFlight("d2") != 0 {
		t.Errorf("Release did not free both engines")
	}
	if diff := cmp.Diff([]string{"d2", "p2"}, ids); diff != "" {
		t.Errorf("Release() engines mismatch (-want +got):\n%s", diff)
	}
	if _, ok := f.d.Release(dec.Lease.ID); ok {
		t.Errorf("second Release of the same lease reported true")
	}
}

func TestDecideRejectionsSurviveLaterEmptyBucket(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	f.apply(`
buckets:
  - id: busy
    rank: 1
    groups: {plain: {worker_ids: [a], policy: {type: round_robin, admission: {max_running_requests: 2}}}}
  - id: empty
    rank: 2
    groups: {plain: {worker_ids: []}}
`)
	f.running("a", 2)
	e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 1})
	if e.Kind != KindUnavailable || e.Reason != reasonAdmissionRejected {
		t.Fatalf("Decide() error = %v (%s %s), want Unavailable ADMISSION_REJECTED", e, e.Kind, e.Reason)
	}
	want := []Rejection{{BucketID: "busy", Role: registry.RolePlain, EngineID: "a", Limit: admission.LimitRunningRequests}}
	if diff := cmp.Diff(want, e.Rejections); diff != "" {
		t.Errorf("rejections mismatch (-want +got):\n%s", diff)
	}
}

func TestDecideAccumulatesRejectionsAcrossBuckets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	f.apply(`
buckets:
  - id: one
    limits: {min: 0, max: 100}
    groups: {plain: {worker_ids: [a], policy: {type: round_robin, admission: {max_running_requests: 1}}}}
  - id: two
    groups: {plain: {worker_ids: [b], policy: {type: random, admission: {max_inflight_requests: 1}}}}
`)
	f.running("a", 1)
	if _, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 200}); err != nil {
		t.Fatal(err) // only "two" fits 200 tokens: b gets one in-flight
	}
	e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 50})
	want := []Rejection{
		{BucketID: "one", Role: registry.RolePlain, EngineID: "a", Limit: admission.LimitRunningRequests},
		{BucketID: "two", Role: registry.RolePlain, EngineID: "b", Limit: admission.LimitInflightRequests},
	}
	if diff := cmp.Diff(want, e.Rejections); diff != "" {
		t.Errorf("rejections mismatch (-want +got):\n%s", diff)
	}
}

func TestDecideLastEmptyStage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		engines   []registry.Engine
		unhealthy string
		want      string
	}{
		{"no decode engines", []registry.Engine{engine("p", registry.RolePrefill)}, "", reasonNoDecodeCandidates},
		{"no prefill engines", []registry.Engine{engine("d", registry.RoleDecode)}, "", reasonNoPrefillCandidates},
		{"only unhealthy plain engines", []registry.Engine{engine("a", registry.RolePlain)}, "a", reasonNoHealthyEngines},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.engines)
			if tt.unhealthy != "" {
				f.reg.SetHealth(tt.unhealthy, registry.Health{Healthy: false, Reason: "probe failed"})
			}
			f.apply("{}")
			e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 1})
			if e.Kind != KindUnavailable || e.Reason != tt.want {
				t.Errorf("Decide() = %s %s (%v), want Unavailable %s", e.Kind, e.Reason, e, tt.want)
			}
		})
	}
}

// foreign returns a newly allocated engine carrying a candidate's id.
type foreign struct{}

func (foreign) Name() string { return "foreign" }
func (foreign) Pick(_ context.Context, engines []*registry.Engine, _ policy.Request) (policy.Pick, error) {
	w := *engines[0]
	return policy.Pick{Engine: &w, Reason: "foreign"}, nil
}

func TestDecideForeignPickStopsTheLoop(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain)})
	f.apply("{}")
	first, err := newPlainBucket("first", 0, lim(0, Unbounded, Unbounded), newEngineGroup(registry.RolePlain, foreign{}))
	if err != nil {
		t.Fatal(err)
	}
	second := plainBucket(t, "second", 1, lim(0, Unbounded, Unbounded))
	res, err := newBucketResolver([]*bucket{first, second})
	if err != nil {
		t.Fatal(err)
	}
	f.d.rt.Load().models.Store("m", res)
	e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 1})
	if e.Kind != KindInternal || e.Reason != reasonOutsideCandidates || !errors.Is(e, errOutsideCandidates) {
		t.Errorf("Decide() = %s %s (%v), want Internal OUTSIDE_CANDIDATES", e.Kind, e.Reason, e)
	}
}

func TestEngineGroupMembership(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{
		engine("c", registry.RolePlain), engine("a", registry.RolePlain), engine("b", registry.RolePlain),
		engine("sick", registry.RolePlain), engine("other", registry.RolePlain, "other-model"),
	})
	f.reg.SetHealth("sick", registry.Health{Healthy: false, Reason: "breaker open"})
	rr := roundRobin(t)
	reg := f.reg.Snapshot()
	names := func(ws []*registry.Engine) []string {
		out := []string{}
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	tests := []struct {
		name string
		g    *engineGroup
		want []string
	}{
		{"nil membership is every healthy engine of the model and role, by id", newEngineGroup(registry.RolePlain, rr), []string{"a", "b", "c"}},
		{"explicit empty membership is none", newEngineGroupOf(registry.RolePlain, rr, []string{}), []string{}},
		{"membership intersects, sorted by id", newEngineGroupOf(registry.RolePlain, rr, []string{"c", "sick", "a", "ghost", "other"}), []string{"a", "c"}},
		{"role filter applies", newEngineGroup(registry.RoleDecode, rr), []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, names(tt.g.candidates(reg, "m"))); diff != "" {
				t.Errorf("Candidates() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideRequestValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain)})
	f.apply(`
buckets:
  - id: small
    limits: {min: 0, max: 100}
    groups: {plain: {}}
`)
	tests := []struct {
		name   string
		req    policy.Request
		reason string
	}{
		{"empty model", policy.Request{InputTokens: 1}, reasonEmptyModel},
		{"unknown model", policy.Request{Model: "nope", InputTokens: 1}, reasonUnknownModel},
		{"negative input", policy.Request{Model: "m", InputTokens: -5}, reasonInvalidInputTokens},
		{"peak below input", policy.Request{Model: "m", InputTokens: 10, ExpectedPeakTokens: 9, HasPeak: true}, reasonPeakBelowInput},
		{"token ids disagree with input", policy.Request{Model: "m", InputTokens: 3, TokenIDs: []uint32{1, 2}}, reasonTokenIDsMismatch},
		{"no bucket fits", policy.Request{Model: "m", InputTokens: 101}, reasonNoMatchingBucket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := decideErr(t, f, tt.req)
			if e.Kind != KindInvalidArgument || e.Reason != tt.reason {
				t.Errorf("Decide() = %s %s (%v), want InvalidArgument %s", e.Kind, e.Reason, e, tt.reason)
			}
		})
	}
	t.Run("too many token ids", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain)})
		f.apply("{}")
		f.d.cfg.MaxTokenIDs = 4
		e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 5, TokenIDs: []uint32{1, 2, 3, 4, 5}})
		if e.Reason != reasonTooManyTokenIDs {
			t.Errorf("Decide() reason = %s, want %s", e.Reason, reasonTooManyTokenIDs)
		}
	})
}

func TestDecideDryRunAndExclude(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	f.apply(`
default_policy:
  plain: {type: round_robin}
`)
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 1, DryRun: true, ExcludeEngineIDs: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if dec.Plain.Engine.ID != "b" || dec.Lease.ID != "" || f.inFlight("b") != 0 {
		t.Errorf("dry run with a excluded = %s lease %q inflight %d; want b, no lease, nothing in flight", dec.Plain.Engine.ID, dec.Lease.ID, f.inFlight("b"))
	}
	e := decideErr(t, f, policy.Request{Model: "m", InputTokens: 1, ExcludeEngineIDs: []string{"a", "b"}})
	if e.Reason != reasonNoCandidates {
		t.Errorf("all excluded: reason %s, want %s", e.Reason, reasonNoCandidates)
	}
}

func TestDecideExplain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	f.apply(`
buckets:
  - id: busy
    groups: {plain: {worker_ids: [a], policy: {type: round_robin, admission: {max_running_requests: 1}}}}
  - id: spare
    rank: 1
    groups: {plain: {worker_ids: [b]}}
`)
	f.running("a", 3)
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 1, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	ex := dec.Explain
	if ex == nil || len(ex.Attempts) != 2 {
		t.Fatalf("Explain = %+v, want two attempts", ex)
	}
	if a := ex.Attempts[0]; a.Outcome != "admission_rejected" || a.Stages[0].Candidates[0].Rejection != admission.LimitRunningRequests || !a.Stages[0].Candidates[0].LoadKnown {
		t.Errorf("first attempt = %+v, want a rejected at max_running_requests with known load", a)
	}
	if a := ex.Attempts[1]; a.Outcome != "picked" || a.Stages[0].PickedEngineID != "b" {
		t.Errorf("second attempt = %+v, want b picked", a)
	}
}

func TestApplyRefusesUnbuildableConfig(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain)})
	doc := &config.Document{DefaultPolicy: &config.StagePolicies{Plain: &config.PolicySpec{Type: "no_such_policy"}}}
	if err := f.d.Apply(config.Snapshot{Version: 1, Document: doc}); err == nil {
		t.Fatal("Apply accepted an unknown policy type")
	}
	if f.d.ConfigVersion() != 0 {
		t.Errorf("a refused configuration was installed")
	}
}

func TestExplainSaysWhyAnEngineIsExcluded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)})
	f.apply("{}")
	f.reg.SetHealth("a", registry.Health{Healthy: false, Reason: "circuit breaker open"})
	dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 1, Explain: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	cands := dec.Explain.Attempts[0].Stages[0].Candidates
	found := false
	for _, c := range cands {
		if c.EngineID == "a" && c.Note == "unhealthy: circuit breaker open" {
			found = true
		}
	}
	if dec.Plain.Engine.ID != "b" || !found {
		t.Errorf("decision %s, candidates %+v; want b, with a listed as unhealthy", dec.Plain.Engine.ID, cands)
	}
}
