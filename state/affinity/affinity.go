// Package affinity holds scoped engine bindings for session-aware and sticky routing: which
// engine a (model, bucket, stage, key) was last placed on. Bindings expire after an idle time,
// are dropped when their engine leaves, and are updated atomically so concurrent first requests
// converge on one engine. Policies decide when to reuse or replace a binding; the store only
// keeps them.
package affinity

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Scope identifies one binding. Its encoding is length-prefixed, so no two distinct tuples map
// to the same binding whatever bytes the strings contain.
type Scope struct {
	Model  string
	Bucket string
	// Stage is the role of the group (plain, prefill, decode) as a small integer.
	Stage uint8
	Key   string
}

// appendKey encodes s into buf: uvarint lengths before each string, the stage as one byte.
func (s Scope) appendKey(buf []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s.Model)))
	buf = append(buf, s.Model...)
	buf = binary.AppendUvarint(buf, uint64(len(s.Bucket)))
	buf = append(buf, s.Bucket...)
	buf = append(buf, s.Stage)
	return append(buf, s.Key...)
}

// Config holds the store's settings.
type Config struct {
	// SweepInterval is how often Run drops idle bindings. Default 60s.
	SweepInterval time.Duration
	// MaxBindings bounds the store; a Bind beyond it evicts nothing and fails with ErrFull.
	// Default 10,000,000.
	MaxBindings int
}

// Validate applies defaults and checks ranges.
func (c *Config) Validate() error {
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.MaxBindings == 0 {
		c.MaxBindings = 10_000_000
	}
	if c.SweepInterval < 0 || c.MaxBindings < 0 {
		return fmt.Errorf("affinity: sweep interval %v and max bindings %d must be positive", c.SweepInterval, c.MaxBindings)
	}
	return nil
}

// ErrFull is returned by Bind when the store holds MaxBindings bindings.
var ErrFull = errors.New("affinity store full")

const shardCount = 64

type entry struct {
	engine   string
	idle     time.Duration
	lastUsed atomic.Int64 // unix nanos
}

type shard struct {
	mu sync.RWMutex
	m  map[string]*entry
}

// Store is safe for concurrent use; reads take a shard read lock and allocate nothing.
type Store struct {
	cfg     Config
	now     func() time.Time
	seed    maphash.Seed
	shards  [shardCount]shard
	count   atomic.Int64
	expired atomic.Uint64
}

// New returns an empty store. now is the clock (nil = time.Now).
func New(cfg Config, now func() time.Time) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	s := &Store{cfg: cfg, now: now, seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
	return s, nil
}

func (s *Store) shardFor(key []byte) *shard {
	return &s.shards[maphash.Bytes(s.seed, key)%shardCount]
}

// Get returns the engine bound to scope and refreshes its idle timer. An idle-expired binding
// not yet swept reads as absent.
func (s *Store) Get(scope Scope) (string, bool) {
	var buf [128]byte
	key := scope.appendKey(buf[:0])
	sh := s.shardFor(key)
	sh.mu.RLock()
	e, ok := sh.m[string(key)]
	sh.mu.RUnlock()
	if !ok {
		return "", false
	}
	now := s.now().UnixNano()
	if now-e.lastUsed.Load() > int64(e.idle) {
		return "", false
	}
	e.lastUsed.Store(now)
	return e.engine, true
}

// Bind sets scope's binding to engine if the current binding is expect ("" = no live binding)
// and reports the binding now in force. When another writer won the race, it returns that
// writer's engine and false: the caller checks that engine before using it, or retries with it
// as expect. idle is the binding's idle expiry.
func (s *Store) Bind(scope Scope, expect, engine string, idle time.Duration) (string, bool, error) {
	var buf [128]byte
	key := scope.appendKey(buf[:0])
	sh := s.shardFor(key)
	now := s.now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[string(key)]
	current := ""
	if ok && now-e.lastUsed.Load() <= int64(e.idle) {
		current = e.engine
	}
	if current != expect {
		if ok {
			e.lastUsed.Store(now)
		}
		return current, false, nil
	}
	if !ok {
		if s.count.Load() >= int64(s.cfg.MaxBindings) {
			return "", false, ErrFull
		}
		s.count.Add(1)
	}
	ne := &entry{engine: engine, idle: idle}
	ne.lastUsed.Store(now)
	sh.m[string(key)] = ne
	return engine, true, nil
}

// InvalidateEngine drops every binding to engine (it left the registry) and returns how many.
func (s *Store) InvalidateEngine(engine string) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.engine == engine {
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	s.count.Add(int64(-n))
	return n
}

// Len is the number of bindings held, including idle ones not yet swept.
func (s *Store) Len() int { return int(s.count.Load()) }

// Expired counts bindings dropped by the sweeper for idleness.
func (s *Store) Expired() uint64 { return s.expired.Load() }

// Sweep drops bindings idle longer than their expiry and returns how many it dropped.
func (s *Store) Sweep() int {
	now := s.now().UnixNano()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if now-e.lastUsed.Load() > int64(e.idle) {
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	s.count.Add(int64(-n))
	s.expired.Add(uint64(n))
	return n
}

// Run sweeps every SweepInterval until ctx is done; it returns ctx.Err().
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			s.Sweep()
		}
	}
}
