package decider

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/registry"
)

func adapterEngine(id string, adapters []string, models ...string) registry.Engine {
	w := engine(id, registry.RolePlain, models...)
	w.LoRAAdapters = adapters
	return w
}

func promptOf(from, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(from + i*3)
	}
	return t
}

// matchedTokens returns the explained prefix match of engine id, or -1 if it was not a holder.
func matchedTokens(dec *Decision, id string) int64 {
	if dec.Explain == nil {
		return -1
	}
	for _, a := range dec.Explain.Attempts {
		for _, s := range a.Stages {
			for _, c := range s.Candidates {
				if c.EngineID == id && c.MatchedTokens > 0 {
					return c.MatchedTokens
				}
			}
		}
	}
	return -1
}

// TestDecideLoRAAndSaltNamespaces: a request for an adapter (by its own model name, or by
// lora_name beside the base model) goes to the base model's buckets, to engines declaring the
// adapter, and matches only blocks cached under that adapter and cache salt.
func TestDecideLoRAAndSaltNamespaces(t *testing.T) {
	t.Parallel()
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, []registry.Engine{
		adapterEngine("a", []string{"sql-lora"}),
		adapterEngine("b", nil),
		adapterEngine("c", []string{"sql-lora"}),
		adapterEngine("x1", []string{"shared"}, "x"),
		adapterEngine("y1", []string{"shared"}, "y"),
	}, &policy.LocalIndex{Index: ix})
	f.apply(`
default_policy:
  plain: {type: cache_aware, admission: {max_running_requests: 1000}}
`)
	for _, id := range []string{"a", "b", "c", "x1", "y1"} {
		f.running(id, 0)
	}
	reg := f.reg.Snapshot()
	store := func(id string, ns kvindex.Namespace, tokens []uint32, bs int) {
		t.Helper()
		w, _ := reg.Get(id)
		hashes := make([]uint64, len(tokens)/bs)
		for i := range hashes {
			hashes[i] = uint64(w.Slot)<<40 | uint64(i)
		}
		ev := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: tokens, BlockSize: bs, Medium: kvevents.MediumGPU}
		if err := ix.Store(kvindex.Holder{Engine: w.Slot}, ns, ev); err != nil {
			t.Fatal(err)
		}
	}
	prompt := promptOf(1, 2048)
	store("c", kvindex.Namespace{Model: "m", LoRA: "sql-lora", CacheSalt: "salt-1"}, prompt, 16)
	store("b", kvindex.Namespace{Model: "m"}, prompt, 16)
	// SGLang page size 1: a 100k-token prompt held by a.
	long := promptOf(7, 100_000)
	store("a", kvindex.Namespace{Model: "m"}, long, 1)

	q := append(append([]uint32{}, prompt...), 9, 9, 9)
	tests := []struct {
		name       string
		req        policy.Request
		wantEngine []string // any of
		wantReason string
		wantMatch  int64 // matched tokens of the picked engine, -1 for none
	}{
		{"adapter by model name, salted", policy.Request{Model: "sql-lora", CacheSalt: "salt-1"}, []string{"c"}, policy.ReasonCacheCandidate, 2048},
		{"adapter by model name, other salt", policy.Request{Model: "sql-lora", CacheSalt: "salt-2"}, []string{"a", "c"}, policy.ReasonNoCacheCandidate, -1},
		{"adapter by model name, no salt", policy.Request{Model: "sql-lora"}, []string{"a", "c"}, policy.ReasonNoCacheCandidate, -1},
		{"adapter by lora_name", policy.Request{Model: "m", LoRAName: "sql-lora", CacheSalt: "salt-1"}, []string{"c"}, policy.ReasonCacheCandidate, 2048},
		{"adapter named twice, consistently", policy.Request{Model: "sql-lora", LoRAName: "sql-lora", CacheSalt: "salt-1"}, []string{"c"}, policy.ReasonCacheCandidate, 2048},
		{"base model", policy.Request{Model: "m"}, []string{"b"}, policy.ReasonCacheCandidate, 2048},
		{"salted base model misses", policy.Request{Model: "m", CacheSalt: "salt-1"}, []string{"a", "b", "c"}, policy.ReasonNoCacheCandidate, -1},
		{"undeclared lora_name restricts nothing", policy.Request{Model: "m", LoRAName: "on-demand"}, []string{"a", "b", "c"}, policy.ReasonNoCacheCandidate, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := tc.req
			req.TokenIDs, req.InputTokens, req.DryRun, req.Explain = q, int64(len(q)), true, true
			dec, err := f.d.Decide(context.Background(), req)
			if err != nil {
				t.Fatalf("Decide(%+v) error: %v", tc.req, err)
			}
			got := dec.Plain.Engine.ID
			ok := false
			for _, w := range tc.wantEngine {
				ok = ok || w == got
			}
			if !ok || dec.Plain.Reason != tc.wantReason {
				t.Errorf("Decide(%+v) = %s (%s), want one of %v (%s)", tc.req, got, dec.Plain.Reason, tc.wantEngine, tc.wantReason)
			}
			if m := matchedTokens(&dec, got); m != tc.wantMatch {
				t.Errorf("Decide(%+v) matched %d tokens on %s, want %d", tc.req, m, got, tc.wantMatch)
			}
		})
	}

	t.Run("page size 1, 100k tokens", func(t *testing.T) {
		t.Parallel()
		lq := append(append([]uint32{}, long...), 1, 2, 3)
		dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", TokenIDs: lq, InputTokens: int64(len(lq)), DryRun: true, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		if dec.Plain.Engine.ID != "a" || matchedTokens(&dec, "a") != 100_000 {
			t.Errorf("Decide(100k prompt) = %s, matched %d; want a with 100000", dec.Plain.Engine.ID, matchedTokens(&dec, "a"))
		}
	})

	for _, c := range []struct {
		name   string
		req    policy.Request
		reason string
	}{
		{"unknown model", policy.Request{Model: "nope"}, reasonUnknownModel},
		{"adapter of two base models", policy.Request{Model: "shared"}, reasonAdapterConflict},
		{"model and lora_name name different adapters", policy.Request{Model: "sql-lora", LoRAName: "other"}, reasonAdapterConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.req.InputTokens = 1
			_, err := f.d.Decide(context.Background(), c.req)
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindInvalidArgument || e.Reason != c.reason {
				t.Errorf("Decide(%+v) = %v, want invalid argument %s", c.req, err, c.reason)
			}
		})
	}
}

// TestDecideTTFTTargetWithTheLocalIndex: with the TTFT-target order on, one Decide looks the
// prompt up twice in the real KV index (the buckets' prediction, then the policy) through the
// request's memo. The memo compares prefix sources with ==; the production source once was a
// LocalIndex value holding a func, so that second lookup panicked (500 through the gateway).
func TestDecideTTFTTargetWithTheLocalIndex(t *testing.T) {
	t.Parallel()
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, []registry.Engine{engine("a", registry.RolePlain), engine("b", registry.RolePlain)},
		&policy.LocalIndex{Index: ix, Uncertain: func(string) bool { return false }})
	f.apply(`
ttft_slo: {enabled: true}
buckets:
  - {id: small, limits: {max: 4096}, groups: {plain: {policy: {type: cache_aware}}}}
  - {id: large, groups: {plain: {policy: {type: ttft_aware}}}}
`)
	f.running("a", 0)
	f.running("b", 0)
	for _, target := range []float64{500, 0.5} {
		dec, err := f.d.Decide(context.Background(), policy.Request{Model: "m", InputTokens: 512, TokenIDs: make([]uint32, 512),
			DryRun: true, Explain: true, TTFTTargetMillis: target, HasTTFTTarget: true})
		if err != nil {
			t.Fatalf("Decide(target %v ms) = %v, want a decision", target, err)
		}
		if dec.Explain == nil || dec.Explain.TTFTSLO == nil || len(dec.Explain.TTFTSLO.Buckets) != 2 {
			t.Fatalf("Decide(target %v ms): explain %+v, want both buckets predicted", target, dec.Explain)
		}
	}
}
