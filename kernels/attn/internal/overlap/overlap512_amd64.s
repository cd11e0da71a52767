//go:build amd64 && !purego

#include "textflag.h"

// Tables of the VBMI e4m3 decoder (tile.WidenE4M3x64): their values do
// not matter for timing (the permutes take the same time for any index).
GLOBL ·tab512(SB), RODATA|NOPTR, $320

// One iteration of the AVX-512 Q.K lane kernel (tile.lanesQKT512's qk12
// loop): 4 columns of Q^T (4 zmm loads) times 12 keys, one multiply-add
// per (key, column) with the K scalar as an embedded broadcast: 48 FMAs
// consuming 48 K elements.
#define FMAS512(u) \
	VMOVUPS (256*u+0)(AX), Z28; \
	VMOVUPS (256*u+64)(AX), Z29; \
	VMOVUPS (256*u+128)(AX), Z30; \
	VMOVUPS (256*u+192)(AX), Z31; \
	VFMADD231PS.BCST (0+16*u)(SI), Z28, Z0; \
	VFMADD231PS.BCST (64+16*u)(SI), Z28, Z1; \
	VFMADD231PS.BCST (128+16*u)(SI), Z28, Z2; \
	VFMADD231PS.BCST (192+16*u)(SI), Z28, Z3; \
	VFMADD231PS.BCST (256+16*u)(SI), Z28, Z4; \
	VFMADD231PS.BCST (320+16*u)(SI), Z28, Z5; \
	VFMADD231PS.BCST (384+16*u)(SI), Z28, Z6; \
	VFMADD231PS.BCST (448+16*u)(SI), Z28, Z7; \
	VFMADD231PS.BCST (512+16*u)(SI), Z28, Z8; \
	VFMADD231PS.BCST (576+16*u)(SI), Z28, Z9; \
	VFMADD231PS.BCST (640+16*u)(SI), Z28, Z10; \
	VFMADD231PS.BCST (704+16*u)(SI), Z28, Z11; \
	VFMADD231PS.BCST (4+16*u)(SI), Z29, Z0; \
	VFMADD231PS.BCST (68+16*u)(SI), Z29, Z1; \
	VFMADD231PS.BCST (132+16*u)(SI), Z29, Z2; \
	VFMADD231PS.BCST (196+16*u)(SI), Z29, Z3; \
	VFMADD231PS.BCST (260+16*u)(SI), Z29, Z4; \
	VFMADD231PS.BCST (324+16*u)(SI), Z29, Z5; \
	VFMADD231PS.BCST (388+16*u)(SI), Z29, Z6; \
	VFMADD231PS.BCST (452+16*u)(SI), Z29, Z7; \
	VFMADD231PS.BCST (516+16*u)(SI), Z29, Z8; \
	VFMADD231PS.BCST (580+16*u)(SI), Z29, Z9; \
	VFMADD231PS.BCST (644+16*u)(SI), Z29, Z10; \
	VFMADD231PS.BCST (708+16*u)(SI), Z29, Z11; \
	VFMADD231PS.BCST (8+16*u)(SI), Z30, Z0; \
	VFMADD231PS.BCST (72+16*u)(SI), Z30, Z1; \
	VFMADD231PS.BCST (136+16*u)(SI), Z30, Z2; \
	VFMADD231PS.BCST (200+16*u)(SI), Z30, Z3; \
	VFMADD231PS.BCST (264+16*u)(SI), Z30, Z4; \
	VFMADD231PS.BCST (328+16*u)(SI), Z30, Z5; \
	VFMADD231PS.BCST (392+16*u)(SI), Z30, Z6; \
	VFMADD231PS.BCST (456+16*u)(SI), Z30, Z7; \
	VFMADD231PS.BCST (520+16*u)(SI), Z30, Z8; \
	VFMADD231PS.BCST (584+16*u)(SI), Z30, Z9; \
	VFMADD231PS.BCST (648+16*u)(SI), Z30, Z10; \
	VFMADD231PS.BCST (712+16*u)(SI), Z30, Z11; \
	VFMADD231PS.BCST (12+16*u)(SI), Z31, Z0; \
	VFMADD231PS.BCST (76+16*u)(SI), Z31, Z1; \
	VFMADD231PS.BCST (140+16*u)(SI), Z31, Z2; \
	VFMADD231PS.BCST (204+16*u)(SI), Z31, Z3; \
	VFMADD231PS.BCST (268+16*u)(SI), Z31, Z4; \
	VFMADD231PS.BCST (332+16*u)(SI), Z31, Z5; \
	VFMADD231PS.BCST (396+16*u)(SI), Z31, Z6; \
	VFMADD231PS.BCST (460+16*u)(SI), Z31, Z7; \
	VFMADD231PS.BCST (524+16*u)(SI), Z31, Z8; \
	VFMADD231PS.BCST (588+16*u)(SI), Z31, Z9; \
	VFMADD231PS.BCST (652+16*u)(SI), Z31, Z10; \
	VFMADD231PS.BCST (716+16*u)(SI), Z31, Z11;

// 64 e4m3 bytes to float32 (tile.WidenE4M3x64's loop body, its 10
// vector instructions and 4 stores).
#define CONV512(u) \
	VPERMD (64*u)(R9), Z22, Z12; \
	VMOVDQU64 (DX), Z13; \
	VPERMT2B Z20, Z12, Z13; \
	VMOVDQU64 128(DX), Z14; \
	VPERMT2B Z21, Z12, Z14; \
	VPTERNLOGD $0xf8, Z23, Z12, Z14; \
	VPUNPCKLBW Z14, Z13, Z15; \
	VPUNPCKHBW Z14, Z13, Z16; \
	VPUNPCKLWD Z15, Z24, Z17; \
	VPUNPCKHWD Z15, Z24, Z18; \
	VPUNPCKLWD Z16, Z24, Z19; \
	VPUNPCKHWD Z16, Z24, Z25; \
	VMOVDQU64 Z17, (256*u)(R10); \
	VMOVDQU64 Z18, (256*u+64)(R10); \
	VMOVDQU64 Z19, (256*u+128)(R10); \
	VMOVDQU64 Z25, (256*u+192)(R10)

// Every operand stays at the same L1-resident addresses: q (1 KiB of Q^T
// columns), k (768 bytes of K rows), src (192 bytes) and dst (768 bytes).
#define PROLOGUE512 \
	MOVQ q+0(FP), AX; \
	MOVQ k+8(FP), SI; \
	MOVQ src+16(FP), R9; \
	MOVQ dst+24(FP), R10; \
	MOVQ n+32(FP), CX; \
	LEAQ ·tab512(SB), DX; \
	VMOVDQU64 64(DX), Z20; \
	VMOVDQU64 192(DX), Z21; \
	VMOVDQU64 256(DX), Z22; \
	MOVL $0x80808080, BX; \
	VPBROADCASTD BX, Z23; \
	VPXORD Z24, Z24, Z24

// One iteration is 4 FMA steps (192 K elements' multiply-adds) and 3
// conversion steps (192 K elements): the proportions of FP8 decode at
// 16 query heads per KV head, where each K element serves one 16-lane FMA.

// func fma512Loop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·fma512Loop(SB), NOSPLIT, $0-40
	PROLOGUE512
f5:
	FMAS512(0); FMAS512(1); FMAS512(2); FMAS512(3)
	DECQ CX
	JNZ f5
	VZEROUPPER
	RET

// func conv512Loop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·conv512Loop(SB), NOSPLIT, $0-40
	PROLOGUE512
c5:
	CONV512(0); CONV512(1); CONV512(2)
	DECQ CX
	JNZ c5
	VZEROUPPER
	RET

// func both512Loop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·both512Loop(SB), NOSPLIT, $0-40
	PROLOGUE512
b5:
	FMAS512(0); CONV512(0); FMAS512(1); CONV512(1); FMAS512(2); CONV512(2); FMAS512(3)
	DECQ CX
	JNZ b5
	VZEROUPPER
	RET
