package kvindex

import "golang.org/x/sys/cpu"

// hashBlocks16Asm is hashBlocks for 16-token blocks in assembly
// (hash_amd64.s): the same values as the Go loop, with one 64-bit load per
// pair of token ids and MULX, which takes its result registers freely and
// leaves the flags alone. The Go loop runs at 11–15 cycles a block on AMD
// EPYCs, bound by the count of instructions around its six multiplies (two
// 32-bit loads, a shift and an or per pair; the moves MULQ's fixed
// registers need), not by the multiplies: the assembly issues about 35 per
// block and runs at about 9 (BENCHMARKS.md, "The 16-token block hash in
// assembly"). Word loads through unsafe, in Go, gained a sixth.
//
// It writes n chained hashes to dst from the n×16 token ids at tokens,
// starting from prev, and returns the last. n must be at least 1.
//
//go:noescape
func hashBlocks16Asm(dst *uint64, n int, prev uint64, tokens *uint32) uint64

// hasHashAsm reports whether this CPU has MULX (BMI2, on every x86-64 CPU
// since 2013 and 2015: Haswell, Excavator).
var hasHashAsm = cpu.X86.HasBMI2

// hashBlocks16 is hashBlocks for 16-token blocks: the assembly where the
// CPU runs it, else the Go loop.
func hashBlocks16(dst []uint64, prev uint64, tokens []uint32) uint64 {
	if !hasHashAsm || len(dst) == 0 {
		return hashBlocks16Go(dst, prev, tokens)
	}
	_ = tokens[len(dst)*16-1] // the assembly reads these, and no further
	return hashBlocks16Asm(&dst[0], len(dst), prev, &tokens[0])
}
