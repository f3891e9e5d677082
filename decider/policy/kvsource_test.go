package policy

import (
	"testing"

	"github.com/sluicehq/sluice/decider/admission"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/registry"
)

// TestCacheAwareOverLocalIndex runs the cache-aware policy over the real KV index: the engine
// that stored a long prefix gets the request; a cold prefix falls back.
func TestCacheAwareOverLocalIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	es := f.engines(registry.RolePrefill, "a", "b", "c")
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const bs = 16
	prompt := make([]uint32, 2048)
	for i := range prompt {
		prompt[i] = uint32(i*7 + 1)
	}
	hashes := make([]uint64, len(prompt)/bs)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	ev := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: prompt, BlockSize: bs, Medium: kvevents.MediumGPU}
	if err := ix.Store(kvindex.Holder{Engine: es[1].Slot}, kvindex.Namespace{Model: "m"}, ev); err != nil {
		t.Fatal(err)
	}
	p := newCacheAware(f.deps, admission.Limits{}, defaults(), &LocalIndex{Index: ix})
	pk := mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: 2100, TokenIDs: append(prompt, make([]uint32, 52)...)})
	if pk.Engine.ID != "b" || pk.Reason != ReasonCacheCandidate {
		t.Errorf("Pick(held prefix) = %s (%s), want b cache_candidate", pk.Engine.ID, pk.Reason)
	}
	cold := make([]uint32, 2048)
	pk = mustPick(t, p, es, Request{Model: "m", Stage: registry.RolePrefill, InputTokens: 2048, TokenIDs: cold})
	if pk.Reason != ReasonNoCacheCandidate {
		t.Errorf("Pick(cold prefix) reason = %s, want no_cache_candidate", pk.Reason)
	}
}
