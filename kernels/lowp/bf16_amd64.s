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
// gives. 32 elements per iteration, then one group of 16.
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
	CMPQ CX, $32
	JLT  enc_16
enc_loop:
	VMOVDQU32   (SI), Z0
	VMOVDQU32   64(SI), Z3
	VFPCLASSPSZ $0x81, Z0, K1    // QNaN | SNaN
	VFPCLASSPSZ $0x81, Z3, K2
	VPTERNLOGD  $0xea, Z9, Z5, K1, Z0 // NaN lanes: (x & sign) | qNaN
	VPTERNLOGD  $0xea, Z9, Z5, K2, Z3
	VPSRLD      $16, Z0, Z6
	VPSRLD      $16, Z3, Z7
	VPANDD      Z2, Z6, Z6       // (x >> 16) & 1
	VPANDD      Z2, Z7, Z7
	VPADDD      Z1, Z0, Z0       // + 0x7fff
	VPADDD      Z1, Z3, Z3
	VPADDD      Z6, Z0, Z0       // rounded bits
	VPADDD      Z7, Z3, Z3
	VPSRLD      $16, Z0, Z0
	VPSRLD      $16, Z3, Z3
	VPMOVDW     Z0, (DI)
	VPMOVDW     Z3, 32(DI)
	ADDQ        $128, SI
	ADDQ        $64, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         enc_loop
enc_16:
	TESTQ       CX, CX
	JZ          enc_done
	VMOVDQU32   (SI), Z0
	VFPCLASSPSZ $0x81, Z0, K1
	VPTERNLOGD  $0xea, Z9, Z5, K1, Z0
	VPSRLD      $16, Z0, Z6
	VPANDD      Z2, Z6, Z6
	VPADDD      Z1, Z0, Z0
	VPADDD      Z6, Z0, Z0
	VPSRLD      $16, Z0, Z0
	VPMOVDW     Z0, (DI)
enc_done:
	VZEROUPPER
	RET

// func decodeBF16AVX512(dst *float32, src *BFloat16, n int)
// Each BF16 value is the high half of its float32: zero-extend, shift left
// by 16. 32 elements per iteration, then one group of 16.
TEXT ·decodeBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $32
	JLT  dec_16
dec_loop:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z1, 64(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	CMPQ      CX, $32
	JGE       dec_loop
dec_16:
	TESTQ     CX, CX
	JZ        dec_done
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVDQU32 Z0, (DI)
dec_done:
	VZEROUPPER
	RET
