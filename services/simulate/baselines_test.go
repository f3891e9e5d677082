package simulate

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/simengine/engine"
	"github.com/sluicehq/sluice/state/loadtable"
)

// allPeers is every baseline's -policies name.
func allPeers() string {
	return peerPrefix + strings.Join(peerNames, ","+peerPrefix)
}

// fakeEnv is a peerEnv over n engines of 16-token blocks whose KV overlap and load the test sets.
func fakeEnv(n int, overlap []int64, loads []loadtable.View) peerEnv {
	return peerEnv{n: n, blockSize: 16, rng: rand.New(rand.NewPCG(1, 2)),
		overlap: func(_ []uint32, out []int64) { copy(out, overlap) },
		load: func(i int) (loadtable.View, bool) {
			if loads == nil {
				return loadtable.View{}, false
			}
			return loads[i], true
		}}
}

// arrival is a prompt of len(chain) full 16-token blocks with the given block hashes.
func arrival(at time.Duration, chain ...uint64) *peerArrival {
	return &peerArrival{now: start.Add(at), tokens: make([]uint32, 16*len(chain)), chain: chain}
}

// TestSGLangCacheAware: the tree is the router's own history. Two engines, blocks of 16.
func TestSGLangCacheAware(t *testing.T) {
	t.Parallel()
	s := newSGLangCacheAware(fakeEnv(2, nil, nil), defaultSGLangConfig())
	route := func(a *peerArrival) int {
		i := s.pick(a)
		s.routed(i, a, nil)
		return i
	}
	// Empty trees: the smallest tree (both 0, the lowest index) gets A = [1 2 3 4].
	if got := route(arrival(0, 1, 2, 3, 4)); got != 0 {
		t.Fatalf("first request to %d, want 0 (smallest tree)", got)
	}
	// [9 8 7 6] matches nothing: the smallest tree is now engine 1's (0 tokens vs 64).
	if got := route(arrival(time.Second, 9, 8, 7, 6)); got != 1 {
		t.Fatalf("unrelated request to %d, want 1 (smallest tree)", got)
	}
	// [1 2 5 5]: 2 of 4 blocks on engine 0 = 0.5 > 0.3: engine 0, though its tree is larger.
	if got := route(arrival(2*time.Second, 1, 2, 5, 5)); got != 0 {
		t.Fatalf("0.5 match went to %d, want 0", got)
	}
	// [1 7 7 7 7]: 1 of 5 blocks = 0.2 <= 0.3: the smallest tree, engine 1 (64 vs 96 tokens).
	if got := route(arrival(3*time.Second, 1, 7, 7, 7, 7)); got != 1 {
		t.Fatalf("0.2 match went to %d, want 1 (below the threshold)", got)
	}
	// Imbalance: engine 0 has 70 in flight, engine 1 has 3: 67 > 64 and 70 > 1.5×3, so the
	// shortest queue, engine 1, gets a full match of engine 0's prefix.
	s.inflight[0], s.inflight[1] = 70, 3
	if got := s.pick(arrival(4*time.Second, 1, 2, 3, 4)); got != 1 {
		t.Errorf("imbalanced (70 vs 3) pick %d, want 1 (shortest queue)", got)
	}
	// 70 vs 50: the absolute gap 20 is under 64: balanced, the cache match wins.
	s.inflight[1] = 50
	if got := s.pick(arrival(4*time.Second, 1, 2, 3, 4)); got != 0 {
		t.Errorf("balanced (70 vs 50) pick %d, want 0 (prefix)", got)
	}
	// 200 vs 135: gap 65 > 64 but 200 < 1.5×135 = 202.5: balanced.
	s.inflight[0], s.inflight[1] = 200, 135
	if got := s.pick(arrival(4*time.Second, 1, 2, 3, 4)); got != 0 {
		t.Errorf("200 vs 135 pick %d, want 0 (under the relative threshold)", got)
	}
	// 200 vs 130: gap 70 > 64 and 200 > 195: imbalanced.
	s.inflight[1] = 130
	if got := s.pick(arrival(4*time.Second, 1, 2, 3, 4)); got != 1 {
		t.Errorf("200 vs 130 pick %d, want 1 (shortest queue)", got)
	}
	// finished decrements the router's own count.
	s.finished(0, nil)
	if s.inflight[0] != 199 {
		t.Errorf("in flight %d after a finish, want 199", s.inflight[0])
	}
}

// TestSGLangEviction: a worker's tree above max_tree_size loses its least recently used
// leaves at the next eviction tick.
func TestSGLangEviction(t *testing.T) {
	t.Parallel()
	cfg := defaultSGLangConfig()
	cfg.MaxTreeSize = 3 * 16
	cfg.EvictionInterval = time.Minute
	s := newSGLangCacheAware(fakeEnv(1, nil, nil), cfg)
	s.pick(arrival(0)) // the eviction clock starts at the first request
	old, recent := arrival(0, 1, 2, 3), arrival(10*time.Second, 1, 5)
	s.routed(0, old, nil)
	s.routed(0, recent, nil) // tree: 1 (t=10s), 2 and 3 (t=0), 5 (t=10s): 4 blocks
	s.pick(arrival(time.Minute))
	if s.size[0] != 48 {
		t.Fatalf("tree size %d after eviction, want 48", s.size[0])
	}
	if _, ok := s.tree[3]; ok {
		t.Error("block 3 (oldest leaf) survived eviction")
	}
	for _, h := range []uint64{1, 2, 5} {
		if _, ok := s.tree[h]; !ok {
			t.Errorf("block %d evicted; only the oldest leaf should go", h)
		}
	}
}

// TestDynamoCost: hand-computed costs, blocks of 16, weight 1, a 64-token (4-block) request.
func TestDynamoCost(t *testing.T) {
	t.Parallel()
	// Engine 0 holds 32 of the tokens, engine 1 none.
	d := newDynamo(fakeEnv(2, []int64{32, 0}, nil), 1, 0)
	// Engine 1 has an active sequence of 2 unrelated blocks, still in prefill with 16 tokens.
	busy := &engine.SimRun{}
	d.routed(1, arrival(0, 100, 101), busy)
	d.prefill[1][0].tokens = 16
	a := arrival(0, 1, 2, 3, 4)
	costs := d.cost(a)
	// Engine 0: prefill (64−32)/16 = 2, decode 0 + 4 = 4: cost 6.
	// Engine 1: prefill (16 + 64)/16 = 5, decode 2 + 4 = 6: cost 11.
	if costs[0] != 6 || costs[1] != 11 {
		t.Fatalf("costs %v, want [6 11]", costs)
	}
	if got := d.pick(a); got != 0 {
		t.Errorf("pick %d, want 0 (min cost)", got)
	}
	// Engine 0 gets the request; then an identical one: engine 0's decode blocks are shared
	// (assume KV reuse): decode 4 + 0 = 4, prefill (32 active + 32)/16 = 4: cost 8; engine 1
	// still 11.
	r0 := &engine.SimRun{}
	d.routed(0, a, r0)
	if costs := d.cost(a); costs[0] != 8 || costs[1] != 11 {
		t.Fatalf("costs after routing %v, want [8 11]", costs)
	}
	// Once r0 has its first token its prefill load ends; once finished its blocks free.
	r0.FirstToken = start.Add(time.Second)
	if costs := d.cost(arrival(time.Second, 1, 2, 3, 4)); costs[0] != 6 {
		t.Errorf("engine 0 cost after first token %v, want 6", costs[0])
	}
	d.finished(0, r0)
	if len(d.active[0]) != 0 {
		t.Errorf("active blocks after finish: %v", d.active[0])
	}
	// Weight 0 is pure load: engine 0 (no active) over engine 1.
	d0 := newDynamo(fakeEnv(2, []int64{0, 64}, nil), 0, 0)
	d0.routed(1, arrival(0, 100), &engine.SimRun{})
	if got := d0.pick(a); got != 0 {
		t.Errorf("weight 0 pick %d, want 0 (fewer active blocks)", got)
	}
	// A temperature samples, still favouring the cheaper engine.
	dt := newDynamo(fakeEnv(2, []int64{64, 0}, nil), 1, 0.5)
	zero := 0
	for range 1000 {
		if dt.pick(a) == 0 {
			zero++
		}
	}
	if zero < 600 || zero == 1000 {
		t.Errorf("softmax picked the cheaper engine %d/1000 times, want most but not all", zero)
	}
}

// TestLLMDScores: weighted sum 3×prefix + 2×queue + 2×(1 − KV usage), the highest wins.
func TestLLMDScores(t *testing.T) {
	t.Parallel()
	a := arrival(0, 1, 2, 3, 4)
	pick := func(overlap []int64, loads []loadtable.View) int {
		b, err := newBaseline("peer:llmd", fakeEnv(2, overlap, loads))
		if err != nil {
			t.Fatal(err)
		}
		return b.pick(a)
	}
	// Engine 0: prefix 1, queue 4 (score 0), usage 0.25: 3 + 0 + 1.5 = 4.5.
	// Engine 1: prefix 0, queue 0 (score 1), usage 0: 0 + 2 + 2 = 4.
	loads := []loadtable.View{{Waiting: 4, KVUsedTokens: 25, KVCapacityTokens: 100}, {KVCapacityTokens: 100}}
	if got := pick([]int64{64, 0}, loads); got != 0 {
		t.Errorf("pick %d, want 0 (4.5 vs 4)", got)
	}
	// Usage 0.75 on engine 0: 3 + 0 + 0.5 = 3.5 < 4.
	loads[0].KVUsedTokens = 75
	if got := pick([]int64{64, 0}, loads); got != 1 {
		t.Errorf("pick %d, want 1 (3.5 vs 4)", got)
	}
	// Half the prefix on engine 1 with equal load: 1.5 + 2 + 2 beats 0 + 2 + 2.
	if got := pick([]int64{0, 32}, nil); got != 1 {
		t.Errorf("pick %d, want 1 (prefix 0.5)", got)
	}
}

// TestPlainReferences: round robin cycles; least load and power of two follow the router's own
// in-flight counts.
func TestPlainReferences(t *testing.T) {
	t.Parallel()
	rr, _ := newBaseline("peer:round_robin", fakeEnv(3, nil, nil))
	for k, want := range []int{0, 1, 2, 0} {
		if got := rr.pick(arrival(0)); got != want {
			t.Errorf("round robin pick %d = %d, want %d", k, got, want)
		}
	}
	ll, _ := newBaseline("peer:least_load", fakeEnv(3, nil, nil))
	for _, i := range []int{0, 0, 1, 2, 2} {
		ll.routed(i, nil, nil)
	}
	if got := ll.pick(arrival(0)); got != 1 {
		t.Errorf("least load pick %d, want 1 (in flight 2, 1, 2)", got)
	}
	p2, _ := newBaseline("peer:power_of_two", fakeEnv(2, nil, nil))
	p2.routed(0, nil, nil)
	for range 20 {
		if got := p2.pick(arrival(0)); got != 1 {
			t.Fatalf("power of two over 2 engines picked %d, want 1 (fewer in flight)", got)
		}
	}
	if _, err := newBaseline("peer:nope", fakeEnv(2, nil, nil)); err == nil {
		t.Error("unknown baseline accepted")
	}
	cfg := handConfig(2, "peer:nope")
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted -policies peer:nope")
	}
}

// TestPeerSeesOwnHistory: the harness feeds each baseline what its router sees. With the KV
// events never arriving, SGLang's cache_aware (its own routing history) still keeps a repeated
// prompt on one engine, and its hit rate is what the engines really served.
func TestPeerSeesOwnHistory(t *testing.T) {
	t.Parallel()
	reqs := syntheticTrace(4)
	for i := range reqs {
		reqs[i].BlockIDs = []int64{1, 2, 3, 4}
		reqs[i].InputTokens = 4 * 512
		reqs[i].Arrival = time.Duration(i) * time.Second
	}
	cfg := handConfig(2, "peer:sglang_cache_aware,peer:round_robin")
	cfg.KVLag = time.Hour
	rep, err := Simulate(context.Background(), quiet, cfg, nil, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Policies[0]; p.Policy != "peer:sglang_cache_aware" || p.BlockHitRate != 0.75 || p.MaxShare != 1 {
		t.Errorf("%s: hit rate %v, max share %v; want 0.75, 1", p.Policy, p.BlockHitRate, p.MaxShare)
	}
	// Round robin alternates: requests 2 and 3 hit (8 of 16 blocks).
	if p := rep.Policies[1]; p.BlockHitRate != 0.5 || p.MaxShare != 0.5 {
		t.Errorf("%s: hit rate %v, max share %v; want 0.5, 0.5", p.Policy, p.BlockHitRate, p.MaxShare)
	}
}

// TestRealTraceWindowPeers runs every baseline beside sluice's cache_aware on two minutes of the
// conversation trace.
func TestRealTraceWindowPeers(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(realTrace); err != nil {
		t.Fatalf("the repository's trace is missing (testdata/traces): %v", err)
	}
	cfg := DefaultConfig()
	cfg.Trace = realTrace
	cfg.Window = 2 * time.Minute
	cfg.Policies = "cache_aware," + allPeers()
	cfg.Out = t.TempDir()
	var stdout bytes.Buffer
	if err := Run(context.Background(), quiet, cfg, &stdout); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(cfg.Out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"cache_aware"}, strings.Split(allPeers(), ",")...) {
		if !strings.Contains(string(md), "| "+want+" | ") {
			t.Errorf("report.md lacks a row for %s:\n%s", want, md)
		}
	}
}
