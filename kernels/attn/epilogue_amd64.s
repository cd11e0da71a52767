//go:build amd64 && !purego

#include "textflag.h"

// The finite-magnitude maximum of maxFiniteBitsAVX512 and
// decodeBF16MaxAVX512: masks in Z1 (0x7fffffff) and Z2 (+Inf bits, the
// first non-finite magnitude), the running maximum in Z0; FINMAX_STEP
// folds the float32 bits in x (Z3 scratch), FINMAX_RET reduces Z0 into ret.
#define FINMAX_INIT \
	MOVL $0x7fffffff, AX; VPBROADCASTD AX, Z1; \
	MOVL $0x7f800000, AX; VPBROADCASTD AX, Z2; \
	VPXORD Z0, Z0, Z0
#define FINMAX_STEP(x) \
	VPANDD x, Z1, Z3; VPCMPUD $1, Z2, Z3, K1; VPMAXUD Z3, Z0, K1, Z0
#define FINMAX_RET(ret) \
	VEXTRACTI32X8 $1, Z0, Y3; VPMAXUD Y3, Y0, Y0; \
	VEXTRACTI128 $1, Y0, X3; VPMAXUD X3, X0, X0; \
	VPSHUFD $0x4e, X0, X3; VPMAXUD X3, X0, X0; \
	VPSHUFD $0xb1, X0, X3; VPMAXUD X3, X0, X0; \
	VMOVD X0, AX; MOVL AX, ret

// The parts of sumSlotsBF16AVX512 and sumSlotsF32AVX512 that do not depend
// on the row dtype (labels cannot live in macros): SUMSLOTS_ARGS loads the
// arguments (DI acc, SI slot 0 of the chunk, R8 stride, BX w, R9 ns, CX
// n); SUMSLOTS_CHUNK zeroes the 64-column accumulators Z0-Z3 and points AX
// at slot 0 (DX = s = 0); SUMSLOTS_W loads w[s] into R10 (its magnitude
// bits are tested by the caller) and broadcasts it into Z4; SUMSLOTS_STORE
// writes Z0-Z3 to acc and advances it.
#define SUMSLOTS_ARGS \
	MOVQ acc+0(FP), DI; MOVQ src+8(FP), SI; MOVQ stride+16(FP), R8; \
	MOVQ w+24(FP), BX; MOVQ ns+32(FP), R9; MOVQ n+40(FP), CX
#define SUMSLOTS_CHUNK \
	VXORPS Z0, Z0, Z0; VXORPS Z1, Z1, Z1; VXORPS Z2, Z2, Z2; VXORPS Z3, Z3, Z3; \
	MOVQ SI, AX; XORQ DX, DX
#define SUMSLOTS_W \
	MOVL (BX)(DX*4), R10; VBROADCASTSS (BX)(DX*4), Z4
#define SUMSLOTS_STORE \
	VMOVUPS Z0, (DI); VMOVUPS Z1, 64(DI); VMOVUPS Z2, 128(DI); VMOVUPS Z3, 192(DI); \
	ADDQ $256, DI

// func storeRowsBF16AVX512(dst *lowp.BFloat16, idx *int32, src *float32, scales *float32, rows, n, stream int)
// For r < rows: dst row idx[r] (n values, n a multiple of 16) = src row r
// (n floats, rows contiguous) times scales[r], rounded to BF16; a zero
// scale (either sign) writes zeros. Multiplies by the scale, then rounds to
// nearest even on the float32 bits: x + 0x7fff + ((x >> 16) & 1), keeping
// the high half. NaN lanes become the canonical quiet NaN with the input's
// sign (0x7fc0 / 0xffc0), like lowp.BF16: they are first replaced by the
// float32 (x & sign) | 0x7fc00000, which the rounding maps to exactly that.
// 32 values per iteration: the high halves of two vectors are gathered into
// one by VPERMT2W (word 2j+1 -> j), then one 64-byte store; a last group of
// 16 goes through VPMOVDW. One call stores a whole tile's rows: the per-row
// call overhead was most of a row's cost. With stream != 0 the 64-byte
// stores of a row that starts on a 64-byte boundary are non-temporal
// (VMOVNTDQ, then SFENCE before returning).
TEXT ·storeRowsBF16AVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), R8
	MOVQ idx+8(FP), R9
	MOVQ src+16(FP), SI
	MOVQ scales+24(FP), R10
	MOVQ rows+32(FP), R11
	MOVQ n+40(FP), R12
	MOVQ stream+48(FP), R14
	LEAQ (R12)(R12*1), R13       // bytes per dst row
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z1          // rounding bias
	MOVL $1, AX
	VPBROADCASTD AX, Z2          // lsb mask
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z5          // sign mask
	MOVL $0x7fc00000, AX
	VPBROADCASTD AX, Z9          // float32 quiet NaN
	VMOVDQU16 bf16hi<>+0(SB), Z10 // VPERMT2W indices: high word of each dword
	VPXORD Z12, Z12, Z12
	TESTQ R11, R11
	JZ   store_done
store_row:
	MOVLQSX (R9), AX
	IMULQ R13, AX
	LEAQ (R8)(AX*1), DI          // dst row idx[r]
	XORQ BX, BX                  // BX != 0: this row's stores stream
	TESTQ $63, DI
	CMOVQEQ R14, BX
	MOVQ R12, CX
	MOVL (R10), AX
	TESTL $0x7fffffff, AX
	JZ   store_zero
	VPBROADCASTD AX, Z11         // scales[r]
	CMPQ CX, $32
	JLT  store_16
store_loop:
	VMULPS    (SI), Z11, Z0
	VMULPS    64(SI), Z11, Z3
	VFPCLASSPSZ $0x81, Z0, K1    // QNaN | SNaN
	VFPCLASSPSZ $0x81, Z3, K2
	VPTERNLOGD $0xea, Z9, Z5, K1, Z0 // NaN lanes: (x & sign) | qNaN
	VPTERNLOGD $0xea, Z9, Z5, K2, Z3
	VPSRLD    $16, Z0, Z6
	VPSRLD    $16, Z3, Z7
	VPANDD    Z2, Z6, Z6         // (x >> 16) & 1
	VPANDD    Z2, Z7, Z7
	VPADDD    Z1, Z0, Z0         // + 0x7fff
	VPADDD    Z1, Z3, Z3
	VPADDD    Z6, Z0, Z0         // rounded bits
	VPADDD    Z7, Z3, Z3
	VPERMT2W  Z3, Z10, Z0        // high halves of both, in order
	TESTQ     BX, BX
	JNZ       store_nt
	VMOVDQU64 Z0, (DI)
	JMP       store_adv
store_nt:
	VMOVNTDQ  Z0, (DI)
store_adv:
	ADDQ      $128, SI
	ADDQ      $64, DI
	SUBQ      $32, CX
	CMPQ      CX, $32
	JGE       store_loop
store_16:
	TESTQ     CX, CX
	JZ        store_next
	VMULPS    (SI), Z11, Z0
	VFPCLASSPSZ $0x81, Z0, K1
	VPTERNLOGD $0xea, Z9, Z5, K1, Z0
	VPSRLD    $16, Z0, Z6
	VPANDD    Z2, Z6, Z6
	VPADDD    Z1, Z0, Z0
	VPADDD    Z6, Z0, Z0
	VPSRLD    $16, Z0, Z0
	VPMOVDW   Z0, (DI)           // 16 x uint16
	ADDQ      $64, SI
	JMP       store_next
store_zero:
	LEAQ      (SI)(R12*4), SI    // skip the source row
zero_loop:
	CMPQ      CX, $32
	JLT       zero_16
	VMOVDQU64 Z12, (DI)
	ADDQ      $64, DI
	SUBQ      $32, CX
	JMP       zero_loop
zero_16:
	TESTQ     CX, CX
	JZ        store_next
	VMOVDQU   Y12, (DI)
store_next:
	ADDQ      $4, R9
	ADDQ      $4, R10
	DECQ      R11
	JNZ       store_row
store_done:
	TESTQ     R14, R14
	JZ        store_ret
	SFENCE                       // order the streamed stores before later ones
store_ret:
	VZEROUPPER
	RET

// bf16hi: word indices 2j+1 (j = 0..31) for VPERMT2W: the high half of
// dword j of the first table for j < 16, of dword j-16 of the second after.
DATA bf16hi<>+0(SB)/2, $1
DATA bf16hi<>+2(SB)/2, $3
DATA bf16hi<>+4(SB)/2, $5
DATA bf16hi<>+6(SB)/2, $7
DATA bf16hi<>+8(SB)/2, $9
DATA bf16hi<>+10(SB)/2, $11
DATA bf16hi<>+12(SB)/2, $13
DATA bf16hi<>+14(SB)/2, $15
DATA bf16hi<>+16(SB)/2, $17
DATA bf16hi<>+18(SB)/2, $19
DATA bf16hi<>+20(SB)/2, $21
DATA bf16hi<>+22(SB)/2, $23
DATA bf16hi<>+24(SB)/2, $25
DATA bf16hi<>+26(SB)/2, $27
DATA bf16hi<>+28(SB)/2, $29
DATA bf16hi<>+30(SB)/2, $31
DATA bf16hi<>+32(SB)/2, $33
DATA bf16hi<>+34(SB)/2, $35
DATA bf16hi<>+36(SB)/2, $37
DATA bf16hi<>+38(SB)/2, $39
DATA bf16hi<>+40(SB)/2, $41
DATA bf16hi<>+42(SB)/2, $43
DATA bf16hi<>+44(SB)/2, $45
DATA bf16hi<>+46(SB)/2, $47
DATA bf16hi<>+48(SB)/2, $49
DATA bf16hi<>+50(SB)/2, $51
DATA bf16hi<>+52(SB)/2, $53
DATA bf16hi<>+54(SB)/2, $55
DATA bf16hi<>+56(SB)/2, $57
DATA bf16hi<>+58(SB)/2, $59
DATA bf16hi<>+60(SB)/2, $61
DATA bf16hi<>+62(SB)/2, $63
GLOBL bf16hi<>(SB), RODATA|NOPTR, $64

// func axpyBF16AVX512(acc *float32, src *lowp.BFloat16, n int, w float32)
TEXT ·axpyBF16AVX512(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS w+24(FP), Z1
axpyb_loop:
	VPMOVZXWD   (SI), Z0         // 16 x uint16 -> uint32
	VPSLLD      $16, Z0, Z0      // bf16 bits -> float32 bits
	VMOVUPS     (DI), Z2
	VFMADD231PS Z1, Z0, Z2       // acc += src * w
	VMOVUPS     Z2, (DI)
	ADDQ        $32, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         axpyb_loop
	VZEROUPPER
	RET

// func sumSlotsBF16AVX512(acc *float32, src *lowp.BFloat16, stride uintptr, w *float32, ns int, n int)
// acc[i] = sum over slots s < ns with w[s] != 0, in increasing s, of
// w[s] * src[s*stride/2 + i] (one FMA per term from acc = 0), n a multiple
// of 64: the combine's axpy calls fused, 64 columns in Z0-Z3 across all
// slots.
TEXT ·sumSlotsBF16AVX512(SB), NOSPLIT, $0-48
	SUMSLOTS_ARGS
sumb_chunk:
	SUMSLOTS_CHUNK
	TESTQ R9, R9
	JZ   sumb_store
sumb_slot:
	SUMSLOTS_W
	TESTL $0x7fffffff, R10
	JZ   sumb_next               // w[s] == 0: slot skipped
	VPMOVZXWD   (AX), Z5
	VPMOVZXWD   32(AX), Z6
	VPMOVZXWD   64(AX), Z7
	VPMOVZXWD   96(AX), Z8
	VPSLLD      $16, Z5, Z5
	VPSLLD      $16, Z6, Z6
	VPSLLD      $16, Z7, Z7
	VPSLLD      $16, Z8, Z8
	VFMADD231PS Z4, Z5, Z0
	VFMADD231PS Z4, Z6, Z1
	VFMADD231PS Z4, Z7, Z2
	VFMADD231PS Z4, Z8, Z3
sumb_next:
	ADDQ R8, AX
	INCQ DX
	CMPQ DX, R9
	JLT  sumb_slot
sumb_store:
	SUMSLOTS_STORE
	ADDQ $128, SI
	SUBQ $64, CX
	JNZ  sumb_chunk
	VZEROUPPER
	RET

// func sumSlotsF32AVX512(acc *float32, src *float32, stride uintptr, w *float32, ns int, n int)
// sumSlotsBF16AVX512 for float32 partials.
TEXT ·sumSlotsF32AVX512(SB), NOSPLIT, $0-48
	SUMSLOTS_ARGS
sumf_chunk:
	SUMSLOTS_CHUNK
	TESTQ R9, R9
	JZ   sumf_store
sumf_slot:
	SUMSLOTS_W
	TESTL $0x7fffffff, R10
	JZ   sumf_next
	VFMADD231PS (AX), Z4, Z0
	VFMADD231PS 64(AX), Z4, Z1
	VFMADD231PS 128(AX), Z4, Z2
	VFMADD231PS 192(AX), Z4, Z3
sumf_next:
	ADDQ R8, AX
	INCQ DX
	CMPQ DX, R9
	JLT  sumf_slot
sumf_store:
	SUMSLOTS_STORE
	ADDQ $256, SI
	SUBQ $64, CX
	JNZ  sumf_chunk
	VZEROUPPER
	RET

// func axpyF32AVX512(acc *float32, src *float32, n int, w float32)
TEXT ·axpyF32AVX512(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS w+24(FP), Z1
axpyf_loop:
	VMOVUPS     (SI), Z0
	VMOVUPS     (DI), Z2
	VFMADD231PS Z1, Z0, Z2
	VMOVUPS     Z2, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         axpyf_loop
	VZEROUPPER
	RET

// func decodeBF16AVX512(dst *float32, src *lowp.BFloat16, n int)
TEXT ·decodeBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
decb_loop:
	VPMOVZXWD (SI), Z0           // 16 x uint16 -> uint32
	VPSLLD    $16, Z0, Z0        // bf16 bits -> float32 bits
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       decb_loop
	VZEROUPPER
	RET

// func decodeBF16MaxAVX512(dst *float32, src *lowp.BFloat16, n int) uint32
// decodeBF16AVX512 that also returns the largest |x| bit pattern among the
// finite values it wrote (maxFiniteBitsAVX512 of dst), taken from the
// widened bits while they are in registers.
TEXT ·decodeBF16MaxAVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	FINMAX_INIT
decbm_loop:
	VPMOVZXWD (SI), Z4           // 16 x uint16 -> uint32
	VPSLLD    $16, Z4, Z4        // bf16 bits -> float32 bits
	VMOVUPS   Z4, (DI)
	FINMAX_STEP(Z4)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       decbm_loop
	FINMAX_RET(ret+24(FP))
	VZEROUPPER
	RET

// func scaleF32AVX512(dst *float32, src *float32, n int, scale float32)
TEXT ·scaleF32AVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z1
scalef_loop:
	VMULPS  (SI), Z1, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     scalef_loop
	VZEROUPPER
	RET

// func decodeE4M3AVX512(dst *float32, src *lowp.Float8E4M3FN, n int)
// Normal values: (b & 0x7f) << 20 puts e4m3's exponent and mantissa under a
// float32's; adding 120 << 23 rebases the exponent (bias 7 -> 127). This is
// integer arithmetic on purpose: a float multiply by 2^120 would pass through
// float32 subnormals and take a microcode assist on Intel cores. Subnormal
// e4m3 (exponent field 0: m * 2^-9) are converted as integers and scaled by
// 2^-9. 0x7f is NaN; the sign bit moves to bit 31.
TEXT ·decodeE4M3AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7f, AX
	VPBROADCASTD AX, Z1          // magnitude mask, also the NaN pattern
	MOVL $0x80, AX
	VPBROADCASTD AX, Z2          // sign mask
	MOVL $0x3c000000, AX         // 120 << 23: exponent rebias
	VPBROADCASTD AX, Z3
	MOVL $0x7fc00000, AX
	VPBROADCASTD AX, Z4          // quiet NaN
	MOVL $8, AX
	VPBROADCASTD AX, Z9          // |x| < 8: exponent field 0 (subnormal or zero)
	MOVL $0x3b000000, AX         // 2^-9
	VPBROADCASTD AX, Z10
dece_loop:
	VPMOVZXBD (SI), Z0           // 16 bytes -> dwords
	VPANDD    Z1, Z0, Z5         // |x| bits
	VPCMPEQD  Z1, Z5, K1         // NaN lanes
	VPCMPUD   $1, Z9, Z5, K2     // subnormal lanes: |x| < 8
	VPSLLD    $20, Z5, Z6
	VPADDD    Z3, Z6, Z6         // normal: rebased bits
	VCVTDQ2PS Z5, Z8             // subnormal: m as float
	VMULPS    Z10, Z8, Z8        // m * 2^-9
	VMOVDQA32 Z8, K2, Z6
	VMOVDQA32 Z4, K1, Z6         // NaN
	VPANDD    Z2, Z0, Z7
	VPSLLD    $24, Z7, Z7        // sign to bit 31
	VPORD     Z7, Z6, Z6
	VMOVUPS   Z6, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       dece_loop
	VZEROUPPER
	RET

// func decodeE4M3x32AVX512(dst *float32, src *lowp.Float8E4M3FN, n int)
// n a multiple of 32. Works on 32 values at once in 16-bit lanes, producing
// float16 bits of the value times 2^-8 (exact for every e4m3fn value,
// subnormals included): the sign-extended byte shifted left by 7 puts the
// 7 magnitude bits (exponent and mantissa) at bits 13..7 and copies of the
// sign at bits 15 and 14; clearing bit 14 leaves sign | e << 10 | m << 7,
// i.e. 2^(e-15) * 1.m (or 2^-14 * 0.m for e = 0) = e4m3 * 2^-8. The NaN
// pattern (magnitude 0x7f, found on the bytes) becomes the float16 quiet
// NaN 0x7e00 with its sign. VCVTPH2PS widens to float32 and a multiply by
// 256 restores the scale (exact).
TEXT ·decodeE4M3x32AVX512(SB), NOSPLIT, $0-24
	MOVQ      dst+0(FP), DI
	MOVQ      src+8(FP), SI
	MOVQ      n+16(FP), CX
	MOVL      $0xbfffbfff, AX
	VPBROADCASTD AX, Z3               // clears the second sign copy (bit 14)
	MOVL      $0x80808080, AX
	VPBROADCASTD AX, Y4               // e4m3 sign bit, per byte
	VPCMPEQB  Y5, Y5, Y5              // all ones
	MOVL      $0x3e803e80, AX
	VPBROADCASTD AX, Z6               // 0x3f80 (+ sign) + 0x3e80 = 0x7e00 (+ sign): NaN
	MOVL      $0x43800000, AX
	VPBROADCASTD AX, Z7               // 256.0
decf16_loop:
	VPMOVSXBW  (SI), Z0               // 32 bytes -> sign-extended words
	VPSLLW     $7, Z0, Z0
	VPANDD     Z3, Z0, Z0             // float16 bits of value * 2^-8
	VPORD      (SI), Y4, Y1           // byte | 0x80
	VPCMPEQB   Y5, Y1, K1             // K1: NaN (magnitude 0x7f)
	VPADDW     Z6, Z0, K1, Z0
	VEXTRACTI64X4 $1, Z0, Y2
	VCVTPH2PS  Y0, Z0
	VCVTPH2PS  Y2, Z2
	VMULPS     Z7, Z0, Z0
	VMULPS     Z7, Z2, Z2
	VMOVUPS    Z0, (DI)
	VMOVUPS    Z2, 64(DI)
	ADDQ       $32, SI
	ADDQ       $128, DI
	SUBQ       $32, CX
	JNZ        decf16_loop
	VZEROUPPER
	RET

// func decodeNVFP4AVX512(dst *float32, src *uint8, scales *float32, blocks int, global float32, table *float32)
// Decodes blocks blocks of 16 E2M1 elements (8 packed bytes each, element
// 2i in the low nibble of byte i, 2i+1 in the high nibble):
// dst = (table[nibble] * scales[block]) * global, the two products in the
// order and rounding of lowp.DequantizeNVFP4Row (the first is exact).
// table is the 16-entry E2M1 value table (lowp.E2M1Value).
TEXT ·decodeNVFP4AVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ blocks+24(FP), CX
	VBROADCASTSS global+32(FP), Z3
	MOVQ table+40(FP), AX
	VMOVUPS (AX), Z2             // E2M1 values, indexed by nibble
	MOVL $0x000f, AX
	VPBROADCASTW AX, X4          // low nibble of each byte, in place
	MOVL $0x0f00, AX
	VPBROADCASTW AX, X5          // high nibble, moved to the word's high byte
nvfp4_loop:
	VPMOVZXBW (SI), X0           // 8 bytes -> 8 words b
	VPSLLW    $4, X0, X1         // b << 4: the high nibble at bits 8..11
	VPAND     X4, X0, X0
	VPAND     X5, X1, X1
	VPOR      X1, X0, X0         // bytes: lo0, hi0, lo1, hi1, ...: element order
	VPMOVZXBD X0, Z0             // 16 nibble indices
	VPERMPS   Z2, Z0, Z1         // E2M1 values
	VBROADCASTSS (DX), Z6
	VMULPS    Z6, Z1, Z1         // * block scale (exact)
	VMULPS    Z3, Z1, Z1         // * global scale
	VMOVUPS   Z1, (DI)
	ADDQ      $8, SI
	ADDQ      $4, DX
	ADDQ      $64, DI
	DECQ      CX
	JNZ       nvfp4_loop
	VZEROUPPER
	RET

// func maxFiniteBitsAVX512(v *float32, n int) uint32
// The largest |x| bit pattern among the finite values of v[:n] (n a multiple
// of 16; 0 when none is finite): the sign is masked off, lanes at or above
// the +Inf pattern (Inf, NaN) are excluded by a compare mask, and an
// unsigned max over the remaining bit patterns orders finite magnitudes.
TEXT ·maxFiniteBitsAVX512(SB), NOSPLIT, $0-20
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	FINMAX_INIT
maxfin_loop:
	FINMAX_STEP((SI))
	ADDQ    $64, SI
	SUBQ    $16, CX
	JNZ     maxfin_loop
	FINMAX_RET(ret+16(FP))
	VZEROUPPER
	RET
