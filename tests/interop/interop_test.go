package interop

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
)

// Engine ids of the fleet.
const (
	vllmA   = "vllm-a"   // vLLM, 2 DP ranks, replay socket, lossy link, LoRA adapter sql-lora
	vllmB   = "vllm-b"   // vLLM, KV-cache groups, STORAGE tier, restarts
	sglangA = "sglang-a" // SGLang, page 16, lossy link without replay, salt, CPU_PINNED, LoRA, /v1/loads
	sglangB = "sglang-b" // SGLang, page 1: the 100k-token prompt
	vllmC   = "vllm-c"   // vLLM whose publisher connects to the link's bound socket; EAGLE
)

// vllmBlock is the block size of the vLLM engines' events (their /metrics says the same).
const vllmBlock = 16

// matchTimeout bounds how long an event takes from the Python publisher to the decider's
// index (ZMQ -> enginelink -> Kafka -> decider).
const matchTimeout = 45 * time.Second

// uncertainNote is what the cache_aware explain says of a holder whose KV residency is
// uncertain after a seq gap (decider/policy/trace.go).
const uncertainNote = "residency uncertain"

// TestInterop runs the engines' own KV-event publishers and metrics names through the
// real enginelink, Kafka and decider; see the package doc. The link reads the engines from
// its own -engines file.
func TestInterop(t *testing.T) { runInterop(t, false) }

// TestInteropFleet is TestInterop with the link following the decider's engine registry:
// the decider's configuration file is the one place the engines are declared.
func TestInteropFleet(t *testing.T) { runInterop(t, true) }

// runInterop starts the stack and runs the scenarios. The subtests share one stack and run
// in order: each uses token ids of its own, so they do not see each other's blocks, but
// later ones rely on the engines' state (seq numbers) left by earlier ones.
func runInterop(t *testing.T, fleet bool) {
	s := startStack(t, fleet, []*engine{
		{id: vllmA, kind: "vllm", dpSize: 2, replay: true, lossy: true, lora: []string{loraAdapter}},
		{id: vllmB, kind: "vllm", dpSize: 1},
		{id: sglangA, kind: "sglang", dpSize: 1, pageSize: 16, lossy: true, loads: true},
		{id: sglangB, kind: "sglang", dpSize: 1, pageSize: 1},
		{id: vllmC, kind: "vllm", dpSize: 1, bind: true},
	})
	for _, id := range s.order {
		e := s.engines[id]
		for r := range e.dpSize {
			s.warmUp(t, e, r)
		}
	}

	t.Run("StoresWithParents", func(t *testing.T) {
		t1 := toks(100_000, 48)
		s.vllm(t, vllmA, 0, stored(t1[:32], hashes(1, 0, 2)...))
		s.vllm(t, vllmA, 0, storedAfter(t1[32:], hashes(1, 1, 1)[0], hashes(1, 2, 1)...))
		s.expectMatch(t, "vLLM chain of 3 blocks", req(append(t1, toks(190_000, 7)...)), vllmA, 48)

		s.sgStore(t, sglangA, 0, "p-a", "", toks(200_000, 32), sgOpts{})
		s.sgStore(t, sglangA, 0, "p-b", "p-a", toks(200_032, 16), sgOpts{})
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang radix node and child", req(append(toks(200_000, 48), toks(290_000, 5)...)), sglangA, 48)
	})

	t.Run("ConnectingPublisher", func(t *testing.T) {
		tc := toks(150_000, 48)
		s.vllm(t, vllmC, 0, stored(tc[:32], hashes(15, 0, 2)...), storedAfter(tc[32:], hashes(15, 1, 1)[0], hashes(15, 2, 1)...))
		s.expectMatch(t, "vLLM publisher connected to the link's socket, told apart by topic", req(tc), vllmC, 48)
	})

	t.Run("EAGLELookahead", func(t *testing.T) {
		// vLLM with EAGLE hashes each block with the token after it (lookahead_token_ids):
		// the last matched block depends on what follows, so it is not counted. The index
		// treats the whole holder as an EAGLE engine from then on, so this runs on vllm-c,
		// after its other scenario.
		te := toks(170_000, 49)
		ev := stored(te[:48], hashes(17, 0, 3)...)
		ev["lookahead_token_ids"] = [][]uint32{{te[16]}, {te[32]}, {te[48]}}
		s.vllm(t, vllmC, 0, ev)
		s.expectMatch(t, "vLLM EAGLE blocks: the last matched block is not counted", req(te), vllmC, 32)
	})

	t.Run("ByteHashes", func(t *testing.T) {
		// vLLM with int hashes disabled sends each block hash as its 32-byte digest.
		tb := toks(160_000, 48)
		digest := func(i int) string { return fmt.Sprintf("%064x", 0xb10c0000+i) }
		first := stored(tb[:32])
		first["block_hashes"], first["hash_bytes"] = []string{digest(0), digest(1)}, true
		second := stored(tb[32:])
		second["block_hashes"], second["parent_block_hash"], second["hash_bytes"] = []string{digest(2)}, digest(1), true
		s.vllm(t, vllmB, 0, first, second)
		s.expectMatch(t, "vLLM bytes hashes, parent linked", req(tb), vllmB, 48)
		rm := removed()
		rm["block_hashes"], rm["hash_bytes"] = []string{digest(2)}, true
		s.vllm(t, vllmB, 0, rm)
		s.expectMatch(t, "vLLM bytes hash removed", req(tb), vllmB, 32)
	})

	t.Run("Removals", func(t *testing.T) {
		t1 := append(toks(100_000, 48), toks(190_000, 7)...)
		s.vllm(t, vllmA, 0, removed(hashes(1, 2, 1)...))
		s.expectMatch(t, "vLLM last block removed", req(t1), vllmA, 32)
		s.vllm(t, vllmA, 0, removed(hashes(1, 1, 1)...))
		s.expectMatch(t, "vLLM middle block removed", req(t1), vllmA, 16)

		s.sgRemove(t, sglangA, 0, "p-b", "")
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang child node removed", req(append(toks(200_000, 48), toks(290_000, 5)...)), sglangA, 32)
	})

	t.Run("DPRanks", func(t *testing.T) {
		t2 := toks(300_000, 32)
		s.vllm(t, vllmA, 1, stored(t2, hashes(3, 0, 2)...))
		s.expectMatch(t, "vLLM blocks on DP rank 1", req(t2), vllmA, 32)
		s.expectMatch(t, "vLLM rank 0 blocks beside rank 1's", req(toks(100_000, 48)), vllmA, 16)
	})

	t.Run("Clears", func(t *testing.T) {
		s.vllm(t, vllmA, 0, map[string]any{"type": "AllBlocksCleared"})
		s.expectMatch(t, "vLLM rank 0 cleared", req(toks(100_000, 48)), "", 0)
		s.expectMatch(t, "vLLM rank 1 keeps its blocks after rank 0's clear", req(toks(300_000, 32)), vllmA, 32)

		s.sgClear(t, sglangA, 0)
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang cleared", req(toks(200_000, 48)), "", 0)
	})

	t.Run("LoRA", func(t *testing.T) {
		t3 := toks(400_000, 32)
		ev := stored(t3, hashes(4, 0, 2)...)
		ev["lora_name"], ev["lora_id"] = loraAdapter, 1
		ev["extra_keys"] = [][]any{{loraAdapter}, {loraAdapter}}
		s.vllm(t, vllmA, 0, ev)
		s.barrier(t, vllmA, 0) // the adapter's blocks are applied
		s.expectMatch(t, "vLLM adapter blocks are no hit for the base model", req(t3), "", 0)
		withLoRA := req(t3)
		withLoRA.LoraName = loraAdapter
		s.expectMatch(t, "vLLM adapter blocks, lora_name", withLoRA, vllmA, 32)
		byModel := req(t3)
		byModel.Model = loraAdapter
		s.expectMatch(t, "vLLM adapter blocks, model=<declared adapter>", byModel, vllmA, 32)

		t3s := toks(410_000, 32)
		s.sgStore(t, sglangA, 0, "lora-a", "", t3s, sgOpts{lora: "sg-lora"})
		s.sgFlush(t, sglangA, 0)
		s.barrier(t, sglangA, 0)
		s.expectMatch(t, "SGLang adapter blocks are no hit for the base model", req(t3s), "", 0)
		sgReq := req(t3s)
		sgReq.LoraName = "sg-lora"
		s.expectMatch(t, "SGLang adapter blocks, lora_name", sgReq, sglangA, 32)
		sgOther := req(t3s)
		sgOther.LoraName = "other-lora"
		s.expectMatch(t, "SGLang adapter blocks are no hit for another adapter", sgOther, "", 0)
	})

	t.Run("CacheSalt", func(t *testing.T) {
		t4 := toks(500_000, 32)
		s.sgStore(t, sglangA, 0, "salt-a", "", t4, sgOpts{salt: "tenant-1"})
		s.sgFlush(t, sglangA, 0)
		s.barrier(t, sglangA, 0) // the salted blocks are applied
		s.expectMatch(t, "SGLang salted blocks, no salt", req(t4), "", 0)
		other := req(t4)
		other.CacheSalt = "tenant-2"
		s.expectMatch(t, "SGLang salted blocks, another salt", other, "", 0)
		salted := req(t4)
		salted.CacheSalt = "tenant-1"
		s.expectMatch(t, "SGLang salted blocks, same salt", salted, sglangA, 32)
	})

	t.Run("KVCacheGroups", func(t *testing.T) {
		t5 := toks(600_000, 32)
		h := hashes(6, 0, 2)
		g0, g1 := stored(t5, h...), stored(t5, h...)
		g0["group_idx"], g1["group_idx"] = 0, 1
		s.vllm(t, vllmB, 0, g0, g1)
		s.expectMatch(t, "vLLM blocks in groups 0 and 1", req(t5), vllmB, 32)
		rm := removed(h...)
		rm["group_idx"] = 1
		s.vllm(t, vllmB, 0, rm)
		s.barrier(t, vllmB, 0)
		s.expectMatch(t, "vLLM removal in group 1 leaves group 0's blocks", req(t5), vllmB, 32)
		rm0 := removed(h...)
		rm0["group_idx"] = 0
		s.vllm(t, vllmB, 0, rm0)
		s.expectMatch(t, "vLLM removed from both groups", req(t5), "", 0)
	})

	t.Run("Tiers", func(t *testing.T) {
		t6 := toks(700_000, 32)
		h := hashes(7, 0, 2)
		storage := stored(t6, h...)
		storage["medium"] = "STORAGE"
		s.vllm(t, vllmB, 0, stored(t6, h...), storage)
		s.expectMatch(t, "vLLM GPU + STORAGE", req(t6), vllmB, 32)
		s.vllm(t, vllmB, 0, removed(h...)) // medium GPU
		s.barrier(t, vllmB, 0)
		s.expectMatch(t, "vLLM evicted from GPU, still in STORAGE", req(t6), vllmB, 32)
		rmStorage := removed(h...)
		rmStorage["medium"] = "STORAGE"
		s.vllm(t, vllmB, 0, rmStorage)
		s.expectMatch(t, "vLLM removed from STORAGE too", req(t6), "", 0)

		t6s := toks(710_000, 32)
		s.sgStore(t, sglangA, 0, "tier-a", "", t6s, sgOpts{})
		s.sgStore(t, sglangA, 0, "tier-a", "", t6s, sgOpts{medium: "CPU_PINNED"}) // HiCache write-back
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang GPU + CPU_PINNED", req(t6s), sglangA, 32)
		s.sgRemove(t, sglangA, 0, "tier-a", "GPU")
		s.sgFlush(t, sglangA, 0)
		s.barrier(t, sglangA, 0)
		s.expectMatch(t, "SGLang evicted from GPU, still in CPU_PINNED", req(t6s), sglangA, 32)
		s.sgRemove(t, sglangA, 0, "tier-a", "CPU_PINNED")
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang removed from CPU_PINNED too", req(t6s), "", 0)
	})

	t.Run("HugePromptPageSize1", func(t *testing.T) {
		const n = 100_000
		t7 := toks(20_000, n) // ids in a real vocabulary's range (Qwen3: 151,936)
		s.sgStore(t, sglangB, 0, "huge", "", t7, sgOpts{})
		r := s.sgFlush(t, sglangB, 0)
		if got := r["events"]; got != float64(1) {
			t.Errorf("SGLang recorder made %v events of the 100k-token node, want 1 (coalesced)", got)
		}
		if got := r["hashes"]; got != float64(n) {
			t.Errorf("SGLang recorder event has %v hashes, want %d", got, n)
		}
		s.expectMatch(t, "SGLang 100k-token prompt, page size 1", req(append(t7, toks(1_200_000, 10)...)), sglangB, n)
	})

	t.Run("GapUncertain", func(t *testing.T) {
		// sglang-a has no replay socket: a lost batch leaves it uncertain until a clear.
		s.engines[sglangA].py.do(t, map[string]any{"op": "drop", "rank": 0, "count": 1})
		s.sgStore(t, sglangA, 0, "lost", "", toks(800_000, 32), sgOpts{})
		s.sgFlush(t, sglangA, 0) // lost on the way
		s.sgStore(t, sglangA, 0, "after-gap", "", toks(810_000, 32), sgOpts{})
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang batch after the gap", req(toks(810_000, 32)), sglangA, 32)
		s.expectNote(t, "SGLang uncertain after a lost batch", req(toks(810_000, 32)), sglangA, true)
		s.expectUncertainHolders(t, "one (engine, rank) uncertain in the decider's /metrics", 1)
		s.expectMatch(t, "SGLang lost batch is not indexed", req(toks(800_000, 32)), "", 0)
		s.sgClear(t, sglangA, 0)
		s.sgFlush(t, sglangA, 0)
		s.expectMatch(t, "SGLang cleared after the gap", req(toks(810_000, 32)), "", 0)
		m := s.barrier(t, sglangA, 0)
		s.expectNote(t, "SGLang certain again after a clear", req(m), sglangA, false)
		s.expectUncertainHolders(t, "no holder uncertain after the clear", 0)
	})

	t.Run("GapReplayed", func(t *testing.T) {
		// vllm-a has a replay socket: the link fills the gap from it.
		s.engines[vllmA].py.do(t, map[string]any{"op": "drop", "rank": 0, "count": 1})
		t8, t9 := toks(900_000, 32), toks(910_000, 32)
		s.vllm(t, vllmA, 0, stored(t8, hashes(9, 0, 2)...)) // lost on the way
		s.vllm(t, vllmA, 0, stored(t9, hashes(9, 2, 2)...))
		s.expectMatch(t, "vLLM batch after the gap", req(t9), vllmA, 32)
		s.expectMatch(t, "vLLM lost batch recovered through the replay socket", req(t8), vllmA, 32)
		s.expectNote(t, "vLLM certain after the replay", req(t8), vllmA, false)
		s.expectUncertainHolders(t, "no holder uncertain after the replay", 0)
	})

	t.Run("Restart", func(t *testing.T) {
		e := s.engines[vllmB]
		old := toks(1_300_000, 32)
		s.vllm(t, vllmB, 0, stored(old, hashes(13, 0, 2)...))
		s.expectMatch(t, "vLLM blocks before the restart", req(old), vllmB, 32)
		e.py.kill()
		s.startEngine(t, e) // a new publisher process: seq starts at 0 again
		s.warmUp(t, e, 0)
		s.expectMatch(t, "vLLM blocks of the previous process are gone", req(old), "", 0)
		fresh := toks(1_310_000, 32)
		s.vllm(t, vllmB, 0, stored(fresh, hashes(13, 2, 2)...))
		s.expectMatch(t, "vLLM blocks of the new process", req(fresh), vllmB, 32)
	})

	t.Run("Metrics", func(t *testing.T) {
		s.engines[vllmB].py.do(t, map[string]any{"op": "load", "rank": 0, "running": 3, "waiting": 1, "usage": 0.5})
		s.engines[sglangB].py.do(t, map[string]any{"op": "load", "rank": 0, "running": 5, "waiting": 2, "usage": 0.25})
		s.engines[vllmA].py.do(t, map[string]any{"op": "load", "rank": 0, "running": 2, "waiting": 0, "usage": 0.25})
		s.engines[vllmA].py.do(t, map[string]any{"op": "load", "rank": 1, "running": 4, "waiting": 3, "usage": 0.5})
		want := map[string]*sluicev1.EngineLoad{
			// Two DP ranks (the engine="0"/"1" label), summed by the decider.
			vllmA: {LoadKnown: true, Running: 6, Waiting: 3, KvUsed: 32768 + 65536, KvCapacity: 2 * 131072},
			// vLLM: capacity = num_gpu_blocks 8192 x block_size 16; used = usage x capacity.
			vllmB: {LoadKnown: true, Running: 3, Waiting: 1, KvUsed: 65536, KvCapacity: 131072},
			// SGLang /metrics: num_used_tokens and max_total_num_tokens as exported.
			sglangB: {LoadKnown: true, Running: 5, Waiting: 2, KvUsed: 110500, KvCapacity: 442000},
		}
		proctest.Eventually(t, poll, matchTimeout, "engine load from /metrics in GET /v1/admin/engines", func() (bool, string) {
			engs := s.adminEngines(t)
			var bad []string
			for id, w := range want {
				l := engs[id].GetLoad()
				got := &sluicev1.EngineLoad{LoadKnown: l.GetLoadKnown(), Running: l.GetRunning(), Waiting: l.GetWaiting(),
					KvUsed: l.GetKvUsed(), KvCapacity: l.GetKvCapacity()}
				if got.String() != w.String() {
					bad = append(bad, fmt.Sprintf("%s: got {%v} want {%v}", id, got, w))
				}
			}
			return len(bad) == 0, strings.Join(bad, "; ")
		})
	})

	t.Run("SGLangLoads", func(t *testing.T) {
		s.engines[sglangA].py.do(t, map[string]any{"op": "load", "rank": 0, "running": 1, "waiting": 4, "usage": 0.5})
		w := &sluicev1.EngineLoad{LoadKnown: true, Running: 1, Waiting: 4, KvUsed: 221000, KvCapacity: 442000}
		proctest.Eventually(t, poll, matchTimeout, "SGLang /v1/loads (real LoadSnapshot.to_dict) in GET /v1/admin/engines", func() (bool, string) {
			l := s.adminEngines(t)[sglangA].GetLoad()
			got := &sluicev1.EngineLoad{LoadKnown: l.GetLoadKnown(), Running: l.GetRunning(), Waiting: l.GetWaiting(),
				KvUsed: l.GetKvUsed(), KvCapacity: l.GetKvCapacity()}
			return got.String() == w.String(), fmt.Sprintf("got {%v} want {%v}", got, w)
		})
	})
}

// --- events ---------------------------------------------------------------------------

// toks returns n token ids base, base+1, ...
func toks(base, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

// hashes returns n distinct vLLM-style block hashes of scenario sc from index i on. They
// are >= 2^63 like vLLM's default (sluice rehashes token ids; the engine's hashes only
// link parents and name removals).
func hashes(sc, i, n int) []uint64 {
	out := make([]uint64, n)
	for k := range out {
		out[k] = 1<<63 | uint64(sc)<<32 | uint64(i+k)
	}
	return out
}

// stored is a vLLM BlockStored map (fields as engine.py passes them to the real struct).
func stored(tokens []uint32, hs ...uint64) map[string]any {
	return map[string]any{"type": "BlockStored", "block_hashes": hs, "token_ids": tokens, "block_size": vllmBlock,
		"medium": "GPU"}
}

// storedAfter is stored with a parent block.
func storedAfter(tokens []uint32, parent uint64, hs ...uint64) map[string]any {
	ev := stored(tokens, hs...)
	ev["parent_block_hash"] = parent
	return ev
}

// removed is a vLLM BlockRemoved map.
func removed(hs ...uint64) map[string]any {
	return map[string]any{"type": "BlockRemoved", "block_hashes": hs, "medium": "GPU"}
}

func req(tokens []uint32) *sluicev1.DecideRequest {
	return &sluicev1.DecideRequest{TokenIds: tokens}
}

// vllm publishes one KVEventBatch of events on rank r of a vLLM engine.
func (s *stack) vllm(t testing.TB, id string, r int, events ...map[string]any) {
	t.Helper()
	s.engines[id].py.do(t, map[string]any{"op": "publish", "rank": r, "events": events})
}

// sgOpts are the optional fields of an SGLang store.
type sgOpts struct {
	medium, salt, lora string
}

// sgStore records a radix node (parent "" = the root) with SGLang's KVCacheEventRecorder.
func (s *stack) sgStore(t testing.TB, id string, r int, node, parent string, tokens []uint32, o sgOpts) {
	t.Helper()
	cmd := map[string]any{"op": "store", "rank": r, "node": node, "tokens": tokens}
	if parent != "" {
		cmd["parent"] = parent
	}
	if o.medium != "" {
		cmd["medium"] = o.medium
	}
	if o.salt != "" {
		cmd["cache_salt"] = o.salt
	}
	if o.lora != "" {
		cmd["lora_name"] = o.lora
	}
	s.engines[id].py.do(t, cmd)
}

// sgRemove records the eviction of a node from a tier ("" = GPU).
func (s *stack) sgRemove(t testing.TB, id string, r int, node, medium string) {
	t.Helper()
	cmd := map[string]any{"op": "remove", "rank": r, "node": node}
	if medium != "" {
		cmd["medium"] = medium
	}
	s.engines[id].py.do(t, cmd)
}

func (s *stack) sgClear(t testing.TB, id string, r int) {
	t.Helper()
	s.engines[id].py.do(t, map[string]any{"op": "clear", "rank": r})
}

// sgFlush publishes what the recorder queued as one batch, as SGLang's scheduler does
// after each step.
func (s *stack) sgFlush(t testing.TB, id string, r int) map[string]any {
	t.Helper()
	return s.engines[id].py.do(t, map[string]any{"op": "flush", "rank": r})
}

// --- synchronisation -------------------------------------------------------------------

// markers counts the barrier and warm-up blocks, so each has token ids of its own.
var markers int

// barrier publishes a fresh block on rank r of e after everything published before and
// waits until Decide sees it: the link and the decider keep each rank's order, so every
// earlier event of that rank has been applied then. Returns the marker's tokens.
func (s *stack) barrier(t testing.TB, id string, r int) []uint32 {
	t.Helper()
	e := s.engines[id]
	markers++
	tokens := toks(50_000_000+markers*1000, 16)
	s.publishMarker(t, e, r, tokens, markers)
	s.expectMatch(t, fmt.Sprintf("barrier on %s rank %d", id, r), req(tokens), id, 16)
	return tokens
}

func (s *stack) publishMarker(t testing.TB, e *engine, r int, tokens []uint32, n int) {
	t.Helper()
	if e.kind == "vllm" {
		s.vllm(t, e.id, r, stored(tokens, hashes(1000+n, 0, 1)...))
		return
	}
	node := fmt.Sprintf("marker-%d", n)
	s.sgStore(t, e.id, r, node, "", tokens, sgOpts{})
	s.sgFlush(t, e.id, r)
}

// warmUp waits until rank r of e is connected end to end. A ZMQ subscriber misses what a
// publisher sends before its subscription arrives, so a first block is published again
// until Decide sees it; the rank is then cleared, and the probe must be gone, so that
// the scenarios start on an empty, certain cache whatever the link made of the
// messages it missed.
func (s *stack) warmUp(t testing.TB, e *engine, r int) {
	t.Helper()
	markers++
	n := markers
	tokens := toks(50_000_000+n*1000, 16)
	deadline := time.Now().Add(2 * matchTimeout)
	for {
		s.publishMarker(t, e, r, tokens, n)
		if ok, _ := s.poll(req(tokens), e.id, 16, 2*time.Second); ok {
			break
		}
		if time.Now().After(deadline) {
			s.expectMatch(t, fmt.Sprintf("warm-up of %s rank %d", e.id, r), req(tokens), e.id, 16)
		}
	}
	if e.kind == "vllm" {
		s.vllm(t, e.id, r, map[string]any{"type": "AllBlocksCleared"})
	} else {
		s.sgClear(t, e.id, r)
		s.sgFlush(t, e.id, r)
	}
	s.expectMatch(t, fmt.Sprintf("warm-up probe of %s rank %d cleared", e.id, r), req(tokens), "", 0)
}

// --- expectations ----------------------------------------------------------------------

// expectMatch polls Decide (dry run, explain) until engine wantEngine is picked with
// exactly want matched tokens and every other candidate matched none; wantEngine ""
// means no candidate holds any of the prompt.
func (s *stack) expectMatch(t testing.TB, what string, r *sluicev1.DecideRequest, wantEngine string, want int64) {
	t.Helper()
	ok, last := s.poll(r, wantEngine, want, matchTimeout)
	if !ok {
		t.Fatalf("%s: Decide(%s, %d tokens) not reached within %v: want %s matched %d tokens (others 0); last seen: %s",
			what, describe(r), len(r.GetTokenIds()), matchTimeout, orNobody(wantEngine), want, last)
	}
}

func (s *stack) poll(r *sluicev1.DecideRequest, wantEngine string, want int64, timeout time.Duration) (bool, string) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, state := s.check(r, wantEngine, want)
		if ok {
			return true, state
		}
		last = state
		if time.Now().After(deadline) {
			return false, last
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check runs one Decide and compares it with the expectation.
func (s *stack) check(r *sluicev1.DecideRequest, wantEngine string, want int64) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.decide(ctx, r)
	if err != nil {
		return false, "Decide error: " + err.Error()
	}
	st := cacheStage(resp)
	if st == nil {
		return false, "no cache_aware stage in explain: " + resp.String()
	}
	var parts []string
	ok := true
	for _, c := range st.GetCandidates() {
		parts = append(parts, fmt.Sprintf("%s matched %d (%s)", c.GetEngineId(), c.GetMatchedTokens(), c.GetNote()))
		w := int64(0)
		if c.GetEngineId() == wantEngine {
			w = want
		}
		if c.GetMatchedTokens() != w {
			ok = false
		}
	}
	if wantEngine != "" && want > 0 && st.GetPickedEngineId() != wantEngine {
		ok = false
	}
	return ok, fmt.Sprintf("picked %s (%s, lookup %s); %s", st.GetPickedEngineId(), st.GetReason(), st.GetPrefixLookup(), strings.Join(parts, ", "))
}

// expectNote polls until the explain note of candidate id says (or no longer says) that
// its residency is uncertain.
func (s *stack) expectNote(t testing.TB, what string, r *sluicev1.DecideRequest, id string, uncertain bool) {
	t.Helper()
	proctest.Eventually(t, poll, matchTimeout, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := s.decide(ctx, r)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range cacheStage(resp).GetCandidates() {
			if c.GetEngineId() == id {
				has := strings.Contains(c.GetNote(), uncertainNote)
				return has == uncertain, fmt.Sprintf("%s note %q", id, c.GetNote())
			}
		}
		return false, id + " is not a candidate: " + resp.String()
	})
}

// expectUncertainHolders polls the decider's /metrics until
// sluice_ingest_kv_uncertain_holders (holders left uncertain by a seq gap) is want.
func (s *stack) expectUncertainHolders(t testing.TB, what string, want float64) {
	t.Helper()
	proctest.Eventually(t, poll, matchTimeout, what, func() (bool, string) {
		resp, err := quick.Get("http://" + s.deciderHTTP + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, err.Error()
		}
		var lines []string
		sum, seen := 0.0, false
		for _, line := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(line, "sluice_ingest_kv_uncertain_holders{") {
				continue
			}
			lines = append(lines, line)
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return false, line + ": " + err.Error()
			}
			sum, seen = sum+v, true
		}
		return seen && sum == want, fmt.Sprintf("%q", lines)
	})
}

// cacheStage is the cache_aware stage of the decision's explain for bucket cacheBucket.
func cacheStage(resp *sluicev1.DecideResponse) *sluicev1.StageAttempt {
	for _, a := range resp.GetExplain().GetAttempts() {
		if a.GetBucketId() != cacheBucket {
			continue
		}
		for _, st := range a.GetStages() {
			if st.GetPolicy() == "cache_aware" {
				return st
			}
		}
	}
	return nil
}

func describe(r *sluicev1.DecideRequest) string {
	d := "model " + r.GetModel()
	if r.GetModel() == "" {
		d = "model " + model
	}
	if r.GetLoraName() != "" {
		d += ", lora_name " + r.GetLoraName()
	}
	if r.GetCacheSalt() != "" {
		d += ", cache_salt " + r.GetCacheSalt()
	}
	return d
}

func orNobody(id string) string {
	if id == "" {
		return "nobody"
	}
	return id
}
