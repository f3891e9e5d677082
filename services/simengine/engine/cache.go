package engine

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
)

// prefixCache is a bounded set of full KV blocks keyed by a chained hash of their token ids,
// evicted least-recently-used first. A chain is always touched deepest block first, so its root
// is the most recent and eviction takes leaves before the prefixes they extend.
// It is not safe for concurrent use: the engine's lock guards it.
type prefixCache struct {
	blockSize int
	capacity  int
	seed      uint64
	lru       *list.List // of uint64 hashes, front = most recently used
	blocks    map[uint64]*list.Element
}

func newPrefixCache(blockSize, capacity int, seed uint64) *prefixCache {
	return &prefixCache{blockSize: blockSize, capacity: capacity, seed: seed, lru: list.New(),
		blocks: make(map[uint64]*list.Element)}
}

// chain returns the hash of each full block of tokens: hash_i = H(hash_{i-1}, block_i) with
// hash_{-1} = seed, or H(seed, lora, salt) for a request of a LoRA adapter or with a cache
// salt, so such blocks form a namespace of their own as in vLLM and SGLang.
func (c *prefixCache) chain(tokens []uint32, lora, salt string) []uint64 {
	n := len(tokens) / c.blockSize
	out := make([]uint64, n)
	parent := c.seed
	if lora != "" || salt != "" {
		h := fnv.New64a()
		_ = binary.Write(h, binary.LittleEndian, c.seed)
		_, _ = h.Write([]byte("lora\x00" + lora + "\x00salt\x00" + salt))
		parent = h.Sum64()
	}
	buf := make([]byte, 8+4*c.blockSize)
	for i := range n {
		binary.LittleEndian.PutUint64(buf, parent)
		for j, t := range tokens[i*c.blockSize : (i+1)*c.blockSize] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], t)
		}
		parent = fnv64a(buf)
		out[i] = parent
	}
	return out
}

// fnv64a is FNV-1a 64 of b (hash/fnv's New64a), without an allocation per block.
func fnv64a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// matched counts the leading hashes present in the cache, without touching them.
func (c *prefixCache) matched(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// touch marks the present hashes as used, deepest first.
func (c *prefixCache) touch(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		if el, ok := c.blocks[hashes[i]]; ok {
			c.lru.MoveToFront(el)
		}
	}
}

// store inserts the blocks of tokens (whose chain is hashes) that are missing, evicting as
// needed, and returns the events describing the change: evictions first, then one
// BlockStored per run of consecutive new blocks, carrying the request's adapter and salt. A
// chain longer than the cache is stored up to the cache's capacity.
func (c *prefixCache) store(hashes []uint64, tokens []uint32, lora, salt string) []Event {
	return c.storeEvents(hashes, tokens, lora, salt, true)
}

// storeEvents is store; without events it changes the cache the same way and returns nil.
func (c *prefixCache) storeEvents(hashes []uint64, tokens []uint32, lora, salt string, events bool) []Event {
	n := min(len(hashes), c.capacity)
	hashes = hashes[:n]
	c.touch(hashes)
	var removed []uint64
	var stored []Event
	cur := -1 // index in stored of the run being extended
	for i, h := range hashes {
		if _, ok := c.blocks[h]; ok {
			cur = -1
			continue
		}
		if c.lru.Len() >= c.capacity {
			// The chain's blocks are all more recent than any other, so the tail is not one.
			tail := c.lru.Back()
			old := tail.Value.(uint64)
			c.lru.Remove(tail)
			delete(c.blocks, old)
			if events {
				removed = append(removed, old)
			}
		}
		c.blocks[h] = c.lru.PushFront(h)
		if !events {
			continue
		}
		if cur < 0 {
			// Sized for the rest of the chain: the run is usually all of it.
			ev := Event{Kind: BlockStored, BlockSize: c.blockSize, LoRAName: lora, CacheSalt: salt,
				BlockHashes: make([]uint64, 0, n-i), TokenIDs: make([]uint32, 0, (n-i)*c.blockSize)}
			if i > 0 {
				ev.ParentHash, ev.HasParent = hashes[i-1], true
			}
			stored = append(stored, ev)
			cur = len(stored) - 1
		}
		stored[cur].BlockHashes = append(stored[cur].BlockHashes, h)
		stored[cur].TokenIDs = append(stored[cur].TokenIDs, tokens[i*c.blockSize:(i+1)*c.blockSize]...)
	}
	c.touch(hashes)
	if !events {
		return nil
	}
	var out []Event
	if len(removed) > 0 {
		out = append(out, Event{Kind: BlockRemoved, BlockHashes: removed})
	}
	return append(out, stored...)
}

// clear drops every block.
func (c *prefixCache) clear() {
	c.lru.Init()
	clear(c.blocks)
}

func (c *prefixCache) len() int { return c.lru.Len() }

// Cache is the engine's prefix cache on its own: the same blocks, hashes and LRU an engine
// keeps, without timing. sluice simulate runs the whole request sequence through one to bound
// what any routing could hit (a pooled LRU of the fleet's blocks, an infinite cache). It is not
// safe for concurrent use.
type Cache struct {
	c *prefixCache
	// all holds every block ever stored when the cache is unbounded (no LRU to keep).
	all map[uint64]struct{}
}

// NewCache returns an empty cache of capacity blocks of blockSize tokens; capacity <= 0 is
// unbounded.
func NewCache(blockSize, capacity int, seed uint64) *Cache {
	if capacity <= 0 {
		return &Cache{c: newPrefixCache(blockSize, 0, seed), all: map[uint64]struct{}{}}
	}
	return &Cache{c: newPrefixCache(blockSize, capacity, seed)}
}

// Chain is the block hash chain of a base-model prompt without a salt, as an engine hashes it.
func (c *Cache) Chain(tokens []uint32) []uint64 { return c.c.chain(tokens, "", "") }

// Serve is one request's prefill of tokens as an engine does it: it counts the leading full
// blocks already cached (hit) out of the prompt's full blocks, then stores the prompt.
func (c *Cache) Serve(tokens []uint32) (hit, blocks int) {
	return c.ServeChain(c.Chain(tokens), tokens)
}

// ServeChain is Serve for a prompt whose chain (from any Cache of the same block size and
// seed) is known.
func (c *Cache) ServeChain(h []uint64, tokens []uint32) (hit, blocks int) {
	if c.all != nil {
		for hit < len(h) {
			if _, ok := c.all[h[hit]]; !ok {
				break
			}
			hit++
		}
		for _, x := range h[hit:] {
			c.all[x] = struct{}{}
		}
		return hit, len(h)
	}
	hit = c.c.matched(h)
	c.c.touch(h[:hit])
	c.c.storeEvents(h, tokens, "", "", false)
	return hit, len(h)
}
