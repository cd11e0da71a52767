//go:build amd64 && !purego

#include "textflag.h"

// AMX instructions are unknown to the Go assembler: they are emitted as
// BYTE directives (VEX encodings checked against GNU as), the instruction
// in a comment. Only registers 0-7 appear in their operands (no REX bits):
// tmm0 C, tmm1 A, tmm2 B; A rows at [SI+BX], B rows at [DX+CX], C rows at
// [DI+AX].

#define LDTILECFG_AX     BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00
#define TILERELEASE      BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0
#define TILEZERO_T0      BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0
#define TILELOADD_T0_C   BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x04; BYTE $0x07
#define TILESTORED_C_T0  BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x07
#define TILELOADD_T1_A   BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x1e
#define TILELOADD_T2_B   BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x14; BYTE $0x0a
#define TDPBF16PS_T0_T1_T2 BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xc1

// func amxMatmul(cfg *amxConfig, a unsafe.Pointer, lda uintptr, b unsafe.Pointer, ldb uintptr, c unsafe.Pointer, ldc uintptr, nt, kt, load int)
//
// For each of nt column tiles n (16 float32 columns, 64 bytes, of C and of
// B's rows): C tile = (load != 0 ? C tile : 0) + sum over kt steps k of
// A[:, 16k:16k+16 pairs] . B[16k:16k+16 pair rows, tile n], one TDPBF16PS
// per step. A and C have the rows of cfg's tiles 0, 1 and 3-5; B tiles
// are 16 rows of bf16 pairs, ldb bytes apart; A advances 64 bytes per
// step, B 16*ldb. Column tiles go four at a time (C in tmm0, tmm3-5,
// each step's A loaded once for the four, B alternating between tmm2 and
// tmm6 so that a load does not wait for the previous product), then one
// at a time (C in tmm0).
TEXT ·amxMatmul(SB), NOSPLIT, $0-80
	MOVQ cfg+0(FP), AX
	LDTILECFG_AX                    // LDTILECFG (AX)
	MOVQ a+8(FP), R9
	MOVQ lda+16(FP), BX
	MOVQ b+24(FP), R10
	MOVQ ldb+32(FP), CX
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), AX
	MOVQ nt+56(FP), R11
	MOVQ kt+64(FP), R12
	MOVQ load+72(FP), R13
	MOVQ CX, R14
	SHLQ $4, R14                    // 16 pair rows of B per step
quad:
	CMPQ R11, $4
	JLT  tiles
	TESTQ R13, R13
	JZ   quadzero
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x07; BYTE $0x00; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm0, 0(DI)(AX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x07; BYTE $0x40; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm3, 64(DI)(AX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0xa4; BYTE $0x07; BYTE $0x80; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm4, 128(DI)(AX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0xac; BYTE $0x07; BYTE $0xc0; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm5, 192(DI)(AX*1)
	JMP  quadsteps
quadzero:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0 // TILEZERO tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8 // TILEZERO tmm3
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe0 // TILEZERO tmm4
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe8 // TILEZERO tmm5
quadsteps:
	MOVQ R9, SI
	MOVQ R10, DX
	MOVQ R12, R15
	TESTQ R15, R15
	JZ   quadstore
quadstep:
	TILELOADD_T1_A                  // TILELOADD tmm1, (SI)(BX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x0a; BYTE $0x00; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm2, 0(DX)(CX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xc1 // TDPBF16PS tmm0 += tmm1 . tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0xb4; BYTE $0x0a; BYTE $0x40; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm6, 64(DX)(CX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xd9 // TDPBF16PS tmm3 += tmm1 . tmm6
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x0a; BYTE $0x80; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm2, 128(DX)(CX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xe1 // TDPBF16PS tmm4 += tmm1 . tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0xb4; BYTE $0x0a; BYTE $0xc0; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILELOADD tmm6, 192(DX)(CX*1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xe9 // TDPBF16PS tmm5 += tmm1 . tmm6
	ADDQ $64, SI
	ADDQ R14, DX
	DECQ R15
	JNZ  quadstep
quadstore:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x84; BYTE $0x07; BYTE $0x00; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILESTORED 0(DI)(AX*1), tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x9c; BYTE $0x07; BYTE $0x40; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILESTORED 64(DI)(AX*1), tmm3
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0xa4; BYTE $0x07; BYTE $0x80; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILESTORED 128(DI)(AX*1), tmm4
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0xac; BYTE $0x07; BYTE $0xc0; BYTE $0x00; BYTE $0x00; BYTE $0x00 // TILESTORED 192(DI)(AX*1), tmm5
	ADDQ $256, DI
	ADDQ $256, R10
	SUBQ $4, R11
	JMP  quad
tiles:
	TESTQ R11, R11
	JZ   done
	TESTQ R13, R13
	JZ   zero
	TILELOADD_T0_C                  // TILELOADD tmm0, (DI)(AX*1)
	JMP  steps
zero:
	TILEZERO_T0                     // TILEZERO tmm0
steps:
	MOVQ R9, SI
	MOVQ R10, DX
	MOVQ R12, R15
	TESTQ R15, R15
	JZ   store
step:
	TILELOADD_T1_A                  // TILELOADD tmm1, (SI)(BX*1)
	TILELOADD_T2_B                  // TILELOADD tmm2, (DX)(CX*1)
	TDPBF16PS_T0_T1_T2              // TDPBF16PS tmm0 += tmm1 . tmm2
	ADDQ $64, SI
	ADDQ R14, DX
	DECQ R15
	JNZ  step
store:
	TILESTORED_C_T0                 // TILESTORED (DI)(AX*1), tmm0
	ADDQ $64, DI
	ADDQ $64, R10
	DECQ R11
	JMP  tiles
done:
	TILERELEASE
	RET

// func amxPeak(cfg *amxConfig, iters int)
//
// The calibration loop of the amxbf16 tier: 4 TDPBF16PS per iteration into
// 4 accumulator tiles (tmm0-3) from 4 operand tiles (tmm4-7) of 16 rows x
// 64 bytes, registers only (the tiles start zeroed).
TEXT ·amxPeak(SB), NOSPLIT, $0-16
	MOVQ cfg+0(FP), AX
	LDTILECFG_AX
	MOVQ iters+8(FP), CX
	// TILEZERO tmm0..tmm7
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc8
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe8
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xf0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xf8
	TESTQ CX, CX
	JZ   peakdone
peakloop:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x5a; BYTE $0x5c; BYTE $0xc5 // TDPBF16PS tmm0, tmm5, tmm4
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xcd // TDPBF16PS tmm1, tmm5, tmm7
	BYTE $0xc4; BYTE $0xe2; BYTE $0x5a; BYTE $0x5c; BYTE $0xd6 // TDPBF16PS tmm2, tmm6, tmm4
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xde // TDPBF16PS tmm3, tmm6, tmm7
	DECQ CX
	JNZ  peakloop
peakdone:
	TILERELEASE
	RET

// func amxScaleRows(o *float32, ldo uintptr, alpha *float32, rows, d int)
//
// o[r][c] = alpha[r] * o[r][c] for rows rows of d floats (a multiple of
// 16), ldo bytes apart: the rescale the P.V kernels of the other tiers
// apply as they load O (the same VMULPS).
TEXT ·amxScaleRows(SB), NOSPLIT, $0-40
	MOVQ o+0(FP), DI
	MOVQ ldo+8(FP), R8
	MOVQ alpha+16(FP), SI
	MOVQ rows+24(FP), CX
	MOVQ d+32(FP), R9
	SHRQ $4, R9
	TESTQ CX, CX
	JZ   scaledone
	TESTQ R9, R9
	JZ   scaledone
scalerow:
	VBROADCASTSS (SI), Z1
	MOVQ DI, DX
	MOVQ R9, R10
scalevec:
	VMULPS (DX), Z1, Z0
	VMOVUPS Z0, (DX)
	ADDQ $64, DX
	DECQ R10
	JNZ  scalevec
	ADDQ R8, DI
	ADDQ $4, SI
	DECQ CX
	JNZ  scalerow
scaledone:
	VZEROUPPER
	RET
