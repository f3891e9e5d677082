package engine

import (
	"fmt"
	"time"
)

// core is the engine model's state and rules: admission to the running slots and the prefill
// server, the prefix-cache match at the start of prefill, the prefill and decode durations, the
// blocks stored at the end of prefill and the load accounting. The live Engine runs it under its
// lock with goroutines and a Clock; Sim runs it single-threaded from events in virtual time. Both
// call the same methods, so the two forms of the model cannot drift.
//
// The model (docs/architecture.md, "Simulated engine model"): one FIFO queue; its head starts
// when a running slot is free and the engine's single prefill server is idle. The server
// prefills one request's uncached tokens at PrefillTokensPerSec, so an engine's prefill
// throughput is that rate whatever the number of slots (a per-step token budget, as vLLM and
// SGLang schedule it); decode is continuous, a fixed time per token for every running request.
// A decode engine has no prefill server: its requests start on a free slot alone.
type core struct {
	cfg             Config
	cache           *prefixCache
	running         int
	kvUsed          int64 // prompt (+ generated, live engine) tokens of running requests
	waitingUncached int64 // uncached-token estimates of the queued requests
	// prefilling is set while the prefill server serves a request: svcTokens uncached tokens
	// from svcStart to svcEnd.
	prefilling       bool
	svcStart, svcEnd time.Time
	svcTokens        int64
	prefillTokens    int64 // cumulative uncached prompt tokens prefilled
	prefillBusy      time.Duration
	promptTokens     int64 // cumulative prompt tokens looked up in the cache
	cachedTokens     int64 // cumulative prompt tokens found there
	decoding         int   // running requests past their prefill
}

func newCore(cfg Config) core {
	return core{cfg: cfg, cache: newPrefixCache(cfg.BlockSize, cfg.CacheBlocks, cfg.HashSeed)}
}

// prepare checks req and returns the output length it runs with and its block chain (nil on a
// decode engine, which looks nothing up).
func (c *core) prepare(req Request) (maxTokens int, hashes []uint64, err error) {
	if len(req.TokenIDs) == 0 {
		return 0, nil, ErrEmptyPrompt
	}
	maxTokens = req.MaxTokens
	switch {
	case maxTokens < 0 || maxTokens > MaxOutputTokens:
		return 0, nil, fmt.Errorf("engine: max tokens %d: want 0..%d", maxTokens, MaxOutputTokens)
	case maxTokens == 0:
		maxTokens = c.cfg.DefaultMaxTokens
	}
	if c.cfg.Role == RolePrefill {
		maxTokens = 1
	}
	if c.cfg.Role != RoleDecode {
		hashes = c.cache.chain(req.TokenIDs, req.LoRAName, req.CacheSalt)
	}
	return maxTokens, hashes, nil
}

// admitsAt reports whether a request arriving now starts at once: a slot is free, the prefill
// server is idle and nobody waits.
func (c *core) admitsAt(queued int) bool { return queued == 0 && c.canStart() }

// canStart reports whether the head of the queue may start: a slot is free and the prefill
// server idle (a decode engine needs only the slot).
func (c *core) canStart() bool { return c.running < c.cfg.MaxRunning && !c.prefilling }

// enqueue accounts a request that waits for a slot and returns its uncached-token estimate.
func (c *core) enqueue(prompt int, hashes []uint64) int64 {
	var est int64
	if hashes != nil {
		est = int64(prompt - c.cache.matched(hashes)*c.cfg.BlockSize)
	}
	c.waitingUncached += est
	return est
}

// dequeue removes a waiting request's estimate (it was admitted or gave up).
func (c *core) dequeue(estimate int64) { c.waitingUncached -= estimate }

// admit takes a slot for a prompt of prompt tokens and returns the KV tokens it now holds.
func (c *core) admit(prompt int) int64 {
	c.running++
	c.kvUsed += int64(prompt)
	return int64(prompt)
}

// release frees a slot holding kv tokens.
func (c *core) release(kv int64) {
	c.running--
	c.kvUsed -= kv
}

// beginPrefill matches the prompt against the cache, marks the hit as used, puts the prefill
// server to work on the uncached rest from now and returns the cached tokens and the prefill's
// duration. A decode engine looks nothing up and does not use the server.
func (c *core) beginPrefill(now time.Time, prompt int, hashes []uint64) (cached int, prefill time.Duration) {
	if hashes == nil {
		return 0, 0
	}
	n := c.cache.matched(hashes)
	c.cache.touch(hashes[:n])
	cached = n * c.cfg.BlockSize
	c.promptTokens += int64(prompt)
	c.cachedTokens += int64(cached)
	prefill = c.prefillTime(prompt - cached)
	c.prefilling, c.svcStart, c.svcEnd, c.svcTokens = true, now, now.Add(prefill), int64(prompt-cached)
	return cached, prefill
}

// abortPrefill frees the prefill server of a request cancelled during its prefill.
func (c *core) abortPrefill() { c.prefilling = false }

// prefillTime is the prefill of uncached tokens.
func (c *core) prefillTime(uncached int) time.Duration {
	return c.scale(float64(uncached) / c.cfg.PrefillTokensPerSec * float64(time.Second))
}

// tpot is the time per output token after the first.
func (c *core) tpot() time.Duration {
	return c.scale(c.cfg.DecodeMsPerToken * float64(time.Millisecond))
}

func (c *core) scale(d float64) time.Duration { return time.Duration(d / c.cfg.Speed) }

// endPrefill frees the prefill server, stores the prompt's full blocks, accounts the prefill
// work and hands the cache's events to the sink.
func (c *core) endPrefill(prompt []uint32, hashes []uint64, lora, salt string, uncached int, busy time.Duration) {
	if hashes == nil {
		return
	}
	c.prefilling = false
	c.prefillTokens += int64(uncached)
	c.prefillBusy += busy
	if evs := c.cache.store(hashes, prompt, lora, salt); len(evs) > 0 && c.cfg.Sink != nil {
		c.cfg.Sink(evs)
	}
}

// reset drops the whole cache and emits AllBlocksCleared.
func (c *core) reset() {
	c.cache.clear()
	if c.cfg.Sink != nil {
		c.cfg.Sink([]Event{{Kind: AllBlocksCleared}})
	}
}

// pendingPrefill is the prefill work not done at now: the queued requests' uncached estimates
// and what the prefill server has left of the request it serves.
func (c *core) pendingPrefill(now time.Time) int64 {
	pending := c.waitingUncached
	if c.prefilling && c.svcTokens > 0 {
		left := c.svcTokens
		if total := c.svcEnd.Sub(c.svcStart); total > 0 && now.After(c.svcStart) {
			left = int64(float64(c.svcTokens) * float64(max(c.svcEnd.Sub(now), 0)) / float64(total))
		}
		pending += left
	}
	return pending
}

// load is the load at now with waiting requests queued and generated tokens not yet in kvUsed.
func (c *core) load(now time.Time, waiting int, generated int64) Load {
	kv := c.kvUsed + generated
	pending := c.pendingPrefill(now)
	return Load{
		Running: int64(c.running), Waiting: int64(waiting),
		KVUsedTokens: kv, KVCapacityTokens: int64(c.cfg.CacheBlocks * c.cfg.BlockSize),
		WaitingUncachedTokens: pending, TotalTokens: kv + pending,
		MaxRunning:                 int64(c.cfg.MaxRunning),
		PrefillUncachedTokensTotal: c.prefillTokens, PrefillBusyMicrosTotal: c.prefillBusy.Microseconds(),
		CachedBlocks:      int64(c.cache.len()),
		PromptTokensTotal: c.promptTokens, CachedTokensTotal: c.cachedTokens,
		Decoding: int64(c.decoding),
	}
}

// cachedPrefix is how many leading tokens of a request's chain are cached, without touching.
func (c *core) cachedPrefix(hashes []uint64) int { return c.cache.matched(hashes) * c.cfg.BlockSize }
