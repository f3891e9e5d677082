// Package engine is a simulated LLM inference engine without any transport: a bounded prefix
// cache of full KV blocks (LRU, chained block hashes, KV events through a Sink) and a latency
// model: a FIFO queue in front of a fixed number of running slots and one prefill server that
// prefills one request's uncached prompt tokens at a time at a fixed token rate, then a fixed
// time per output token for every running request; a speed factor (docs/architecture.md,
// "Simulated engine model"). The HTTP simengine
// wraps Engine; Sim (sim.go) is the same model in discrete-event form, which sluice simulate
// drives in virtual time. Both run one core (model.go), so they cannot drift.
//
// An Engine starts no goroutines of its own: each Submit starts one for its request, which ends
// when the request finishes or its context is cancelled; Wait waits for all of them.
package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the zero Config fields.
const (
	DefaultBlockSize           = 16
	DefaultCacheBlocks         = 8192
	DefaultMaxRunning          = 16
	DefaultPrefillTokensPerSec = 20000
	DefaultDecodeMsPerToken    = 20
	DefaultSpeed               = 1
	DefaultMaxTokens           = 16
	DefaultVocab               = 32000
	// MaxOutputTokens bounds Request.MaxTokens (the token channel is buffered to it).
	MaxOutputTokens = 1 << 16
)

// ErrEmptyPrompt is returned by Submit for a request without token ids.
var ErrEmptyPrompt = errors.New("engine: request has no prompt tokens")

// Config tunes the simulation. Zero fields take the Default* values.
type Config struct {
	// Role decides whether requests are prefilled, decoded or both.
	Role Role
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// CacheBlocks bounds the prefix cache, in blocks.
	CacheBlocks int
	// MaxRunning is how many requests run at once; the rest wait in FIFO order.
	MaxRunning int
	// PrefillTokensPerSec is the engine's prefill throughput for uncached prompt tokens: one
	// request prefills at a time (FCFS), at this rate.
	PrefillTokensPerSec float64
	// DecodeMsPerToken is the time per output token after the first.
	DecodeMsPerToken float64
	// Speed divides every simulated duration (100 runs a hundred times faster than the model).
	Speed float64
	// DefaultMaxTokens is used when a request's MaxTokens is 0.
	DefaultMaxTokens int
	// Vocab bounds generated token ids.
	Vocab uint32
	// HashSeed seeds the block hash chain, as engines seed theirs.
	HashSeed uint64
	// Clock is the time source; nil is the wall clock.
	Clock Clock
	// Sink receives KV-cache events; nil drops them.
	Sink Sink
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.BlockSize, DefaultBlockSize)
	def(&c.CacheBlocks, DefaultCacheBlocks)
	def(&c.MaxRunning, DefaultMaxRunning)
	def(&c.DefaultMaxTokens, DefaultMaxTokens)
	if c.PrefillTokensPerSec == 0 {
		c.PrefillTokensPerSec = DefaultPrefillTokensPerSec
	}
	if c.DecodeMsPerToken == 0 {
		c.DecodeMsPerToken = DefaultDecodeMsPerToken
	}
	if c.Speed == 0 {
		c.Speed = DefaultSpeed
	}
	if c.Vocab == 0 {
		c.Vocab = DefaultVocab
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	return c
}

// Validate reports every out-of-range field (after defaults apply).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Role < RolePlain || c.Role > RoleDecode {
		errs = append(errs, fmt.Errorf("role %d: use plain, prefill or decode", c.Role))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"block size", c.BlockSize}, {"cache blocks", c.CacheBlocks}, {"max running", c.MaxRunning}, {"default max tokens", c.DefaultMaxTokens}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must be positive", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"prefill tokens per second", c.PrefillTokensPerSec}, {"decode ms per token", c.DecodeMsPerToken}, {"speed", c.Speed}} {
		if !(f.v > 0) {
			errs = append(errs, fmt.Errorf("%s %v: must be positive", f.name, f.v))
		}
	}
	if c.DefaultMaxTokens > MaxOutputTokens {
		errs = append(errs, fmt.Errorf("default max tokens %d: at most %d", c.DefaultMaxTokens, MaxOutputTokens))
	}
	return errors.Join(errs...)
}

// Engine is one simulated engine (one DP rank). Its methods are safe for concurrent use.
type Engine struct {
	nextID atomic.Uint64
	runs   sync.WaitGroup

	mu    sync.Mutex
	core  // the model's state and rules (model.go), guarded by mu
	queue []*Run
	// serverFreeAt is the model time the prefill server last became idle and fullUntil the
	// model time a release last freed a slot of a full engine (guarded by mu): a queued request
	// starts at the later of these and its arrival, not at the instant a goroutine woke up to
	// notice (modelStart).
	serverFreeAt, fullUntil time.Time
}

// New returns an idle engine with an empty cache.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Engine{core: newCore(cfg)}, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Request is one generation request.
type Request struct {
	// TokenIDs is the prompt; it must not be empty. The engine does not modify it.
	TokenIDs []uint32
	// MaxTokens is the number of tokens to generate (the simulation never stops early); 0 uses
	// Config.DefaultMaxTokens. A prefill engine generates at most one.
	MaxTokens int
	// Stream is informational: the model behaves the same either way.
	Stream bool
	// LoRAName is the LoRA adapter the request runs with, "" for the base model, and CacheSalt
	// its cache salt (vLLM's and SGLang's cache_salt), "" for none. Both namespace its prefix
	// blocks: they hit only requests of the same adapter and salt.
	LoRAName, CacheSalt string
}

// Token is one generated token and when it was produced.
type Token struct {
	// Index counts from 0.
	Index int
	ID    uint32
	Time  time.Time
}

// Result summarises a finished run.
type Result struct {
	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
	// OutputIDs are the generated token ids in order.
	OutputIDs []uint32
	// QueueTime is the time spent waiting for a running slot and the prefill server,
	// PrefillTime the simulated prefill, Duration the whole run from Submit.
	QueueTime, PrefillTime, Duration time.Duration
	// FinishReason is "length" for a completed run.
	FinishReason string
}

// Run is one submitted request. Tokens streams its output; Result waits for the end.
type Run struct {
	// ID is unique per engine.
	ID uint64

	e         *Engine
	prompt    []uint32
	lora      string
	salt      string
	hashes    []uint64
	maxTokens int
	tokens    chan Token
	done      chan struct{}

	// Guarded by e.mu while queued.
	ready    chan struct{}
	granted  bool
	estimate int64 // uncached tokens estimated at Submit
	kv       int64 // tokens this run holds in e.kvUsed
	// arrival is when the run reached the engine. Set by admitLocked: started, the model time
	// the run took its slot and the prefill server; the cached prompt tokens and the prefill's
	// duration.
	arrival, started time.Time
	cached           int
	prefill          time.Duration

	res Result
	err error
}

// Tokens delivers each output token as it is produced and is closed when the run ends. It is
// buffered for the whole output, so a caller that only wants Result need not drain it.
func (r *Run) Tokens() <-chan Token { return r.tokens }

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Result waits for the run to end. The error is the context's error when the run was cancelled;
// the Result then holds what was done until then.
func (r *Run) Result() (Result, error) {
	<-r.done
	return r.res, r.err
}

// Submit queues req and starts its run, which ends when it completes or ctx is cancelled
// (cancellation frees its slot or its place in the queue at once).
func (e *Engine) Submit(ctx context.Context, req Request) (*Run, error) {
	maxTokens, hashes, err := e.prepare(req)
	if err != nil {
		return nil, err
	}
	r := &Run{
		ID: e.nextID.Add(1), e: e, prompt: req.TokenIDs, lora: req.LoRAName, salt: req.CacheSalt, maxTokens: maxTokens,
		hashes: hashes, tokens: make(chan Token, maxTokens), done: make(chan struct{}),
	}
	e.runs.Add(1)
	go func() {
		defer e.runs.Done()
		r.run(ctx)
	}()
	return r, nil
}

// Wait blocks until every submitted run has ended.
func (e *Engine) Wait() { e.runs.Wait() }

// The run keeps to the model's schedule (Sim's): its prefill ends at its start + the prefill
// time and output token i is due i time-per-tokens after the first, each waited for until that
// instant, so a goroutine that wakes late does not push everything after it back (a sleep per
// step would add every wake-up's delay, over a queue of prefills and over a whole decode).
func (r *Run) run(ctx context.Context) {
	e := r.e
	clk := e.cfg.Clock
	start := clk.Now()
	r.arrival = start
	r.res.PromptTokens = len(r.prompt)
	finishAt := start // the model's end of the run, for the slot's release
	defer func() {
		r.res.Duration = clk.Now().Sub(start)
		close(r.tokens)
		close(r.done)
	}()
	if err := e.acquire(ctx, r); err != nil {
		r.err = err
		return
	}
	defer func() { e.release(r, finishAt) }()
	r.res.QueueTime = r.started.Sub(start)

	cached, prefill := r.cached, r.prefill // set when the slot was granted
	uncached := len(r.prompt) - cached
	r.res.CachedTokens = cached
	r.res.PrefillTime = prefill
	first := r.started.Add(prefill)
	finishAt = clk.Now()
	if err := sleepUntil(ctx, clk, first); err != nil {
		e.mu.Lock()
		if r.hashes != nil {
			e.abortPrefill()
			e.serverFreeAt = laterOf(e.serverFreeAt, clk.Now())
		}
		e.startQueuedLocked()
		e.mu.Unlock()
		r.err = err
		finishAt = clk.Now()
		return
	}
	e.mu.Lock()
	e.endPrefill(r.prompt, r.hashes, r.lora, r.salt, uncached, prefill)
	if r.hashes != nil {
		e.serverFreeAt = laterOf(e.serverFreeAt, first)
	}
	e.decoding++
	e.startQueuedLocked()
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.decoding--
		e.mu.Unlock()
	}()

	tpot := e.tpot()
	seed := PromptHash(r.prompt)
	finishAt = first.Add(time.Duration(r.maxTokens-1) * tpot)
	for i := range r.maxTokens {
		if i > 0 {
			if err := sleepUntil(ctx, clk, first.Add(time.Duration(i)*tpot)); err != nil {
				r.err = err
				finishAt = clk.Now()
				return
			}
		}
		id := outputToken(seed, i, e.cfg.Vocab)
		e.mu.Lock()
		e.kvUsed++
		r.kv++
		e.mu.Unlock()
		r.res.OutputIDs = append(r.res.OutputIDs, id)
		r.res.CompletionTokens++
		r.tokens <- Token{Index: i, ID: id, Time: clk.Now()}
	}
	r.res.FinishReason = "length"
}

// acquire takes a running slot and the prefill server, waiting in FIFO order behind earlier
// requests.
func (e *Engine) acquire(ctx context.Context, r *Run) error {
	e.mu.Lock()
	if e.admitsAt(len(e.queue)) {
		e.admitLocked(r)
		e.mu.Unlock()
		return nil
	}
	r.estimate = e.enqueue(len(r.prompt), r.hashes)
	r.ready = make(chan struct{})
	e.queue = append(e.queue, r)
	e.mu.Unlock()

	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	if r.granted {
		// Granted as the context ended: the prefill it began is abandoned.
		now := e.cfg.Clock.Now()
		if r.hashes != nil {
			e.abortPrefill()
			e.serverFreeAt = laterOf(e.serverFreeAt, now)
		}
		e.mu.Unlock()
		e.release(r, now)
		return ctx.Err()
	}
	for i, q := range e.queue {
		if q == r {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			break
		}
	}
	e.dequeue(r.estimate)
	e.mu.Unlock()
	return ctx.Err()
}

// admitLocked gives r a slot and the prefill server now: its prefix match happens here, as
// Sim.start's does; its model start is modelStart.
func (e *Engine) admitLocked(r *Run) {
	r.granted = true
	r.started = e.modelStart(r)
	r.kv = e.admit(len(r.prompt))
	r.cached, r.prefill = e.beginPrefill(r.started, len(r.prompt), r.hashes)
}

// modelStart is when the model starts r, which may start now: at its arrival, or when what it
// waited for became free in model time — the prefill server (the end of the previous prefill)
// or, on a full engine, a slot (the end of a run) — never later than now.
func (e *Engine) modelStart(r *Run) time.Time {
	at := r.arrival
	if r.hashes != nil {
		at = laterOf(at, e.serverFreeAt)
	}
	at = laterOf(at, e.fullUntil)
	if now := e.cfg.Clock.Now(); at.After(now) {
		at = now
	}
	return at
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sleepUntil waits until the clock reads t (at once when it is past) or ctx ends.
func sleepUntil(ctx context.Context, clk Clock, t time.Time) error {
	if d := t.Sub(clk.Now()); d > 0 {
		return clk.Sleep(ctx, d)
	}
	return ctx.Err()
}

// startQueuedLocked starts queued runs while the head may start.
func (e *Engine) startQueuedLocked() {
	for e.canStart() && len(e.queue) > 0 {
		next := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.dequeue(next.estimate)
		e.admitLocked(next)
		close(next.ready)
	}
}

// release frees r's slot, which the model freed at at, and hands it to the head of the queue.
func (e *Engine) release(r *Run, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running >= e.cfg.MaxRunning {
		e.fullUntil = laterOf(e.fullUntil, at)
	}
	e.core.release(r.kv)
	r.kv = 0
	e.startQueuedLocked()
}

// Reset drops the whole prefix cache and emits AllBlocksCleared.
func (e *Engine) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reset()
}

// Load is a snapshot of the engine's load, in the terms of sluice's load reports.
type Load struct {
	Running, Waiting int64
	// KVUsedTokens are the prompt and generated tokens of running requests; KVCapacityTokens is
	// the cache size in tokens.
	KVUsedTokens, KVCapacityTokens int64
	// WaitingUncachedTokens estimates the prefill work not yet done: the queued requests'
	// prompt tokens not in the cache when they arrived, plus what the prefill server has left
	// of the request it serves; TotalTokens = KVUsedTokens + WaitingUncachedTokens.
	WaitingUncachedTokens, TotalTokens int64
	MaxRunning                         int64
	// PrefillUncachedTokensTotal and PrefillBusyMicrosTotal are cumulative since start.
	PrefillUncachedTokensTotal, PrefillBusyMicrosTotal int64
	// CachedBlocks is the number of blocks in the prefix cache.
	CachedBlocks int64
	// PromptTokensTotal counts the prompt tokens looked up in the prefix cache since start and
	// CachedTokensTotal those found there (vLLM's prefix-cache queries and hits). A decode
	// engine looks nothing up.
	PromptTokensTotal, CachedTokensTotal int64
	// Decoding is the number of running requests past their prefill, generating tokens.
	Decoding int64
}

// Load returns the current load.
func (e *Engine) Load() Load {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.load(e.cfg.Clock.Now(), len(e.queue), 0)
}

// CachedPrefix returns how many leading tokens of tokens (of a base-model request without a
// salt) are in the prefix cache (whole blocks), without touching the LRU order.
func (e *Engine) CachedPrefix(tokens []uint32) int { return e.CachedPrefixIn(tokens, "", "") }

// CachedPrefixIn is CachedPrefix for a request of LoRA adapter lora with cache salt salt.
func (e *Engine) CachedPrefixIn(tokens []uint32, lora, salt string) int {
	if e.cfg.Role == RoleDecode {
		return 0
	}
	h := e.cache.chain(tokens, lora, salt)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cachedPrefix(h)
}

// PromptHash is the FNV-1a hash of a prompt's token ids: the seed of the engine's generated
// text, and how a harness that sees both sides (tests/honesty) tells prompts apart.
func PromptHash(tokens []uint32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], t)
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// outputToken is a deterministic token id for output position i of a prompt.
func outputToken(seed uint64, i int, vocab uint32) uint32 {
	x := seed ^ uint64(i+1)*0x9E3779B97F4A7C15
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return uint32(x % uint64(vocab))
}
