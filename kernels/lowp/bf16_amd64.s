//go:build amd64 && !purego

#include "textflag.h"

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() (eax, edx uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// func encodeBF16AVX512(dst *BFloat16, src *float32, n int)
// Rounds to nearest even on the float32 bits, x + 0x7fff + ((x >> 16) & 1),
// keeping the high half, as bf16Bits does. NaN lanes are first replaced by
// the float32 (x & sign) | 0x7fc00000, which the rounding maps to the
// canonical quiet NaN with the input's sign (0x7fc0 / 0xffc0), as BF16
// gives. 16 elements per iteration: the conversion is bound by memory,
// not by the loop.
TEXT ·encodeBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z1          // rounding bias
	MOVL $1, AX
	VPBROADCASTD AX, Z2          // lsb mask
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z5          // sign mask
	MOVL $0x7fc00000, AX
	VPBROADCASTD AX, Z9          // float32 quiet NaN
	TESTQ CX, CX
	JZ    enc_done
enc_loop:
	VMOVDQU32   (SI), Z0
	VFPCLASSPSZ $0x81, Z0, K1    // QNaN | SNaN
	VPTERNLOGD  $0xea, Z9, Z5, K1, Z0 // NaN lanes: (x & sign) | qNaN
	VPSRLD      $16, Z0, Z6
	VPANDD      Z2, Z6, Z6       // (x >> 16) & 1
	VPADDD      Z1, Z0, Z0       // + 0x7fff
	VPADDD      Z6, Z0, Z0       // rounded bits
	VPSRLD      $16, Z0, Z0
	VPMOVDW     Z0, (DI)         // the high halves, 16 words
	ADDQ        $64, SI
	ADDQ        $32, DI
	SUBQ        $16, CX
	JNZ         enc_loop
enc_done:
	VZEROUPPER
	RET

// func decodeBF16AVX512(dst *float32, src *BFloat16, n int)
// Each BF16 value is the high half of its float32: zero-extend, shift left
// by 16; 16 elements per iteration.
TEXT ·decodeBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	TESTQ CX, CX
	JZ    dec_done
dec_loop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       dec_loop
dec_done:
	VZEROUPPER
	RET
