package engine

import (
	"fmt"
	"time"
)

// core is the engine model's state and rules: admission to the running slots, the prefix-cache
// match at the start of prefill, the prefill and decode durations, the blocks stored at the end
// of prefill and the load accounting. The live Engine runs it under its lock with goroutines and
// a Clock; Sim runs it single-threaded from events in virtual time. Both call the same methods,
// so the two forms of the model cannot drift.
type core struct {
	cfg             Config
	cache           *prefixCache
	running         int
	kvUsed          int64 // prompt (+ generated, live engine) tokens of running requests
	waitingUncached int64
	prefillTokens   int64 // cumulative uncached prompt tokens prefilled
	prefillBusy     time.Duration
	promptTokens    int64 // cumulative prompt tokens looked up in the cache
	cachedTokens    int64 // cumulative prompt tokens found there
	decoding        int   // running requests past their prefill
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

// admitsAt reports whether a request arriving now runs at once: a slot is free and nobody waits.
func (c *core) admitsAt(queued int) bool { return c.running < c.cfg.MaxRunning && queued == 0 }

// hasSlot reports whether the head of the queue may take a slot.
func (c *core) hasSlot() bool { return c.running < c.cfg.MaxRunning }

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

// beginPrefill matches the prompt against the cache, marks the hit as used and returns the
// cached tokens.
func (c *core) beginPrefill(prompt int, hashes []uint64) int {
	if hashes == nil {
		return 0
	}
	n := c.cache.matched(hashes)
	c.cache.touch(hashes[:n])
	c.promptTokens += int64(prompt)
	c.cachedTokens += int64(n * c.cfg.BlockSize)
	return n * c.cfg.BlockSize
}

// prefillTime is the prefill of uncached tokens (none on a decode engine).
func (c *core) prefillTime(uncached int) time.Duration {
	if c.cfg.Role == RoleDecode {
		return 0
	}
	return c.scale(float64(uncached) / c.cfg.PrefillTokensPerSec * float64(time.Second))
}

// tpot is the time per output token after the first.
func (c *core) tpot() time.Duration {
	return c.scale(c.cfg.DecodeMsPerToken * float64(time.Millisecond))
}

func (c *core) scale(d float64) time.Duration { return time.Duration(d / c.cfg.Speed) }

// endPrefill stores the prompt's full blocks, accounts the prefill work and hands the cache's
// events to the sink.
func (c *core) endPrefill(prompt []uint32, hashes []uint64, lora, salt string, uncached int, busy time.Duration) {
	if hashes == nil {
		return
	}
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

// load is the load with waiting requests queued and generated tokens not yet in kvUsed.
func (c *core) load(waiting int, generated int64) Load {
	kv := c.kvUsed + generated
	return Load{
		Running: int64(c.running), Waiting: int64(waiting),
		KVUsedTokens: kv, KVCapacityTokens: int64(c.cfg.CacheBlocks * c.cfg.BlockSize),
		WaitingUncachedTokens: c.waitingUncached, TotalTokens: kv + c.waitingUncached,
		MaxRunning:                 int64(c.cfg.MaxRunning),
		PrefillUncachedTokensTotal: c.prefillTokens, PrefillBusyMicrosTotal: c.prefillBusy.Microseconds(),
		CachedBlocks:      int64(c.cache.len()),
		PromptTokensTotal: c.promptTokens, CachedTokensTotal: c.cachedTokens,
		Decoding: int64(c.decoding),
	}
}

// cachedPrefix is how many leading tokens of a request's chain are cached, without touching.
func (c *core) cachedPrefix(hashes []uint64) int { return c.cache.matched(hashes) * c.cfg.BlockSize }
