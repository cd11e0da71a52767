//go:build amd64 && !purego

#include "textflag.h"

// Kernels of the AMX lane path (lanes_amx_amd64.go). AMX and AVX512_BF16
// instructions are unknown to the Go assembler: they are BYTE directives
// (encodings from GNU as 2.40), the instruction in a comment. AMX operands
// use registers 0-7 only: A rows at [SI+BX], B rows at [DX+CX], C rows at
// [DI+AX].

#define LDTILECFG_AX    BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00
#define TILERELEASE     BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0
#define TILEZERO_T0     BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0
#define TILEZERO_T3     BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8
#define TILEZERO_T4     BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe0
#define TILEZERO_T5     BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe8
#define TILELOADD_T1_A  BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x1e
#define TILELOADD_T6_A  BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x34; BYTE $0x1e
#define TILELOADD_T2_B  BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x14; BYTE $0x0a
#define TILELOADD_T7_B  BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x3c; BYTE $0x0a
#define TDP_T0_T1_T2    BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xc1
#define TDP_T3_T6_T2    BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xde
#define TDP_T4_T1_T2    BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xe1
#define TDP_T5_T6_T2    BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5c; BYTE $0xee
#define TDP_T0_T1_T7    BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xc1
#define TDP_T3_T6_T7    BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xde
#define TDP_T4_T1_T7    BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xe1
#define TDP_T5_T6_T7    BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xee
#define TILESTORED_T0_C BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x07
#define TILESTORED_T3_C BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x1c; BYTE $0x07
#define TILESTORED_T4_C BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x24; BYTE $0x07
#define TILESTORED_T5_C BYTE $0xc4; BYTE $0xe2; BYTE $0x7a; BYTE $0x4b; BYTE $0x2c; BYTE $0x07

// The conversion kernels that feed an AMX kernel keep the AMX unit awake
// (BenchmarkAMXWake: after a few hundred nanoseconds without AMX work the
// next AMX kernel pays about 300 ns): AWAKE_BEGIN loads the tile
// configuration (cfg in AX) and zeroes tmm0-2, AWAKE(r) runs one
// TDPBF16PS on them every 16th iteration (r counts the iterations), and
// AWAKE_END releases the tiles. The products are zero and go nowhere.
#define AWAKE_BEGIN \
	LDTILECFG_AX \
	TILEZERO_T0 \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc8 \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd0

#define AWAKE(r, skip) \
	INCQ r \
	TESTQ $15, r \
	JNZ  skip \
	TDP_T0_T1_T2 \
skip:

#define AWAKE_END TILERELEASE

// The conversion kernels also prefetch the following block into L2, two
// lines per iteration: PF_BEGIN(arg) loads the cursor (lanesPrefetch) at
// arg into R14 and its address into R15, PF2 prefetches two lines
// advancing by its step (staying on its last line), PF_END stores the
// address back.
#define PF_BEGIN(arg) \
	MOVQ arg, R14 \
	MOVQ (R14), R15

#define PF_ONE \
	PREFETCHT1 (R15) \
	ADDQ 8(R14), R15 \
	CMPQ R15, 16(R14) \
	CMOVQGT 16(R14), R15

#define PF2 PF_ONE; PF_ONE

#define PF_END MOVQ R15, (R14)

// VCVTNE2PS2BF16 (AVX512_BF16) is written out at each use, its comment
// in Go operand order (TestBF16Encoding checks the bytes against it):
// "Z0, Z1, Z2" puts bf16(Z0) in words 0-15 and bf16(Z1) in words 16-31 of
// Z2, rounding to nearest even (NaN quieted).

// The pair kernels (bf16Pairs, e4m3Pairs, bf16PairsMax) share their
// arguments (dst, ldd, src, lds, pairs, n) and loops: PAIRS_BEGIN(shift,
// done) loads them (R11 = n >> shift column units) and leaves for done
// when there is nothing to do; PAIRS_ROW sets a pair's cursors (AX, DX its
// even and odd row, R12 its destination, CX the column units);
// PAIRS_NEXT(row) moves to the next pair.
#define PAIRS_BEGIN(shift, done) \
	MOVQ dst+0(FP), DI \
	MOVQ ldd+8(FP), R8 \
	MOVQ src+16(FP), SI \
	MOVQ lds+24(FP), R9 \
	MOVQ pairs+32(FP), R10 \
	MOVQ n+40(FP), R11 \
	SHRQ $shift, R11 \
	TESTQ R10, R10 \
	JZ   done \
	TESTQ R11, R11 \
	JZ   done

#define PAIRS_ROW \
	MOVQ SI, AX \
	LEAQ (SI)(R9*1), DX \
	MOVQ DI, R12 \
	MOVQ R11, CX

#define PAIRS_NEXT(row) \
	LEAQ (SI)(R9*2), SI \
	ADDQ R8, DI \
	DECQ R10 \
	JNZ  row

// pairIdx interleaves the two halves of a VCVTNE2PS2BF16 result: word 2c
// takes word c (the even row's column c), word 2c+1 word 16+c (the odd
// row's).
DATA ·pairIdx+0(SB)/8, $0x0011000100100000
DATA ·pairIdx+8(SB)/8, $0x0013000300120002
DATA ·pairIdx+16(SB)/8, $0x0015000500140004
DATA ·pairIdx+24(SB)/8, $0x0017000700160006
DATA ·pairIdx+32(SB)/8, $0x0019000900180008
DATA ·pairIdx+40(SB)/8, $0x001b000b001a000a
DATA ·pairIdx+48(SB)/8, $0x001d000d001c000c
DATA ·pairIdx+56(SB)/8, $0x001f000f001e000e
GLOBL ·pairIdx(SB), RODATA|NOPTR, $64

// func bf16Rows(dst unsafe.Pointer, src *float32, n int)
//
// dst[i] = bf16(src[i]) for n values (a multiple of 32), 16-bit words.
TEXT ·bf16Rows(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   rowsdone
	TESTQ $1, CX
	JZ   rowspair
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	BYTE $0x62; BYTE $0xf2; BYTE $0x77; BYTE $0x48; BYTE $0x72; BYTE $0xd0 // VCVTNE2PS2BF16 Z0, Z1, Z2
	VMOVDQU32 Z2, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	SHRQ $1, CX
	JZ   rowsdone
	JMP  rowsloop
rowspair:
	SHRQ $1, CX
rowsloop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z4
	VMOVUPS 192(SI), Z5
	BYTE $0x62; BYTE $0xf2; BYTE $0x77; BYTE $0x48; BYTE $0x72; BYTE $0xd0 // VCVTNE2PS2BF16 Z0, Z1, Z2
	BYTE $0x62; BYTE $0xf2; BYTE $0x57; BYTE $0x48; BYTE $0x72; BYTE $0xf4 // VCVTNE2PS2BF16 Z4, Z5, Z6
	VMOVDQU32 Z2, (DI)
	VMOVDQU32 Z6, 64(DI)
	ADDQ $256, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  rowsloop
rowsdone:
	VZEROUPPER
	RET

// func bf16Pairs(dst unsafe.Pointer, ldd uintptr, src *float32, lds uintptr, pairs, n int)
//
// For each pair p < pairs of float32 rows e = src + 2p*lds and o = e + lds
// (n floats each, n a multiple of 16), dst + p*ldd gets n 32-bit words:
// word c = bf16(o[c])<<16 | bf16(e[c]), the layout of an AMX bf16 operand
// whose reduction index runs over the row pairs.
TEXT ·bf16Pairs(SB), NOSPLIT, $0-48
	PAIRS_BEGIN(4, pairsdone)
	VMOVDQU32 ·pairIdx(SB), Z31
pairsrow:
	PAIRS_ROW
pairscol:
	VMOVUPS (AX), Z0
	VMOVUPS (DX), Z1
	BYTE $0x62; BYTE $0xf2; BYTE $0x77; BYTE $0x48; BYTE $0x72; BYTE $0xd0 // VCVTNE2PS2BF16 Z0, Z1, Z2
	VPERMW Z2, Z31, Z3
	VMOVDQU32 Z3, (R12)
	ADDQ $64, AX
	ADDQ $64, DX
	ADDQ $64, R12
	DECQ CX
	JNZ  pairscol
	PAIRS_NEXT(pairsrow)
pairsdone:
	VZEROUPPER
	RET

// QK_HALF(loadB, tdp0, tdp3, tdp4, tdp5) is one step of amxLanesQK's four
// groups: B (the step's query pairs at DX) into the tile loadB names, then
// each group's 16 key rows (R8, then 16*ldk = R14 further each) into tmm1
// and tmm6 in turn, each followed by its product; it advances R8 and DX to
// the next step and counts R15 down (the flags of DECQ are the caller's).
#define QK_HALF(loadB, tdp0, tdp3, tdp4, tdp5) \
	loadB \
	MOVQ R8, SI \
	TILELOADD_T1_A \
	tdp0 \
	ADDQ R14, SI \
	TILELOADD_T6_A \
	tdp3 \
	ADDQ R14, SI \
	TILELOADD_T1_A \
	tdp4 \
	ADDQ R14, SI \
	TILELOADD_T6_A \
	tdp5 \
	ADDQ $64, R8 \
	ADDQ $1024, DX \
	DECQ R15

// func amxLanesQK(cfg *amxConfig, k unsafe.Pointer, ldk uintptr, qb unsafe.Pointer, s *float32, groups, kt int)
//
// The scores of groups x 16 keys, transposed: for each group g, the
// 16x16 float32 tile at s + 1024g (row = key, column = query row, 64
// bytes a row) = sum over kt steps t of A . B, A = the group's 16 key rows
// of bf16 (ldk bytes apart) at column 32t, B = the query pairs at qb +
// 1024t (16 rows of 16 pairs). Groups go four at a time (C in tmm0,
// tmm3-5, A alternating between tmm1 and tmm6, one B per step for the
// four, alternating between tmm2 and tmm7 from step to step so that a
// load does not wait for the products still reading the last one), then
// one at a time (C in tmm0).
TEXT ·amxLanesQK(SB), NOSPLIT, $0-56
	MOVQ cfg+0(FP), AX
	LDTILECFG_AX
	MOVQ k+8(FP), R9
	MOVQ ldk+16(FP), BX
	MOVQ qb+24(FP), R10
	MOVQ s+32(FP), DI
	MOVQ groups+40(FP), R11
	MOVQ kt+48(FP), R12
	MOVQ $64, AX
	MOVQ $64, CX
	MOVQ BX, R14
	SHLQ $4, R14                    // 16 key rows
qkquad:
	CMPQ R11, $4
	JLT  qksingle
	TILEZERO_T0
	TILEZERO_T3
	TILEZERO_T4
	TILEZERO_T5
	MOVQ R9, R8
	MOVQ R10, DX
	MOVQ R12, R15
qkstep:
	QK_HALF(TILELOADD_T2_B, TDP_T0_T1_T2, TDP_T3_T6_T2, TDP_T4_T1_T2, TDP_T5_T6_T2)
	JZ   qkstore
	QK_HALF(TILELOADD_T7_B, TDP_T0_T1_T7, TDP_T3_T6_T7, TDP_T4_T1_T7, TDP_T5_T6_T7)
	JNZ  qkstep
qkstore:
	TILESTORED_T0_C                 // TILESTORED (DI)(AX*1), tmm0
	ADDQ $1024, DI
	TILESTORED_T3_C
	ADDQ $1024, DI
	TILESTORED_T4_C
	ADDQ $1024, DI
	TILESTORED_T5_C
	ADDQ $1024, DI
	LEAQ (R9)(R14*4), R9
	SUBQ $4, R11
	JMP  qkquad
qksingle:
	TESTQ R11, R11
	JZ   qkdone
	TILEZERO_T0
	MOVQ R9, SI
	MOVQ R10, DX
	MOVQ R12, R15
qksstep:
	TILELOADD_T1_A
	TILELOADD_T2_B
	TDP_T0_T1_T2
	ADDQ $64, SI
	ADDQ $1024, DX
	DECQ R15
	JNZ  qksstep
	TILESTORED_T0_C
	ADDQ $1024, DI
	ADDQ R14, R9
	DECQ R11
	JMP  qksingle
qkdone:
	TILERELEASE
	RET

// e4m3RowPerm puts 64 e4m3fn bytes in the order in which the in-lane byte
// unpacks of e4m3Rows give bf16 words in column order: dwords 4L, 4L+1
// <- 2L, 2L+1 (columns 8L..8L+7, unpacked low) and 4L+2, 4L+3 <- 8+2L,
// 9+2L (columns 32+8L.., unpacked high), for each 128-bit lane L.
DATA ·e4m3RowPerm+0(SB)/8, $0x0000000100000000
DATA ·e4m3RowPerm+8(SB)/8, $0x0000000900000008
DATA ·e4m3RowPerm+16(SB)/8, $0x0000000300000002
DATA ·e4m3RowPerm+24(SB)/8, $0x0000000b0000000a
DATA ·e4m3RowPerm+32(SB)/8, $0x0000000500000004
DATA ·e4m3RowPerm+40(SB)/8, $0x0000000d0000000c
DATA ·e4m3RowPerm+48(SB)/8, $0x0000000700000006
DATA ·e4m3RowPerm+56(SB)/8, $0x0000000f0000000e
GLOBL ·e4m3RowPerm(SB), RODATA|NOPTR, $64

// E4M3_TABLES loads the decoder tables of tab (BX): bytes 2 of the
// float32 bits (bf16's low byte) in Z8:Z9, bytes 3 (its high byte, no
// sign) in Z10:Z11, the sign mask in Z12.
#define E4M3_TABLES \
	VMOVDQU64 (BX), Z8 \
	VMOVDQU64 64(BX), Z9 \
	VMOVDQU64 128(BX), Z10 \
	VMOVDQU64 192(BX), Z11 \
	VPBROADCASTD 320(BX), Z12

// E4M3_BYTES(x, lo, hi): the bf16 low and high bytes of the e4m3fn bytes
// in x (sign included in hi).
#define E4M3_BYTES(x, lo, hi) \
	VMOVDQA64 Z8, lo \
	VPERMT2B Z9, x, lo \
	VMOVDQA64 Z10, hi \
	VPERMT2B Z11, x, hi \
	VPTERNLOGD $0xf8, Z12, x, hi

// func e4m3Rows(dst unsafe.Pointer, src unsafe.Pointer, n int, tab *E4M3Tables, cfg *amxConfig, pf *lanesPrefetch)
//
// dst[i] = bf16 bits of e4m3fn src[i] for n values (a multiple of 64), in
// order: the value exactly (every e4m3fn value is a bf16 value; NaN as
// the quiet NaN 0x7fc0 with the sign). It keeps the AMX unit awake with
// the tile configuration cfg (AWAKE) and prefetches two lines of pf per
// 64 values.
TEXT ·e4m3Rows(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ tab+24(FP), BX
	SHRQ $6, CX
	JZ   e4rowsdone
	E4M3_TABLES
	VMOVDQU64 ·e4m3RowPerm(SB), Z0
	MOVQ cfg+32(FP), AX
	AWAKE_BEGIN
	XORQ R8, R8
	PF_BEGIN(pf+40(FP))
e4rows:
	AWAKE(R8, e4rowsawake)
	PF2
	VPERMD (SI), Z0, Z2
	E4M3_BYTES(Z2, Z3, Z4)
	VPUNPCKLBW Z4, Z3, Z5
	VPUNPCKHBW Z4, Z3, Z6
	VMOVDQU64 Z5, (DI)
	VMOVDQU64 Z6, 64(DI)
	ADDQ $64, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  e4rows
	PF_END
	AWAKE_END
e4rowsdone:
	VZEROUPPER
	RET

// func e4m3Pairs(dst unsafe.Pointer, ldd uintptr, src unsafe.Pointer, lds uintptr, pairs, n int, tab *E4M3Tables, cfg *amxConfig, pf *lanesPrefetch)
//
// bf16Pairs for e4m3fn rows: for each pair p < pairs of rows e = src +
// 2p*lds and o = e + lds (n bytes each, n a multiple of 64), dst + p*ldd
// gets n 32-bit words, word c = bf16(o[c])<<16 | bf16(e[c]) (exact). The
// decoder's dword permutation (tab.Perm) puts each row's bytes in the
// order in which the byte and word unpacks give the columns in order. It
// keeps the AMX unit awake with the tile configuration cfg (AWAKE) and
// prefetches two lines of pf per 64 columns of a pair.
TEXT ·e4m3Pairs(SB), NOSPLIT, $0-72
	PAIRS_BEGIN(6, e4pairsdone)
	MOVQ tab+48(FP), BX
	E4M3_TABLES
	VMOVDQU64 256(BX), Z0
	MOVQ cfg+56(FP), AX
	AWAKE_BEGIN
	XORQ R13, R13
	PF_BEGIN(pf+64(FP))
e4pairsrow:
	PAIRS_ROW
e4pairscol:
	AWAKE(R13, e4pairsawake)
	PF2
	VPERMD (AX), Z0, Z2
	VPERMD (DX), Z0, Z13
	E4M3_BYTES(Z2, Z3, Z4)
	E4M3_BYTES(Z13, Z14, Z15)
	VPUNPCKLBW Z4, Z3, Z5
	VPUNPCKHBW Z4, Z3, Z6
	VPUNPCKLBW Z15, Z14, Z16
	VPUNPCKHBW Z15, Z14, Z17
	VPUNPCKLWD Z16, Z5, Z18
	VPUNPCKHWD Z16, Z5, Z19
	VPUNPCKLWD Z17, Z6, Z20
	VPUNPCKHWD Z17, Z6, Z21
	VMOVDQU64 Z18, (R12)
	VMOVDQU64 Z19, 64(R12)
	VMOVDQU64 Z20, 128(R12)
	VMOVDQU64 Z21, 192(R12)
	ADDQ $64, AX
	ADDQ $64, DX
	ADDQ $256, R12
	DECQ CX
	JNZ  e4pairscol
	PAIRS_NEXT(e4pairsrow)
	PF_END
	AWAKE_END
e4pairsdone:
	VZEROUPPER
	RET

// bf16PairPerm puts the 32 bf16 words of a row (8 qwords of 4 columns) in
// the order in which the in-lane word unpacks of bf16PairsMax give the
// columns in order: qwords 2L, 2L+1 <- L, 4+L for each 128-bit lane L.
DATA ·bf16PairPerm+0(SB)/8, $0
DATA ·bf16PairPerm+8(SB)/8, $4
DATA ·bf16PairPerm+16(SB)/8, $1
DATA ·bf16PairPerm+24(SB)/8, $5
DATA ·bf16PairPerm+32(SB)/8, $2
DATA ·bf16PairPerm+40(SB)/8, $6
DATA ·bf16PairPerm+48(SB)/8, $3
DATA ·bf16PairPerm+56(SB)/8, $7
GLOBL ·bf16PairPerm(SB), RODATA|NOPTR, $64

// func bf16PairsMax(dst unsafe.Pointer, ldd uintptr, src unsafe.Pointer, lds uintptr, pairs, n int, max *[32]uint16, pf *lanesPrefetch)
//
// bf16Pairs for bf16 rows (n values each, a multiple of 32; src rows lds
// bytes apart): word c of pair p = o[c]<<16 | e[c], the bits as they are.
// It also folds the magnitude bits (x & 0x7fff) of every finite value of
// the rows into max word by word (unsigned maximum; Inf and NaN left out),
// and prefetches two lines of pf per 32 columns of a pair.
TEXT ·bf16PairsMax(SB), NOSPLIT, $0-64
	PAIRS_BEGIN(5, bfpairsdone)
	MOVQ max+48(FP), BX
	VMOVDQU16 (BX), Z9
	VMOVDQU64 ·bf16PairPerm(SB), Z0
	MOVL $0x7fff7fff, AX
	VPBROADCASTD AX, Z7
	MOVL $0x7f807f80, AX
	VPBROADCASTD AX, Z8
	PF_BEGIN(pf+56(FP))
bfpairsrow:
	PAIRS_ROW
bfpairscol:
	PF2
	VPERMQ (AX), Z0, Z1
	VPERMQ (DX), Z0, Z2
	VPANDD Z7, Z1, Z3
	VPANDD Z7, Z2, Z4
	VPCMPUW $1, Z8, Z3, K1
	VPCMPUW $1, Z8, Z4, K2
	VPMAXUW Z3, Z9, K1, Z9
	VPMAXUW Z4, Z9, K2, Z9
	VPUNPCKLWD Z2, Z1, Z5
	VPUNPCKHWD Z2, Z1, Z6
	VMOVDQU64 Z5, (R12)
	VMOVDQU64 Z6, 64(R12)
	ADDQ $64, AX
	ADDQ $64, DX
	ADDQ $128, R12
	DECQ CX
	JNZ  bfpairscol
	PAIRS_NEXT(bfpairsrow)
	PF_END
	VMOVDQU16 Z9, (BX)
bfpairsdone:
	VZEROUPPER
	RET
