package decider

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/kvevents"
	"github.com/sluicehq/sluice/state/kvindex"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// BenchmarkDecideCacheAware measures an in-process Decide with cache_aware over 64 engines and
// an 8k-token prompt against an index of 1M blocks (2048 prompts x 512 blocks of 16 tokens,
// each prompt held by one engine), including hashing the token ids. Reports p50/p99 per call.
func BenchmarkDecideCacheAware(b *testing.B) {
	benchDecidePrefix(b, "cache_aware", policy.ReasonCacheCandidate)
}

// BenchmarkDecideTTFTAware is BenchmarkDecideCacheAware with ttft_aware: the same lookup, then
// an estimate for every one of the 64 engines. The holder (idle, 8k tokens cached) wins.
func BenchmarkDecideTTFTAware(b *testing.B) {
	benchDecidePrefix(b, "ttft_aware", policy.ReasonLeastTTFT)
}

func benchDecidePrefix(b *testing.B, policyType, wantReason string) {
	const engines, prompts, blocks, bs = 64, 2048, 512, 16
	var ws []registry.Engine
	for i := range engines {
		ws = append(ws, engine(fmt.Sprintf("e%02d", i), registry.RolePlain))
	}
	ix, err := kvindex.New(kvindex.Config{})
	if err != nil {
		b.Fatal(err)
	}
	f := newFixtureWith(b, ws, &policy.LocalIndex{Index: ix})
	f.apply(`
default_policy:
  plain: {type: ` + policyType + `, admission: {max_running_requests: 1000000}}
`)
	reg := f.reg.Snapshot()
	prompt := func(p int) []uint32 {
		t := make([]uint32, blocks*bs)
		for i := range t {
			t[i] = uint32(p*1_000_003 + i)
		}
		return t
	}
	for p := range prompts {
		w, _ := reg.Get(fmt.Sprintf("e%02d", p%engines))
		hashes := make([]uint64, blocks)
		for i := range hashes {
			hashes[i] = uint64(p)<<20 | uint64(i)
		}
		ev := &kvevents.BlockStored{BlockHashes: hashes, TokenIDs: prompt(p), BlockSize: bs, Medium: kvevents.MediumGPU}
		if err := ix.Store(kvindex.Holder{Engine: w.Slot}, kvindex.Namespace{Model: "m"}, ev); err != nil {
			b.Fatal(err)
		}
	}
	for i, w := range ws {
		err := f.load.Apply(loadtable.Report{EngineID: w.ID, Epoch: 1, Seq: 1, CapturedAt: time.Now(),
			Running: int64(i % 7), Waiting: int64(i % 3), KVUsedTokens: 100, KVCapacityTokens: 1000,
			Native: &loadtable.Native{WaitingUncachedTokens: int64(i * 10), TotalTokens: 100, MaxRunningRequests: 64}})
		if err != nil {
			b.Fatal(err)
		}
	}
	queries := make([][]uint32, 64)
	for i := range queries {
		queries[i] = prompt(i * 31 % prompts)
	}
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1<<20)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		q := queries[i%len(queries)]
		i++
		start := time.Now()
		dec, err := f.d.Decide(ctx, policy.Request{Model: "m", InputTokens: int64(len(q)), TokenIDs: q, DryRun: true})
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
		if err != nil || dec.Plain.Reason != wantReason {
			b.Fatalf("Decide = %+v, %v; want a %s pick", dec.Plain, err, wantReason)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
