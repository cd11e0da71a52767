//go:build amd64 && !purego

#include "textflag.h"

// Float16 constants of the e4m3 conversion (attn.decodeE4M3AVX2): magnitude
// bits 13..7 and the NaN fix-up, 16 words each.
DATA ·cst+0(SB)/8, $0x3f803f803f803f80
DATA ·cst+8(SB)/8, $0x3f803f803f803f80
DATA ·cst+16(SB)/8, $0x3f803f803f803f80
DATA ·cst+24(SB)/8, $0x3f803f803f803f80
DATA ·cst+32(SB)/8, $0x3e803e803e803e80
DATA ·cst+40(SB)/8, $0x3e803e803e803e80
DATA ·cst+48(SB)/8, $0x3e803e803e803e80
DATA ·cst+56(SB)/8, $0x3e803e803e803e80
GLOBL ·cst(SB), RODATA|NOPTR, $64

// One column of the AVX2 Q.K kernel for 5 keys: Q^T[c] (two ymm) times 5
// broadcast K scalars into 10 accumulators.
#define FMAS(u) \
	VMOVUPS (64*u)(AX), Y10; \
	VMOVUPS (64*u+32)(AX), Y11; \
	VBROADCASTSS (20*u)(SI), Y12; \
	VFMADD231PS Y12, Y10, Y0; \
	VFMADD231PS Y12, Y11, Y1; \
	VBROADCASTSS (20*u+4)(SI), Y12; \
	VFMADD231PS Y12, Y10, Y2; \
	VFMADD231PS Y12, Y11, Y3; \
	VBROADCASTSS (20*u+8)(SI), Y12; \
	VFMADD231PS Y12, Y10, Y4; \
	VFMADD231PS Y12, Y11, Y5; \
	VBROADCASTSS (20*u+12)(SI), Y12; \
	VFMADD231PS Y12, Y10, Y6; \
	VFMADD231PS Y12, Y11, Y7; \
	VBROADCASTSS (20*u+16)(SI), Y12; \
	VFMADD231PS Y12, Y10, Y8; \
	VFMADD231PS Y12, Y11, Y9

// 16 e4m3 bytes to float32 (times 2^-8, as decodeE4M3AVX2 before its
// final multiply).
#define CONV(u) \
	VPMOVSXBW (16*u)(R9), Y13; \
	VPSLLW $7, Y13, Y13; \
	VPAND Y15, Y13, Y13; \
	VPAND ·cst+0(SB), Y13, Y14; \
	VPCMPEQW ·cst+0(SB), Y14, Y14; \
	VPAND ·cst+32(SB), Y14, Y14; \
	VPADDW Y14, Y13, Y13; \
	VEXTRACTI128 $1, Y13, X14; \
	VCVTPH2PS X13, Y13; \
	VCVTPH2PS X14, Y14; \
	VMOVUPS Y13, (64*u)(R10); \
	VMOVUPS Y14, (64*u+32)(R10)

// Pointers wrap inside q (4 KiB), k (1 KiB), src (2 KiB) and dst (8 KiB),
// all 4 KiB-aligned by the caller, so every access hits L1.
#define PROLOGUE \
	MOVQ q+0(FP), AX; \
	MOVQ k+8(FP), SI; \
	MOVQ src+16(FP), R9; \
	MOVQ dst+24(FP), R10; \
	MOVQ n+32(FP), CX; \
	MOVL $0xbfffbfff, DX; \
	VMOVD DX, X15; \
	VPBROADCASTD X15, Y15

#define ADVANCE \
	ADDQ $256, AX; \
	ANDQ $4095, AX; \
	ORQ q+0(FP), AX; \
	ADDQ $80, SI; \
	ANDQ $1023, SI; \
	ORQ k+8(FP), SI; \
	ADDQ $64, R9; \
	ANDQ $2047, R9; \
	ORQ src+16(FP), R9; \
	ADDQ $256, R10; \
	ANDQ $8191, R10; \
	ORQ dst+24(FP), R10

// func fmaLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·fmaLoop(SB), NOSPLIT, $0-40
	PROLOGUE
fl:
	FMAS(0); FMAS(1); FMAS(2); FMAS(3)
	ADVANCE
	DECQ CX
	JNZ fl
	VZEROUPPER
	RET

// func convLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·convLoop(SB), NOSPLIT, $0-40
	PROLOGUE
cl:
	CONV(0); CONV(1); CONV(2); CONV(3)
	ADVANCE
	DECQ CX
	JNZ cl
	VZEROUPPER
	RET

// func bothLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·bothLoop(SB), NOSPLIT, $0-40
	PROLOGUE
bl:
	FMAS(0); CONV(0); FMAS(1); CONV(1); FMAS(2); CONV(2); FMAS(3); CONV(3)
	ADVANCE
	DECQ CX
	JNZ bl
	VZEROUPPER
	RET
