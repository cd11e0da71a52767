//go:build amd64 && !purego

#include "textflag.h"

// WIDEN_BF16_32 / WIDEN_BF16_16 widen 32 / 16 BF16 words at (SI) to
// float32 at (DI) (Y0-Y3 / Y0-Y1 clobbered).
#define WIDEN_BF16_32 \
	VPMOVZXWD (SI), Y0 \
	VPMOVZXWD 16(SI), Y1 \
	VPMOVZXWD 32(SI), Y2 \
	VPMOVZXWD 48(SI), Y3 \
	VPSLLD $16, Y0, Y0 \
	VPSLLD $16, Y1, Y1 \
	VPSLLD $16, Y2, Y2 \
	VPSLLD $16, Y3, Y3 \
	VMOVUPS Y0, (DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI)

#define WIDEN_BF16_16 \
	VPMOVZXWD (SI), Y0 \
	VPMOVZXWD 16(SI), Y1 \
	VPSLLD $16, Y0, Y0 \
	VPSLLD $16, Y1, Y1 \
	VMOVUPS Y0, (DI) \
	VMOVUPS Y1, 32(DI)

// BCASTD broadcasts the 32-bit constant imm to every dword of y (x is its
// low half); AX is clobbered.
#define BCASTD(imm, x, y) \
	MOVL $imm, AX \
	VMOVD AX, x \
	VPBROADCASTD x, y

// E4M3X32_ARGS, E4M3X32_WIDEN, E4M3X32_STORE and E4M3X32_RET are the
// parts of the two 32-per-iteration e4m3 kernels: WIDEN leaves the float32
// values of 32 bytes at SI, times 2^-8, in Y0, Y2, Y1 and Y4 (in memory
// order) and folds the bytes into the NaN check; STORE writes them to DI
// and advances; RET sets ZF when no byte was a NaN.
#define E4M3X32_ARGS \
	MOVQ dst+0(FP), DI \
	MOVQ src+8(FP), SI \
	MOVQ n+16(FP), CX \
	BCASTD(0xbfffbfff, X3, Y3) \
	BCASTD(0x43800000, X5, Y5) \
	BCASTD(0x80808080, X6, Y6) \
	VPXOR Y7, Y7, Y7

#define E4M3X32_WIDEN \
	VPOR         (SI), Y6, Y8 \
	VPMAXUB      Y8, Y7, Y7 \
	VPMOVSXBW    (SI), Y0 \
	VPMOVSXBW    16(SI), Y1 \
	VPSLLW       $7, Y0, Y0 \
	VPSLLW       $7, Y1, Y1 \
	VPAND        Y3, Y0, Y0 \
	VPAND        Y3, Y1, Y1 \
	VEXTRACTI128 $1, Y0, X2 \
	VEXTRACTI128 $1, Y1, X4 \
	VCVTPH2PS    X0, Y0 \
	VCVTPH2PS    X2, Y2 \
	VCVTPH2PS    X1, Y1 \
	VCVTPH2PS    X4, Y4

#define E4M3X32_STORE \
	VMOVUPS Y0, (DI) \
	VMOVUPS Y2, 32(DI) \
	VMOVUPS Y1, 64(DI) \
	VMOVUPS Y4, 96(DI) \
	ADDQ    $32, SI \
	ADDQ    $128, DI \
	SUBQ    $32, CX

#define E4M3X32_RET \
	VPCMPEQB  Y8, Y8, Y8 \
	VPCMPEQB  Y8, Y7, Y7 \
	VPMOVMSKB Y7, AX \
	TESTL     AX, AX

// The finite-magnitude maximum of maxFiniteBitsAVX2:
// masks in Y5 (0x7fffffff) and Y6 (+Inf bits, the first non-finite
// magnitude), running maxima in Y0 and Y1; FINMAX_STEP folds the magnitude
// bits in Y2 and Y3 (Y4 scratch), FINMAX_RET reduces Y0, Y1 into ret.
#define FINMAX_INIT \
	MOVL $0x7fffffff, AX; VMOVD AX, X5; VPBROADCASTD X5, Y5; \
	MOVL $0x7f800000, AX; VMOVD AX, X6; VPBROADCASTD X6, Y6; \
	VPXOR Y0, Y0, Y0; VPXOR Y1, Y1, Y1
#define FINMAX_STEP \
	VPCMPGTD Y2, Y6, Y4; VPAND Y4, Y2, Y2; \
	VPCMPGTD Y3, Y6, Y4; VPAND Y4, Y3, Y3; \
	VPMAXUD Y2, Y0, Y0; VPMAXUD Y3, Y1, Y1
#define FINMAX_RET(ret) \
	VPMAXUD Y1, Y0, Y0; VEXTRACTI128 $1, Y0, X1; VPMAXUD X1, X0, X0; \
	VPSHUFD $0x4e, X0, X1; VPMAXUD X1, X0, X0; \
	VPSHUFD $0xb1, X0, X1; VPMAXUD X1, X0, X0; \
	VMOVD X0, AX; MOVL AX, ret

// AVX2 (+FMA, F16C) versions of the epilogue and staging kernels, for CPUs
// without AVX-512: same results as the AVX-512 kernels of epilogue_amd64.s
// (bit for bit; the axpys fuse the multiply-add like them). n is a multiple
// of 16 in every function: two ymm vectors of float32 per iteration.

// The slot sums of sumSlotsBF16AVX2 and sumSlotsF32AVX2, as in
// epilogue_amd64.s with 64 columns per chunk in Y0-Y7 and w[s] in Y8.
#define SUMSLOTS_ARGS \
	MOVQ acc+0(FP), DI; MOVQ src+8(FP), SI; MOVQ stride+16(FP), R8; \
	MOVQ w+24(FP), BX; MOVQ ns+32(FP), R9; MOVQ n+40(FP), CX
#define SUMSLOTS_CHUNK \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7; \
	MOVQ SI, AX; XORQ DX, DX
#define SUMSLOTS_W \
	MOVL (BX)(DX*4), R10; VBROADCASTSS (BX)(DX*4), Y8
#define SUMSLOTS_STORE \
	VMOVUPS Y0, (DI); VMOVUPS Y1, 32(DI); VMOVUPS Y2, 64(DI); VMOVUPS Y3, 96(DI); \
	VMOVUPS Y4, 128(DI); VMOVUPS Y5, 160(DI); VMOVUPS Y6, 192(DI); VMOVUPS Y7, 224(DI); \
	ADDQ $256, DI
// BF16_FMA4 widens the 32 bf16 at off(AX) and adds w times them to the
// four accumulators a0..a3 (Y9-Y12 scratch).
#define BF16_FMA4(off, a0, a1, a2, a3) \
	VPMOVZXWD off(AX), Y9; VPMOVZXWD off+16(AX), Y10; \
	VPMOVZXWD off+32(AX), Y11; VPMOVZXWD off+48(AX), Y12; \
	VPSLLD $16, Y9, Y9; VPSLLD $16, Y10, Y10; VPSLLD $16, Y11, Y11; VPSLLD $16, Y12, Y12; \
	VFMADD231PS Y8, Y9, a0; VFMADD231PS Y8, Y10, a1; \
	VFMADD231PS Y8, Y11, a2; VFMADD231PS Y8, Y12, a3

// func storeRowsBF16AVX2(dst *lowp.BFloat16, idx *int32, src *float32, scales *float32, rows, n, stream int)
// storeRowsBF16AVX512 for AVX2 (same contract; streamed rows start on a
// 32-byte boundary): x = src * scales[r],
// rounded to nearest even on the float32 bits: x + 0x7fff + ((x >> 16) &
// 1), keeping the high half; NaN lanes first become (x & sign) |
// 0x7fc00000, which rounds to the canonical quiet NaN; a zero scale writes
// zeros. 16 values per iteration.
TEXT ·storeRowsBF16AVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), R8
	MOVQ idx+8(FP), R9
	MOVQ src+16(FP), SI
	MOVQ scales+24(FP), R10
	MOVQ rows+32(FP), R11
	MOVQ n+40(FP), R12
	MOVQ stream+48(FP), R14
	LEAQ (R12)(R12*1), R13       // bytes per dst row
	BCASTD(0x7fff, X1, Y1)          // rounding bias
	MOVL $1, AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2          // lsb mask
	BCASTD(0x80000000, X5, Y5)          // sign mask
	BCASTD(0x7fc00000, X9, Y9)          // float32 quiet NaN
	VPXOR Y10, Y10, Y10
	TESTQ R11, R11
	JZ   sbf_done
sbf_row:
	MOVLQSX (R9), AX
	IMULQ R13, AX
	LEAQ (R8)(AX*1), DI          // dst row idx[r]
	XORQ BX, BX                  // BX != 0: this row's stores stream
	TESTQ $31, DI
	CMOVQEQ R14, BX
	MOVQ R12, CX
	MOVL (R10), AX
	TESTL $0x7fffffff, AX
	JZ   sbf_zero
	VBROADCASTSS (R10), Y11      // scales[r]
sbf_loop:
	VMULPS    (SI), Y11, Y0
	VMULPS    32(SI), Y11, Y3
	VCMPPS    $3, Y0, Y0, Y6     // unordered: NaN lanes
	VCMPPS    $3, Y3, Y3, Y7
	VANDPS    Y5, Y0, Y8
	VORPS     Y9, Y8, Y8         // (x & sign) | qNaN
	VBLENDVPS Y6, Y8, Y0, Y0
	VANDPS    Y5, Y3, Y8
	VORPS     Y9, Y8, Y8
	VBLENDVPS Y7, Y8, Y3, Y3
	VPSRLD    $16, Y0, Y6
	VPSRLD    $16, Y3, Y7
	VPAND     Y2, Y6, Y6         // (x >> 16) & 1
	VPAND     Y2, Y7, Y7
	VPADDD    Y1, Y0, Y0         // + 0x7fff
	VPADDD    Y1, Y3, Y3
	VPADDD    Y6, Y0, Y0
	VPADDD    Y7, Y3, Y3
	VPSRLD    $16, Y0, Y0        // rounded high halves
	VPSRLD    $16, Y3, Y3
	VPACKUSDW Y3, Y0, Y0         // per 128-bit lane: 4 of Y0, 4 of Y3
	VPERMQ    $0xd8, Y0, Y0      // lanes back in order
	TESTQ     BX, BX
	JNZ       sbf_nt
	VMOVDQU   Y0, (DI)
	JMP       sbf_adv
sbf_nt:
	VMOVNTDQ  Y0, (DI)
sbf_adv:
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JNZ       sbf_loop
	JMP       sbf_next
sbf_zero:
	LEAQ      (SI)(R12*4), SI    // skip the source row
zero_loop:
	VMOVDQU   Y10, (DI)
	ADDQ      $32, DI
	SUBQ      $16, CX
	JNZ       zero_loop
sbf_next:
	ADDQ      $4, R9
	ADDQ      $4, R10
	DECQ      R11
	JNZ       sbf_row
sbf_done:
	TESTQ     R14, R14
	JZ        sbf_ret
	SFENCE                       // order the streamed stores before later ones
sbf_ret:
	VZEROUPPER
	RET

// func scaleF32AVX2(dst *float32, src *float32, n int, scale float32)
TEXT ·scaleF32AVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y1
scf_loop:
	VMULPS  (SI), Y1, Y0
	VMULPS  32(SI), Y1, Y2
	VMOVUPS Y0, (DI)
	VMOVUPS Y2, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     scf_loop
	VZEROUPPER
	RET

// func axpyBF16AVX2(acc *float32, src *lowp.BFloat16, n int, w float32)
TEXT ·axpyBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS w+24(FP), Y1
axb_loop:
	VPMOVZXWD   (SI), Y0         // 8 x uint16 -> uint32
	VPMOVZXWD   16(SI), Y3
	VPSLLD      $16, Y0, Y0      // bf16 bits -> float32 bits
	VPSLLD      $16, Y3, Y3
	VMOVUPS     (DI), Y2
	VMOVUPS     32(DI), Y4
	VFMADD231PS Y1, Y0, Y2       // acc += src * w
	VFMADD231PS Y1, Y3, Y4
	VMOVUPS     Y2, (DI)
	VMOVUPS     Y4, 32(DI)
	ADDQ        $32, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         axb_loop
	VZEROUPPER
	RET

// func axpyF32AVX2(acc *float32, src *float32, n int, w float32)
TEXT ·axpyF32AVX2(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS w+24(FP), Y1
axf_loop:
	VMOVUPS     (SI), Y0
	VMOVUPS     32(SI), Y3
	VMOVUPS     (DI), Y2
	VMOVUPS     32(DI), Y4
	VFMADD231PS Y1, Y0, Y2
	VFMADD231PS Y1, Y3, Y4
	VMOVUPS     Y2, (DI)
	VMOVUPS     Y4, 32(DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         axf_loop
	VZEROUPPER
	RET

// func decodeBF16AVX2(dst *float32, src *lowp.BFloat16, n int)
// 32 values per iteration, then a last group of 16.
TEXT ·decodeBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $32
	JLT  dbx_16
dbx_loop:
	WIDEN_BF16_32
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	CMPQ      CX, $32
	JGE       dbx_loop
dbx_16:
	TESTQ     CX, CX
	JZ        dbx_done
	WIDEN_BF16_16
dbx_done:
	VZEROUPPER
	RET

// func decodeBF16MaxAVX2(dst *float32, src *lowp.BFloat16, n int) uint32
// decodeBF16AVX2 that also returns the largest |x| bit pattern among the
// finite values it wrote (maxFiniteBitsAVX2 of dst), found on the BF16
// words: |x| + 0x80 is negative as a signed word exactly for Inf and NaN
// (|x| >= 0x7f80), so a signed maximum skips them; the word, less 0x80,
// shifted left by 16 is the float32 bit pattern.
TEXT ·decodeBF16MaxAVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BCASTD(0x7fff7fff, X4, Y4)          // |x| of 16 words
	BCASTD(0x00800080, X5, Y5)          // + 0x80: Inf and NaN become negative words
	VMOVDQA Y5, Y6               // running signed maxima (0x80: |x| = 0)
	VMOVDQA Y5, Y7
	CMPQ CX, $32
	JLT  dbmx_16
dbmx_loop:
	VPAND     (SI), Y4, Y8
	VPAND     32(SI), Y4, Y9
	VPADDW    Y5, Y8, Y8
	VPADDW    Y5, Y9, Y9
	VPMAXSW   Y8, Y6, Y6
	VPMAXSW   Y9, Y7, Y7
	WIDEN_BF16_32
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	CMPQ      CX, $32
	JGE       dbmx_loop
dbmx_16:
	TESTQ     CX, CX
	JZ        dbmx_red
	VPAND     (SI), Y4, Y8
	VPADDW    Y5, Y8, Y8
	VPMAXSW   Y8, Y6, Y6
	WIDEN_BF16_16
dbmx_red:
	VPMAXSW      Y7, Y6, Y6
	VEXTRACTI128 $1, Y6, X7
	VPMAXSW      X7, X6, X6
	VPSHUFD      $0x4e, X6, X7
	VPMAXSW      X7, X6, X6
	VPSHUFD      $0xb1, X6, X7
	VPMAXSW      X7, X6, X6
	VPSRLD       $16, X6, X7
	VPMAXSW      X7, X6, X6
	VMOVD        X6, AX
	SUBL         $0x80, AX
	SHLL         $16, AX         // float32 bits of the largest finite |x|
	MOVL         AX, ret+24(FP)
	VZEROUPPER
	RET

// func decodeE4M3AVX2(dst *float32, src *lowp.Float8E4M3FN, n int)
// The AVX-512 kernel's method (decodeE4M3x32AVX512) on 16 values: float16
// bits of value * 2^-8 from the sign-extended byte (<< 7, bit 14 cleared),
// NaN (magnitude bits all ones) moved to the float16 quiet NaN by adding
// 0x3e80, VCVTPH2PS (F16C), times 256.
TEXT ·decodeE4M3AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BCASTD(0xbfffbfff, X3, Y3)          // clears bit 14
	BCASTD(0x3f803f80, X4, Y4)          // magnitude bits 13..7
	BCASTD(0x3e803e80, X6, Y6)          // NaN fix-up
	BCASTD(0x43800000, X7, Y7)          // 256.0
de_loop:
	VPMOVSXBW    (SI), Y0        // 16 bytes -> sign-extended words
	VPSLLW       $7, Y0, Y0
	VPAND        Y3, Y0, Y0      // float16 bits of value * 2^-8
	VPAND        Y4, Y0, Y1
	VPCMPEQW     Y4, Y1, Y1      // NaN lanes
	VPAND        Y6, Y1, Y1
	VPADDW       Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X2
	VCVTPH2PS    X0, Y0
	VCVTPH2PS    X2, Y2
	VMULPS       Y7, Y0, Y0
	VMULPS       Y7, Y2, Y2
	VMOVUPS      Y0, (DI)
	VMOVUPS      Y2, 32(DI)
	ADDQ         $16, SI
	ADDQ         $64, DI
	SUBQ         $16, CX
	JNZ          de_loop
	VZEROUPPER
	RET

// func decodeE4M3x32AVX2(dst *float32, src *lowp.Float8E4M3FN, n int) bool
// decodeE4M3AVX2 on 32 values per iteration without its NaN step: instead
// of fixing NaN lanes (4 instructions per 16 values), it keeps the unsigned
// maximum of every source byte OR 0x80, which is 0xff exactly when some
// value was a NaN (magnitude bits all ones), and then reports false; dst
// is written either way, with 480 in the NaN lanes. n is a multiple of 32.
TEXT ·decodeE4M3x32AVX2(SB), NOSPLIT, $0-25
	E4M3X32_ARGS
dc_loop:
	E4M3X32_WIDEN
	VMULPS Y5, Y0, Y0
	VMULPS Y5, Y2, Y2
	VMULPS Y5, Y1, Y1
	VMULPS Y5, Y4, Y4
	E4M3X32_STORE
	JNZ dc_loop
	E4M3X32_RET
	SETEQ ret+24(FP)
	VZEROUPPER
	RET

// func decodeE4M3x32FoldAVX2(dst *float32, src *lowp.Float8E4M3FN, n int) bool
// decodeE4M3x32AVX2 without its multiply by 256: dst holds value * 2^-8
// (exact: e4m3 magnitudes times 2^-8 are normal float32 numbers), 1.875 in
// the NaN lanes.
TEXT ·decodeE4M3x32FoldAVX2(SB), NOSPLIT, $0-25
	E4M3X32_ARGS
df_loop:
	E4M3X32_WIDEN
	E4M3X32_STORE
	JNZ df_loop
	E4M3X32_RET
	SETEQ ret+24(FP)
	VZEROUPPER
	RET

// func maxFiniteBitsAVX2(v *float32, n int) uint32
// The largest |x| bit pattern among the finite values (0 when none): |x|
// bits are non-negative int32, finite exactly when below 0x7f800000.
TEXT ·maxFiniteBitsAVX2(SB), NOSPLIT, $0-20
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	FINMAX_INIT
mf_loop:
	VPAND    (SI), Y5, Y2
	VPAND    32(SI), Y5, Y3
	FINMAX_STEP
	ADDQ     $64, SI
	SUBQ     $16, CX
	JNZ      mf_loop
	FINMAX_RET(ret+16(FP))
	VZEROUPPER
	RET


// func sumSlotsBF16AVX2(acc *float32, src *lowp.BFloat16, stride uintptr, w *float32, ns int, n int)
TEXT ·sumSlotsBF16AVX2(SB), NOSPLIT, $0-48
	SUMSLOTS_ARGS
sumb_chunk:
	SUMSLOTS_CHUNK
	TESTQ R9, R9
	JZ    sumb_store
sumb_slot:
	SUMSLOTS_W
	TESTL $0x7fffffff, R10
	JZ    sumb_next               // w[s] == 0: slot skipped
	BF16_FMA4(0, Y0, Y1, Y2, Y3)
	BF16_FMA4(64, Y4, Y5, Y6, Y7)
sumb_next:
	ADDQ  R8, AX
	INCQ  DX
	CMPQ  DX, R9
	JLT   sumb_slot
sumb_store:
	SUMSLOTS_STORE
	ADDQ  $128, SI
	SUBQ  $64, CX
	JNZ   sumb_chunk
	VZEROUPPER
	RET

// func sumSlotsF32AVX2(acc *float32, src *float32, stride uintptr, w *float32, ns int, n int)
TEXT ·sumSlotsF32AVX2(SB), NOSPLIT, $0-48
	SUMSLOTS_ARGS
sumf_chunk:
	SUMSLOTS_CHUNK
	TESTQ R9, R9
	JZ    sumf_store
sumf_slot:
	SUMSLOTS_W
	TESTL $0x7fffffff, R10
	JZ    sumf_next
	VFMADD231PS (AX), Y8, Y0
	VFMADD231PS 32(AX), Y8, Y1
	VFMADD231PS 64(AX), Y8, Y2
	VFMADD231PS 96(AX), Y8, Y3
	VFMADD231PS 128(AX), Y8, Y4
	VFMADD231PS 160(AX), Y8, Y5
	VFMADD231PS 192(AX), Y8, Y6
	VFMADD231PS 224(AX), Y8, Y7
sumf_next:
	ADDQ  R8, AX
	INCQ  DX
	CMPQ  DX, R9
	JLT   sumf_slot
sumf_store:
	SUMSLOTS_STORE
	ADDQ  $256, SI
	SUBQ  $64, CX
	JNZ   sumf_chunk
	VZEROUPPER
	RET
