//go:build amd64 && !purego

#include "textflag.h"

// The combine weights of mergeLSE (merge.go), for n >= 1 log-sum-exps:
//
//	m    = the largest l[i] that is not NaN (-inf when there is none)
//	e[i] = e^(l[i] - m), 0 for a NaN l[i]
//	s    = the sum of the e[i] (per lane, then the lanes reduced)
//	w[i] = e[i] * (1/s)
//
// and m and s returned. When m is -inf the kernels return s = 0 and leave
// w alone. e^x uses the Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2,
// and the degree-7 Taylor polynomial of e^r (truncation below 6e-9
// relative): within 2 ulp of e^x, gradual underflow. x is clamped below at
// -150 first, so that -inf (an empty slot) gives exactly 0; VMAXPS returns
// its second source (in Intel's operand order) when the first is NaN, so
// the clamp also maps a NaN LSE to weight 0, and the running maximum,
// taken as max(l, max so far), skips NaN.

// 8-lane constants (the AVX2 kernel's memory operands; the AVX-512 kernel
// broadcasts their first lane).
#define VEC8(name, bits) \
	DATA name<>+0(SB)/4, $bits; DATA name<>+4(SB)/4, $bits; \
	DATA name<>+8(SB)/4, $bits; DATA name<>+12(SB)/4, $bits; \
	DATA name<>+16(SB)/4, $bits; DATA name<>+20(SB)/4, $bits; \
	DATA name<>+24(SB)/4, $bits; DATA name<>+28(SB)/4, $bits; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

VEC8(mwninf, 0xff800000)  // -inf
VEC8(mwlo, 0xc3160000)    // -150, the clamp
VEC8(mwlog2e, 0x3fb8aa3b) // log2(e)
VEC8(mwln2hi, 0x3f318000) // ln2 = ln2hi + ln2lo
VEC8(mwln2lo, 0xb95e8083)
VEC8(mwone, 0x3f800000)   // 1 = c0 = c1
VEC8(mwc2, 0x3f000000)    // 1/2
VEC8(mwc3, 0x3e2aaaab)    // 1/6
VEC8(mwc4, 0x3d2aaaab)    // 1/24
VEC8(mwc5, 0x3c088889)    // 1/120
VEC8(mwc6, 0x3ab60b61)    // 1/720
VEC8(mwc7, 0x39500d01)    // 1/5040

// tail8: eight all-ones dwords, then eight zero dwords; the 8 dwords at
// tail8 + 4*(8-j) are the lane mask of the first j lanes (VMASKMOVPS).
DATA tail8<>+0(SB)/8, $-1
DATA tail8<>+8(SB)/8, $-1
DATA tail8<>+16(SB)/8, $-1
DATA tail8<>+24(SB)/8, $-1
DATA tail8<>+32(SB)/8, $0
DATA tail8<>+40(SB)/8, $0
DATA tail8<>+48(SB)/8, $0
DATA tail8<>+56(SB)/8, $0
GLOBL tail8<>(SB), RODATA|NOPTR, $64

// HRED8 reduces the 8 lanes of y into lane 0 of x (its low half) with op
// (VMAXPS or VADDPS; X1 scratch).
#define HRED8(op, y, x) \
	VEXTRACTF128 $1, y, X1; op X1, x, x; \
	VPERMILPS $0x4e, x, X1; op X1, x, x; \
	VPERMILPS $0xb1, x, X1; op X1, x, x

// EXPR is the Cody-Waite reduction of x: k = round(x log2e) (rnd:
// VRNDSCALEPS or VROUNDPS, nearest even) and r = x - k ln2hi - k ln2lo.
// EXPP evaluates e^r = 1 + r(1 + r(c2 + ... + r c7)) by Horner's rule
// into p (c7..c2 and one: registers or memory operands).
#define EXPR(rnd, x, k, r, log2e, hi, lo) \
	VMULPS log2e, x, k; rnd $0, k, k; VMOVAPS x, r; \
	VFNMADD231PS hi, k, r; VFNMADD231PS lo, k, r
#define EXPP(c7, c6, c5, c4, c3, c2, one, r, p) \
	VMOVUPS c7, p; VFMADD213PS c6, r, p; VFMADD213PS c5, r, p; \
	VFMADD213PS c4, r, p; VFMADD213PS c3, r, p; VFMADD213PS c2, r, p; \
	VFMADD213PS one, r, p; VFMADD213PS one, r, p

// MASK8 sets Y9 to the lane mask of the next vector of 8 that lie below n
// (R10 values left, R10 >= 1; DX = tail8, AX scratch).
#define MASK8 \
	MOVQ $8, AX; CMPQ R10, $8; CMOVQLT R10, AX; NEGQ AX; ADDQ $8, AX; \
	VMOVDQU (DX)(AX*4), Y9

// MASK16 sets K1 to the lanes of the next vector of 16 that lie below n
// (R10 values left, R10 >= 1; CX and BX scratch): (1 << min(R10, 16)) - 1.
#define MASK16 \
	MOVQ $16, CX; CMPQ R10, $16; CMOVQLT R10, CX; \
	MOVL $1, BX; SHLL CL, BX; DECL BX; KMOVW BX, K1

// func mergeWeightsAVX512(l, w *float32, n int) (m, s float32)
TEXT ·mergeWeightsAVX512(SB), NOSPLIT, $0-32
	MOVQ         l+0(FP), SI
	MOVQ         w+8(FP), DI
	VBROADCASTSS mwninf<>(SB), Z10
	VMOVAPS      Z10, Z0
	MOVQ         SI, R8
	MOVQ         n+16(FP), R10

mw5_max:
	MASK16
	VMOVAPS      Z10, Z1
	VMOVUPS      (R8), K1, Z1   // lanes beyond n stay -inf
	VMAXPS       Z0, Z1, Z0     // max(l, max so far): the second if l is NaN
	ADDQ         $64, R8
	SUBQ         $16, R10
	JG           mw5_max
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS       Y1, Y0, Y0
	HRED8(VMAXPS, Y0, X0)
	VMOVSS       X0, m+24(FP)
	VXORPS       X3, X3, X3
	VUCOMISS     X10, X0
	JEQ          mw5_done       // m = -inf: nothing visible
	VBROADCASTSS X0, Z2         // m
	VBROADCASTSS mwlo<>(SB), Z21
	VBROADCASTSS mwlog2e<>(SB), Z11
	VBROADCASTSS mwln2hi<>(SB), Z12
	VBROADCASTSS mwln2lo<>(SB), Z13
	VBROADCASTSS mwone<>(SB), Z20
	VBROADCASTSS mwc2<>(SB), Z14
	VBROADCASTSS mwc3<>(SB), Z15
	VBROADCASTSS mwc4<>(SB), Z16
	VBROADCASTSS mwc5<>(SB), Z17
	VBROADCASTSS mwc6<>(SB), Z18
	VBROADCASTSS mwc7<>(SB), Z19
	MOVQ         SI, R8
	MOVQ         DI, R9
	MOVQ         n+16(FP), R10

mw5_exp:
	MASK16
	VMOVUPS.Z    (R8), K1, Z4
	VSUBPS       Z2, Z4, Z4     // x = l - m <= 0, or NaN
	VMAXPS       Z21, Z4, Z4    // clamp at -150; NaN gives -150 too
	EXPR(VRNDSCALEPS, Z4, Z5, Z6, Z11, Z12, Z13)
	EXPP(Z19, Z18, Z17, Z16, Z15, Z14, Z20, Z6, Z7)
	VSCALEFPS.Z  Z5, Z7, K1, Z7 // e^r * 2^k; 0 in lanes beyond n
	VADDPS       Z7, Z3, Z3
	VMOVUPS      Z7, K1, (R9)
	ADDQ         $64, R8
	ADDQ         $64, R9
	SUBQ         $16, R10
	JG           mw5_exp
	VEXTRACTF64X4 $1, Z3, Y1
	VADDPS       Y1, Y3, Y3
	HRED8(VADDPS, Y3, X3)
	VDIVSS       X3, X20, X4    // 1/s
	VBROADCASTSS X4, Z4
	MOVQ         DI, R9
	MOVQ         n+16(FP), R10

mw5_norm:
	MASK16
	VMOVUPS.Z    (R9), K1, Z5
	VMULPS       Z4, Z5, Z5
	VMOVUPS      Z5, K1, (R9)
	ADDQ         $64, R9
	SUBQ         $16, R10
	JG           mw5_norm

mw5_done:
	VMOVSS       X3, s+28(FP)
	VZEROUPPER
	RET

// func mergeWeightsAVX2(l, w *float32, n int) (m, s float32)
// 2^k is built through the exponent field in two halves (k1 = k >> 1 and
// k - k1, both normal powers for k >= -216), so that subnormal results
// round once, as with VSCALEFPS.
TEXT ·mergeWeightsAVX2(SB), NOSPLIT, $0-32
	MOVQ         l+0(FP), SI
	MOVQ         w+8(FP), DI
	LEAQ         tail8<>(SB), DX
	VMOVUPS      mwninf<>(SB), Y10
	VMOVAPS      Y10, Y0
	MOVQ         SI, R8
	MOVQ         n+16(FP), R10

mw2_max:
	MASK8 // lanes below n
	VMASKMOVPS   (R8), Y9, Y1
	VBLENDVPS    Y9, Y1, Y10, Y1 // -inf in lanes beyond n
	VMAXPS       Y0, Y1, Y0     // max(l, max so far): the second if l is NaN
	ADDQ         $32, R8
	SUBQ         $8, R10
	JG           mw2_max
	HRED8(VMAXPS, Y0, X0)
	VMOVSS       X0, m+24(FP)
	VXORPS       X3, X3, X3
	VUCOMISS     X10, X0
	JEQ          mw2_done
	VBROADCASTSS X0, Y2         // m
	VMOVUPS      mwlo<>(SB), Y15
	VMOVUPS      mwlog2e<>(SB), Y11
	VMOVUPS      mwln2hi<>(SB), Y12
	VMOVUPS      mwln2lo<>(SB), Y13
	VMOVUPS      mwone<>(SB), Y14
	MOVL         $127, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10       // exponent bias
	MOVQ         SI, R8
	MOVQ         DI, R9
	MOVQ         n+16(FP), R10

mw2_exp:
	MASK8
	VMASKMOVPS   (R8), Y9, Y4
	VSUBPS       Y2, Y4, Y4     // x = l - m <= 0, or NaN
	VMAXPS       Y15, Y4, Y4    // clamp at -150; NaN gives -150 too
	EXPR(VROUNDPS, Y4, Y5, Y6, Y11, Y12, Y13)
	EXPP(mwc7<>(SB), mwc6<>(SB), mwc5<>(SB), mwc4<>(SB), mwc3<>(SB), mwc2<>(SB), Y14, Y6, Y7)
	VCVTPS2DQ    Y5, Y5
	VPSRAD       $1, Y5, Y8     // k1
	VPSUBD       Y8, Y5, Y5     // k - k1
	VPADDD       Y10, Y8, Y8
	VPSLLD       $23, Y8, Y8
	VPADDD       Y10, Y5, Y5
	VPSLLD       $23, Y5, Y5
	VMULPS       Y8, Y7, Y7     // exact
	VMULPS       Y5, Y7, Y7     // one rounding
	VANDPS       Y9, Y7, Y7     // 0 in lanes beyond n
	VADDPS       Y7, Y3, Y3
	VMASKMOVPS   Y7, Y9, (R9)
	ADDQ         $32, R8
	ADDQ         $32, R9
	SUBQ         $8, R10
	JG           mw2_exp
	HRED8(VADDPS, Y3, X3)
	VDIVSS       X3, X14, X4    // 1/s
	VBROADCASTSS X4, Y4
	MOVQ         DI, R9
	MOVQ         n+16(FP), R10

mw2_norm:
	MASK8
	VMASKMOVPS   (R9), Y9, Y5
	VMULPS       Y4, Y5, Y5
	VMASKMOVPS   Y5, Y9, (R9)
	ADDQ         $32, R9
	SUBQ         $8, R10
	JG           mw2_norm

mw2_done:
	VMOVSS       X3, s+28(FP)
	VZEROUPPER
	RET
