package kvindex

import (
	"hash/fnv"
	"math/bits"
)

// The block hash is sluice's own: a wyhash-style multiply-fold over the
// block's token ids, chained through the parent block's hash. It uses fixed
// constants only, so a hash computed in one process (or written to a
// snapshot) means the same block in every other. It is not a cryptographic
// hash: an adversary who can choose prompts could craft collisions, which
// would at worst mislead cache-aware routing, never change what an engine
// computes.
const (
	k0 uint64 = 0xa0761d6478bd642f
	k1 uint64 = 0xe7037ed1a0b428db
	k2 uint64 = 0x8ebc6af09c88c6e3
	k3 uint64 = 0x589965cc75374cc3
)

func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func pair(t []uint32, i int) uint64 { return uint64(t[i]) | uint64(t[i+1])<<32 }

// contentHash hashes one block's token ids, independently of its position,
// in two lanes of 8 tokens so consecutive blocks hash in parallel.
func contentHash(t []uint32) uint64 {
	a, b := k0^uint64(len(t)), k1
	for len(t) >= 8 {
		a = mum(pair(t, 0)^k1, pair(t, 2)^a)
		b = mum(pair(t, 4)^k2, pair(t, 6)^b)
		t = t[8:]
	}
	if len(t) > 0 {
		var w [8]uint32
		copy(w[:], t)
		a = mum(pair(w[:], 0)^k1, pair(w[:], 2)^a)
		b = mum(pair(w[:], 4)^k2, pair(w[:], 6)^b)
	}
	return mum(a^k3, b^k0)
}

// chain combines the hash of the previous block (or the tree seed) with a
// block's content hash.
func chain(prev, content uint64) uint64 { return mum(prev^k2, content^k3) }

// withExtra folds a block's opaque extra key into its content hash, so a
// multimodal block never matches a text-only query.
func withExtra(content uint64, extra string) uint64 {
	if extra == "" {
		return content
	}
	h := fnv.New64a()
	h.Write([]byte(extra))
	return mum(content^k1, h.Sum64()^k0)
}

// treeSeed derives the root of one (namespace, block size) tree.
func treeSeed(ns Namespace, blockSize int) uint64 {
	h := fnv.New64a()
	var n [4]byte
	for _, s := range [...]string{ns.Model, ns.LoRA, ns.CacheSalt} {
		l := uint32(len(s))
		n[0], n[1], n[2], n[3] = byte(l), byte(l>>8), byte(l>>16), byte(l>>24)
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return mum(h.Sum64()^k0, uint64(blockSize)^k1)
}

// holderBit is a holder's contribution to a node's holder-set fingerprint.
func holderBit(h uint16) uint64 { return mum(uint64(h)^k3, k2) | 1 }

// mix64 is a full-avalanche finaliser (splitmix64) for digests and
// engine-hash table homes.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// prefetchTokens prefetches the token ids of blocks [b0, b1), as far as
// tokens has them.
func prefetchTokens(tokens []uint32, b0, b1, bs int) {
	lo, hi := b0*bs, min(b1*bs, len(tokens))
	if lo >= hi {
		return
	}
	prefetchLines(&tokens[lo], ((hi-lo)*4+63)/64)
}

// hashBlocks stores in dst the chained hashes of the len(dst) blocks of
// size bs in tokens, starting from prev, and returns the last (prev when
// there are none). It equals chaining contentHash block by block, with the
// common 16-token block unrolled. Lookups hash the query without
// prefetching it: the query was decoded just before and is in cache, where
// a prefetch only costs (BENCHMARKS.md, "KV prefix index").
func hashBlocks(dst []uint64, prev uint64, tokens []uint32, bs int) uint64 {
	tokens = tokens[:len(dst)*bs]
	if bs != 16 {
		for i := range dst {
			prev = chain(prev, contentHash(tokens[i*bs:(i+1)*bs]))
			dst[i] = prev
		}
		return prev
	}
	return hashBlocks16(dst, prev, tokens)
}

// hashBlocks16Go is hashBlocks for 16-token blocks, unrolled: the
// reference for the assembly (hash_amd64.s) and the code elsewhere.
func hashBlocks16Go(dst []uint64, prev uint64, tokens []uint32) uint64 {
	tokens = tokens[:len(dst)*16]
	for i := range dst {
		t := tokens[i*16 : i*16+16 : i*16+16]
		a := mum(pair(t, 0)^k1, pair(t, 2)^(k0^16))
		b := mum(pair(t, 4)^k2, pair(t, 6)^k1)
		a = mum(pair(t, 8)^k1, pair(t, 10)^a)
		b = mum(pair(t, 12)^k2, pair(t, 14)^b)
		prev = chain(prev, mum(a^k3, b^k0))
		dst[i] = prev
	}
	return prev
}
