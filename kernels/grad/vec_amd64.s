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

// func axpy4AVX2(y, x0, x1, x2, x3 *float32, n int, a *[4]float32)
// y[c] += a[0]*x0[c] + a[1]*x1[c] + a[2]*x2[c] + a[3]*x3[c], n a multiple
// of 8.
TEXT ·axpy4AVX2(SB), NOSPLIT, $0-56
	MOVQ         y+0(FP), DI
	MOVQ         x0+8(FP), R8
	MOVQ         x1+16(FP), R9
	MOVQ         x2+24(FP), R10
	MOVQ         x3+32(FP), R11
	MOVQ         n+40(FP), CX
	MOVQ         a+48(FP), SI
	VBROADCASTSS (SI), Y0
	VBROADCASTSS 4(SI), Y1
	VBROADCASTSS 8(SI), Y2
	VBROADCASTSS 12(SI), Y3
	XORQ         AX, AX

axpyloop:
	CMPQ        AX, CX
	JGE         axpydone
	VMOVUPS     (DI)(AX*4), Y4
	VFMADD231PS (R8)(AX*4), Y0, Y4
	VFMADD231PS (R9)(AX*4), Y1, Y4
	VFMADD231PS (R10)(AX*4), Y2, Y4
	VFMADD231PS (R11)(AX*4), Y3, Y4
	VMOVUPS     Y4, (DI)(AX*4)
	ADDQ        $8, AX
	JMP         axpyloop

axpydone:
	VZEROUPPER
	RET
