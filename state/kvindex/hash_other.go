//go:build !amd64

package kvindex

// hasHashAsm: the assembly block hash is amd64's only (hash_amd64.go).
const hasHashAsm = false

func hashBlocks16(dst []uint64, prev uint64, tokens []uint32) uint64 {
	return hashBlocks16Go(dst, prev, tokens)
}
