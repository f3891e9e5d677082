package policy

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/state/registry"
	"github.com/sluicehq/sluice/state/slots"
)

// dispatchedChunk is the granularity, in tokens, at which dispatchedPrefixes remembers prompts:
// a match counts whole chunks, so it can fall short of the engine's own block match by up to
// dispatchedChunk−1 tokens, never exceed it by more than one engine block.
const dispatchedChunk = 64

// dispatchedGrace is how long past the predicted first token a dispatched prompt is still
// counted: the engine stores the prompt's blocks when its prefill ends and its KV events
// reach the index some tens of milliseconds later (enginelink batches every 50 ms).
const dispatchedGrace = 250 * time.Millisecond

// dispatchedMaxLife bounds how long one dispatch is remembered, whatever its estimate.
const dispatchedMaxLife = 10 * time.Minute

// dispatchedMaxEntries bounds the memory: past it, new dispatches are not remembered (the
// policy falls back to the KV index alone) until expired entries are swept.
const dispatchedMaxEntries = 1 << 20

// dispatchedPrefixes remembers the prompts this policy sent to each engine until their
// blocks can have reached the KV index (docs/decisions.md, "ttft_aware", prompts in flight).
// An engine prefills its queue first come, first served, so a request sent to it after
// another is prefilled after that one's blocks are stored: for it, the engine holds the
// earlier prompt even while the KV index, fed by the engine's events after the prefill,
// cannot show it yet. Under load, when queues are seconds long, the next turn of a
// conversation often arrives before the previous turn's prefill; without this memory it
// looks cold everywhere and is spread by load, and the fleet prefills the conversation again.
//
// Prompts are kept as a chain of hashes of dispatchedChunk-token chunks in the request's
// namespace, each (hash, engine) with the instant it expires: the dispatch's predicted first
// token twice over (an estimate may be short by as much as itself) plus dispatchedGrace. The
// chain makes "engine e was sent the first d chunks" monotone in d (a dispatch stores every
// depth of its chain, and a later one sharing a shorter prefix only extends those), so the
// deepest live depth is found by binary search. Safe for concurrent use.
type dispatchedPrefixes struct {
	mu   sync.Mutex
	seed maphash.Seed
	m    map[dispatchedKey]int64 // expiry, Unix nanoseconds
}

type dispatchedKey struct {
	h    uint64
	slot slots.Slot
}

func newDispatchedPrefixes() *dispatchedPrefixes {
	return &dispatchedPrefixes{seed: maphash.MakeSeed(), m: make(map[dispatchedKey]int64)}
}

// chain appends to out the hash of every whole chunk-prefix of tokens in ns: out[d] covers the
// first (d+1)·dispatchedChunk tokens.
func (p *dispatchedPrefixes) chain(ns Namespace, tokens []uint32, out []uint64) []uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(ns.Model)
	h.WriteByte(0)
	h.WriteString(ns.LoRA)
	h.WriteByte(0)
	h.WriteString(ns.CacheSalt)
	prev := h.Sum64()
	for c := 0; c+dispatchedChunk <= len(tokens); c += dispatchedChunk {
		chunk := tokens[c : c+dispatchedChunk]
		h.Reset()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], prev)
		h.Write(b[:])
		// The chunk's bytes in memory order: the hash is only compared within this process.
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&chunk[0])), 4*len(chunk)))
		prev = h.Sum64()
		out = append(out, prev)
	}
	return out
}

// record remembers that the prompt whose chain is hs was sent to s at now, until expires.
func (p *dispatchedPrefixes) record(hs []uint64, s slots.Slot, now, expires time.Time) {
	if len(hs) == 0 || !expires.After(now) {
		return
	}
	exp, at := expires.UnixNano(), now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(at, 4*len(hs)+64)
	if len(p.m)+len(hs) > dispatchedMaxEntries {
		return
	}
	for _, h := range hs {
		k := dispatchedKey{h, s}
		if p.m[k] < exp {
			p.m[k] = exp
		}
	}
}

// sweepLocked visits up to budget entries and drops the expired ones among them. Each record
// sweeps four times what it adds: a map range starts at a random place, so expired entries
// are found wherever they are, and no Decide waits for a sweep of the whole map.
func (p *dispatchedPrefixes) sweepLocked(now int64, budget int) {
	for k, exp := range p.m {
		if budget--; budget < 0 {
			return
		}
		if exp <= now {
			delete(p.m, k)
		}
	}
}

// matched sets out[i] to the tokens of the prompt whose chain is hs (whole chunks) that engine
// engines[i] was sent by a dispatch still remembered at now; 0 for none.
func (p *dispatchedPrefixes) matched(hs []uint64, engines []*registry.Engine, now time.Time, out []int64) {
	clear(out)
	if len(hs) == 0 {
		return
	}
	at := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	alive := func(d int, s slots.Slot) bool { // the first d+1 chunks
		exp, ok := p.m[dispatchedKey{hs[d], s}]
		return ok && exp > at
	}
	for i, w := range engines {
		s := w.Slot
		if !alive(0, s) {
			continue
		}
		lo, hi := 0, len(hs)-1 // alive(lo); find the deepest alive depth
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if alive(mid, s) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		out[i] = int64(lo+1) * dispatchedChunk
	}
}
