//go:build amd64 && !purego

#include "textflag.h"

// func dot4AVX2(a, b0, b1, b2, b3 *float32, n int, out *[4]float32)
// out[j] = sum_c a[c]*bj[c], n a multiple of 16. Two accumulators per
// output (even and odd 8-column chunks), summed at the end.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-56
	MOVQ a+0(FP), SI
	MOVQ b0+8(FP), R8
	MOVQ b1+16(FP), R9
	MOVQ b2+24(FP), R10
	MOVQ b3+32(FP), R11
	MOVQ n+40(FP), CX
	MOVQ out+48(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	XORQ AX, AX

dotloop:
	CMPQ AX, CX
	JGE  dotdone
	VMOVUPS     (SI)(AX*4), Y4
	VMOVUPS     32(SI)(AX*4), Y9
	VFMADD231PS (R8)(AX*4), Y4, Y0
	VFMADD231PS (R9)(AX*4), Y4, Y1
	VFMADD231PS (R10)(AX*4), Y4, Y2
	VFMADD231PS (R11)(AX*4), Y4, Y3
	VFMADD231PS 32(R8)(AX*4), Y9, Y5
	VFMADD231PS 32(R9)(AX*4), Y9, Y6
	VFMADD231PS 32(R10)(AX*4), Y9, Y7
	VFMADD231PS 32(R11)(AX*4), Y9, Y8
	ADDQ        $16, AX
	JMP         dotloop

dotdone:
	VADDPS       Y5, Y0, Y0
	VADDPS       Y6, Y1, Y1
	VADDPS       Y7, Y2, Y2
	VADDPS       Y8, Y3, Y3
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DI)
	VZEROUPPER
	RET

// func dot2x4AVX2(a0, a1, b0, b1, b2, b3 *float32, n int, out *[8]float32)
// out[4*i+j] = sum_c ai[c]*bj[c], n a multiple of 8: two rows against four
// keys, each key chunk loaded once for both rows. One accumulator per
// output (eight independent chains).
TEXT ·dot2x4AVX2(SB), NOSPLIT, $0-64
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), DX
	MOVQ b0+16(FP), R8
	MOVQ b1+24(FP), R9
	MOVQ b2+32(FP), R10
	MOVQ b3+40(FP), R11
	MOVQ n+48(FP), CX
	MOVQ out+56(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ   AX, AX

d24loop:
	CMPQ        AX, CX
	JGE         d24done
	VMOVUPS     (SI)(AX*4), Y8
	VMOVUPS     (DX)(AX*4), Y9
	VMOVUPS     (R8)(AX*4), Y10
	VMOVUPS     (R9)(AX*4), Y11
	VMOVUPS     (R10)(AX*4), Y12
	VMOVUPS     (R11)(AX*4), Y13
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y10, Y9, Y4
	VFMADD231PS Y11, Y9, Y5
	VFMADD231PS Y12, Y9, Y6
	VFMADD231PS Y13, Y9, Y7
	ADDQ        $8, AX
	JMP         d24loop

d24done:
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DI)
	VHADDPS      Y5, Y4, Y4
	VHADDPS      Y7, Y6, Y6
	VHADDPS      Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VMOVUPS      X4, 16(DI)
	VZEROUPPER
	RET

// Polynomial coefficients of expSubAVX2 (those of exp32), eight lanes each.
#define VEC8(name, bits) \
	DATA name<>+0(SB)/4, $bits \
	DATA name<>+4(SB)/4, $bits \
	DATA name<>+8(SB)/4, $bits \
	DATA name<>+12(SB)/4, $bits \
	DATA name<>+16(SB)/4, $bits \
	DATA name<>+20(SB)/4, $bits \
	DATA name<>+24(SB)/4, $bits \
	DATA name<>+28(SB)/4, $bits \
	GLOBL name<>(SB), RODATA|NOPTR, $32

VEC8(expc2, 0x3f000000)
VEC8(expc3, 0x3e2aaaab)
VEC8(expc4, 0x3d2aaaab)
VEC8(expc5, 0x3c088889)
VEC8(expc6, 0x3ab60b61)
VEC8(expc7, 0x39500d01)

// func expSubAVX2(s *float32, n int, sub, scale float32)
// s[i] = e^(scale*s[i] - sub) for i < n, n a multiple of 8 (the argument
// fused: one rounding; with scale = 1 it is s[i] - sub exactly): exp32's
// reduction x = k ln2 + r (k rounded to nearest even) and degree-7
// polynomial, with FMAs. x < -87 (results below 2^-125) gives 0, x is
// clamped to 88 above (the callers pass x <= 0), NaN stays NaN.
TEXT ·expSubAVX2(SB), NOSPLIT, $0-24
	MOVQ         s+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS sub+16(FP), Y15
	VBROADCASTSS scale+20(FP), Y6
	MOVL         $0x3fb8aa3b, AX // log2(e)
	VMOVD        AX, X14
	VBROADCASTSS X14, Y14
	MOVL         $0x3f318000, AX // ln2 high part
	VMOVD        AX, X13
	VBROADCASTSS X13, Y13
	MOVL         $0xb95e8083, AX // ln2 low part
	VMOVD        AX, X12
	VBROADCASTSS X12, Y12
	MOVL         $0x3f800000, AX // 1
	VMOVD        AX, X11
	VBROADCASTSS X11, Y11
	MOVL         $0xc2ae0000, AX // -87
	VMOVD        AX, X10
	VBROADCASTSS X10, Y10
	MOVL         $0x42b00000, AX // 88
	VMOVD        AX, X9
	VBROADCASTSS X9, Y9
	MOVL         $127, AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8
	XORQ         AX, AX

exploop:
	CMPQ         AX, CX
	JGE          expdone
	VMOVUPS      (DI)(AX*4), Y0
	VFMSUB213PS  Y15, Y6, Y0            // x = scale*s - sub
	VCMPPS       $0x1d, Y10, Y0, Y1     // x >= -87 (false for NaN)
	VCMPPS       $3, Y0, Y0, Y7         // x is NaN
	VMINPS       Y9, Y0, Y0
	VMAXPS       Y10, Y0, Y0
	VMULPS       Y14, Y0, Y2
	VROUNDPS     $0, Y2, Y2             // k
	VMOVAPS      Y0, Y3
	VFNMADD231PS Y13, Y2, Y3
	VFNMADD231PS Y12, Y2, Y3            // r = x - k ln2
	VMOVUPS      expc7<>(SB), Y4
	VFMADD213PS  expc6<>(SB), Y3, Y4
	VFMADD213PS  expc5<>(SB), Y3, Y4
	VFMADD213PS  expc4<>(SB), Y3, Y4
	VFMADD213PS  expc3<>(SB), Y3, Y4
	VFMADD213PS  expc2<>(SB), Y3, Y4
	VFMADD213PS  Y11, Y3, Y4
	VFMADD213PS  Y11, Y3, Y4            // p(r)
	VCVTPS2DQ    Y2, Y5
	VPADDD       Y8, Y5, Y5
	VPSLLD       $23, Y5, Y5            // 2^k
	VMULPS       Y5, Y4, Y4
	VANDPS       Y1, Y4, Y4
	VORPS        Y7, Y4, Y4
	VMOVUPS      Y4, (DI)(AX*4)
	ADDQ         $8, AX
	JMP          exploop

expdone:
	VZEROUPPER
	RET

// func dsAVX2(dp, s *float32, n int, scale, dl float32)
// dp[i] = (scale * s[i]) * (dp[i] - dl) for i < n, n a multiple of 8: the
// operations and rounding of the Go loop in gradProbs (no FMA).
TEXT ·dsAVX2(SB), NOSPLIT, $0-32
	MOVQ         dp+0(FP), DI
	MOVQ         s+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y1
	VBROADCASTSS dl+28(FP), Y2
	XORQ         AX, AX

dsloop:
	CMPQ    AX, CX
	JGE     dsdone
	VMOVUPS (DI)(AX*4), Y3
	VSUBPS  Y2, Y3, Y3              // dp - dl
	VMULPS  (SI)(AX*4), Y1, Y4      // scale * s
	VMULPS  Y3, Y4, Y4
	VMOVUPS Y4, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     dsloop

dsdone:
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
// The largest of x[:n] (n a multiple of 8; -Inf for n = 0), NaN when any
// element is NaN, like Go's max (VMAXPS alone would drop NaNs, so
// unordered lanes are flagged separately).
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0xff800000, AX // -Inf
	VMOVD        AX, X0
	VBROADCASTSS X0, Y0          // running max
	VXORPS       Y2, Y2, Y2      // NaN flags
	XORQ         AX, AX

maxloop:
	CMPQ    AX, CX
	JGE     maxdone
	VMOVUPS (SI)(AX*4), Y1
	VCMPPS  $3, Y1, Y1, Y3       // unordered: NaN lanes
	VORPS   Y3, Y2, Y2
	VMAXPS  Y1, Y0, Y0
	ADDQ    $8, AX
	JMP     maxloop

maxdone:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVMSKPS    Y2, AX
	TESTL        AX, AX
	JZ           maxret
	MOVL         $0x7fc00000, AX // NaN
	VMOVD        AX, X0

maxret:
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func sumAVX2(x *float32, n int) float32
// sum of x[:n] (n a multiple of 8) in eight lane sums, added pairwise at
// the end.
TEXT ·sumAVX2(SB), NOSPLIT, $0-20
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y0, Y0, Y0
	XORQ   AX, AX

sumloop:
	CMPQ    AX, CX
	JGE     sumdone
	VADDPS  (SI)(AX*4), Y0, Y0
	ADDQ    $8, AX
	JMP     sumloop

sumdone:
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, f float32)
// x[i] *= f for i < n (n a multiple of 8).
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS f+16(FP), Y1
	XORQ         AX, AX

scaleloop:
	CMPQ    AX, CX
	JGE     scaledone
	VMULPS  (SI)(AX*4), Y1, Y0
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ    $8, AX
	JMP     scaleloop

scaledone:
	VZEROUPPER
	RET
