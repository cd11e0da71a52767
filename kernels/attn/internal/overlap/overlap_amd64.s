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

// One key of a Q.K column: the K scalar at off(SI) broadcast into b and
// multiplied with Q^T[c] (qa: rows 0-7, qb: rows 8-15) into a0, a1.
#define KEY(off, qa, qb, b, a0, a1) \
	VBROADCASTSS (off)(SI), b; \
	VFMADD231PS b, qa, a0; \
	VFMADD231PS b, qb, a1

// One column of the AVX2 Q.K kernel for 5 keys: Q^T[c] (two ymm) times 5
// broadcast K scalars into 10 accumulators.
#define FMAS(u) \
	VMOVUPS (64*u)(AX), Y10; \
	VMOVUPS (64*u+32)(AX), Y11; \
	KEY(20*u, Y10, Y11, Y12, Y0, Y1); \
	KEY(20*u+4, Y10, Y11, Y12, Y2, Y3); \
	KEY(20*u+8, Y10, Y11, Y12, Y4, Y5); \
	KEY(20*u+12, Y10, Y11, Y12, Y6, Y7); \
	KEY(20*u+16, Y10, Y11, Y12, Y8, Y9)

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

// The decode-ratio loops (BenchmarkOverlapDecode): one step is 4 columns
// of the AVX2 Q.K lane kernel for 6 keys (tile.lanesQKT: 48 multiply-adds,
// one broadcast register) and the staging of 24 e4m3 values, 2 ymm
// multiply-adds per value as in decode at 16 query heads per KV head.
// The conversion is attn.decodeE4M3x32AVX2's per-value sequence, 8 values
// per group in the one register the kernel leaves free (Y15): sign
// extension, shift, bit-14 clear, F16C widening, the 2^8 multiply and the
// store, plus its NaN check (byte | 0x80, unsigned maximum, kept in
// memory) once per step, for 32 bytes.
DATA ·dcst+0(SB)/8, $0xbfffbfffbfffbfff
DATA ·dcst+8(SB)/8, $0xbfffbfffbfffbfff
DATA ·dcst+16(SB)/8, $0x4380000043800000
DATA ·dcst+24(SB)/8, $0x4380000043800000
DATA ·dcst+32(SB)/8, $0x4380000043800000
DATA ·dcst+40(SB)/8, $0x4380000043800000
DATA ·dcst+48(SB)/8, $0x8080808080808080
DATA ·dcst+56(SB)/8, $0x8080808080808080
DATA ·dcst+64(SB)/8, $0x8080808080808080
DATA ·dcst+72(SB)/8, $0x8080808080808080
GLOBL ·dcst(SB), RODATA|NOPTR, $80

// The NaN check's running maximum.
GLOBL ·nanmax(SB), NOPTR, $32

// One column of 6 keys: K rows 512 bytes apart (d = 128).
#define FMAS6(u) \
	VMOVUPS (64*u)(AX), Y12; \
	VMOVUPS (64*u+32)(AX), Y13; \
	KEY(4*u, Y12, Y13, Y14, Y0, Y1); \
	KEY(4*u+512, Y12, Y13, Y14, Y2, Y3); \
	KEY(4*u+1024, Y12, Y13, Y14, Y4, Y5); \
	KEY(4*u+1536, Y12, Y13, Y14, Y6, Y7); \
	KEY(4*u+2048, Y12, Y13, Y14, Y8, Y9); \
	KEY(4*u+2560, Y12, Y13, Y14, Y10, Y11)

// 8 e4m3 bytes at src + DX + 8g to 8 float32 times 2^-8 in Y15.
#define WIDEN8(g) \
	VPMOVSXBW (8*g)(R9)(DX*1), X15; \
	VPSLLW $7, X15, X15; \
	VPAND ·dcst+0(SB), X15, X15; \
	VCVTPH2PS X15, Y15

// 8 e4m3 bytes at src + DX + 8g to 8 float32 at dst + 4*DX + 32g.
#define CONV8(g) \
	WIDEN8(g); \
	VMULPS ·dcst+16(SB), Y15, Y15; \
	VMOVUPS Y15, (32*g)(R10)(DX*4)

// CONV8 without the 2^8 multiply (a scale folded elsewhere).
#define CONV8NM(g) \
	WIDEN8(g); \
	VMOVUPS Y15, (32*g)(R10)(DX*4)

#define NANCHK \
	VMOVDQU (R9)(DX*1), Y15; \
	VPOR ·dcst+48(SB), Y15, Y15; \
	VPMAXUB ·nanmax(SB), Y15, Y15; \
	VMOVDQU Y15, ·nanmax(SB)

// Q^T wraps in 4 KiB, the key columns in 512 bytes (rows 3 KiB), the
// conversion's offset DX in 2016 bytes of source (8064 of destination).
#define PROLOGUE_DEC \
	MOVQ q+0(FP), AX; \
	MOVQ k+8(FP), SI; \
	MOVQ src+16(FP), R9; \
	MOVQ dst+24(FP), R10; \
	MOVQ n+32(FP), CX; \
	XORQ DX, DX; \
	XORQ R11, R11

#define ADVANCE_DEC \
	ADDQ $256, AX; \
	ANDQ $4095, AX; \
	ORQ q+0(FP), AX; \
	ADDQ $16, SI; \
	ANDQ $511, SI; \
	ORQ k+8(FP), SI; \
	ADDQ $24, DX; \
	CMPQ DX, $2016; \
	CMOVQGE R11, DX

// func fmaDecLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·fmaDecLoop(SB), NOSPLIT, $0-40
	PROLOGUE_DEC
fdl:
	FMAS6(0); FMAS6(1); FMAS6(2); FMAS6(3)
	ADVANCE_DEC
	DECQ CX
	JNZ fdl
	VZEROUPPER
	RET

// func convDecLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·convDecLoop(SB), NOSPLIT, $0-40
	PROLOGUE_DEC
cdl:
	CONV8(0); CONV8(1); CONV8(2); NANCHK
	ADVANCE_DEC
	DECQ CX
	JNZ cdl
	VZEROUPPER
	RET

// func bothDecLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·bothDecLoop(SB), NOSPLIT, $0-40
	PROLOGUE_DEC
bdl:
	FMAS6(0); CONV8(0); FMAS6(1); CONV8(1); FMAS6(2); CONV8(2); FMAS6(3); NANCHK
	ADVANCE_DEC
	DECQ CX
	JNZ bdl
	VZEROUPPER
	RET

// func bothNoMulDecLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·bothNoMulDecLoop(SB), NOSPLIT, $0-40
	PROLOGUE_DEC
bndl:
	FMAS6(0); CONV8NM(0); FMAS6(1); CONV8NM(1); FMAS6(2); CONV8NM(2); FMAS6(3); NANCHK
	ADVANCE_DEC
	DECQ CX
	JNZ bndl
	VZEROUPPER
	RET

// func convNoMulDecLoop(q, k *float32, src *byte, dst *float32, n int)
TEXT ·convNoMulDecLoop(SB), NOSPLIT, $0-40
	PROLOGUE_DEC
cndl:
	CONV8NM(0); CONV8NM(1); CONV8NM(2); NANCHK
	ADVANCE_DEC
	DECQ CX
	JNZ cndl
	VZEROUPPER
	RET
