#include "textflag.h"

// func hashBlocks16Asm(dst *uint64, n int, prev uint64, tokens *uint32) uint64
//
// hashBlocks16Go block by block (hash.go), where pair(t, 2i) is the
// little-endian word at byte 8i of the block and mum(x, y) is the xor of
// the two halves of the 128-bit product. MULXQ src, lo, hi multiplies DX
// by src.
//
// Software-pipelined: an iteration chains block i's content hash (R15)
// while it computes block i+1's, so the serial chain's multiply does not
// wait behind the content hash's three dependent ones.
//
// Registers: SI the next block's tokens, CX the end of the tokens, DI dst,
// BX prev, R8–R11 the constants k0–k3, R13 lane a, R12 lane b, R15 the
// pending content hash, AX and DX scratch.

// CONTENT puts the content hash of the 16 tokens at SI in R15:
//   a = mum(pair(t, 0)^k1, pair(t, 2)^(k0^16)); b = mum(pair(t, 4)^k2, pair(t, 6)^k1)
//   a = mum(pair(t, 8)^k1, pair(t, 10)^a);      b = mum(pair(t, 12)^k2, pair(t, 14)^b)
//   content = mum(a^k3, b^k0)
#define CONTENT \
	MOVQ 0(SI), DX \
	XORQ R9, DX \
	MOVQ 8(SI), R13 \
	XORQ R8, R13 \
	XORQ $16, R13 \
	MULXQ R13, AX, R13 \
	XORQ AX, R13 \
	MOVQ 16(SI), DX \
	XORQ R10, DX \
	MOVQ 24(SI), R12 \
	XORQ R9, R12 \
	MULXQ R12, AX, R12 \
	XORQ AX, R12 \
	MOVQ 32(SI), DX \
	XORQ R9, DX \
	XORQ 40(SI), R13 \
	MULXQ R13, AX, R13 \
	XORQ AX, R13 \
	MOVQ 48(SI), DX \
	XORQ R10, DX \
	XORQ 56(SI), R12 \
	MULXQ R12, AX, R12 \
	XORQ AX, R12 \
	MOVQ R13, DX \
	XORQ R11, DX \
	XORQ R8, R12 \
	MULXQ R12, AX, R15 \
	XORQ AX, R15

// CHAIN sets prev = chain(prev, content) = mum(prev^k2, content^k3) and
// stores it at DI.
#define CHAIN \
	MOVQ BX, DX \
	XORQ R10, DX \
	XORQ R11, R15 \
	MULXQ R15, AX, BX \
	XORQ AX, BX \
	MOVQ BX, 0(DI)

TEXT ·hashBlocks16Asm(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ prev+16(FP), BX
	MOVQ tokens+24(FP), SI
	SHLQ $6, CX
	ADDQ SI, CX
	MOVQ $0xa0761d6478bd642f, R8
	MOVQ $0xe7037ed1a0b428db, R9
	MOVQ $0x8ebc6af09c88c6e3, R10
	MOVQ $0x589965cc75374cc3, R11

	CONTENT
	ADDQ $64, SI
	CMPQ SI, CX
	JAE last

loop:
	CHAIN
	ADDQ $8, DI
	CONTENT
	ADDQ $64, SI
	CMPQ SI, CX
	JB loop

last:
	CHAIN
	MOVQ BX, ret+32(FP)
	RET
