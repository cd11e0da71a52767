//go:build amd64 && !purego

package attn

import (
	"golang.org/x/sys/cpu"

	"github.com/sparseattn/msa/kernels/lowp"
)

const haveAsm = true

// hasF16C reports whether the CPU has the float16 conversions the AVX2 e4m3
// decoder uses.
func hasF16C() bool { return cpu.X86.HasF16C }

// hasVBMI reports whether the CPU has the byte permutes of the AVX-512 e4m3
// table decoder (AVX512_VBMI).
func hasVBMI() bool { return cpu.X86.HasAVX512VBMI }

// storeRowsBF16AVX512 converts rows rows of n (a multiple of 16) float32
// values, contiguous at src, times scales[r] to BF16 rows idx[r] of dst (n
// values apart); a zero scale writes zeros. stream != 0 makes the stores
// of 64-byte aligned rows non-temporal.
//
//go:noescape
func storeRowsBF16AVX512(dst *lowp.BFloat16, idx *int32, src *float32, scales *float32, rows, n, stream int)

// scaleF32AVX512 writes dst[i] = src[i] * scale for n (a multiple of 16).
//
//go:noescape
func scaleF32AVX512(dst *float32, src *float32, n int, scale float32)

// axpyBF16AVX512 computes acc[i] += w * src[i] for n (a multiple of 16).
//
//go:noescape
func axpyBF16AVX512(acc *float32, src *lowp.BFloat16, n int, w float32)

// axpyF32AVX512 computes acc[i] += w * src[i] for n (a multiple of 16).
//
//go:noescape
func axpyF32AVX512(acc *float32, src *float32, n int, w float32)

// decodeBF16AVX512 widens n (a multiple of 16) BF16 values to float32.
//
//go:noescape
func decodeBF16AVX512(dst *float32, src *lowp.BFloat16, n int)

// decodeE4M3AVX512 widens n (a multiple of 16) e4m3fn values to float32.
//
//go:noescape
func decodeE4M3AVX512(dst *float32, src *lowp.Float8E4M3FN, n int)

// decodeE4M3x32AVX512 widens n (a multiple of 32) e4m3fn values to float32
// through float16 bits of value * 2^-8 computed in 16-bit lanes (VCVTPH2PS,
// then * 256).
//
//go:noescape
func decodeE4M3x32AVX512(dst *float32, src *lowp.Float8E4M3FN, n int)

// decodeNVFP4AVX512 decodes blocks (>= 1) blocks of 16 E2M1 elements from
// 8 packed bytes each: dst = (table[nibble] * scales[block]) * global.
//
//go:noescape
func decodeNVFP4AVX512(dst *float32, src *uint8, scales *float32, blocks int, global float32, table *float32)

// decodeBF16MaxAVX512 is decodeBF16AVX512 that also returns
// maxFiniteBitsAVX512 of what it wrote, computed while decoding.
//
//go:noescape
func decodeBF16MaxAVX512(dst *float32, src *lowp.BFloat16, n int) uint32

// sumSlotsBF16AVX512 sets acc[i] (i < n, n a multiple of 64) to the sum
// over slots s < ns with w[s] != 0, in increasing s, of w[s] times element
// i of the BF16 row at src + s*stride bytes, one FMA per term starting
// from 0: what clearing acc and one axpyBF16AVX512 per such slot computes.
//
//go:noescape
func sumSlotsBF16AVX512(acc *float32, src *lowp.BFloat16, stride uintptr, w *float32, ns int, n int)

// sumSlotsF32AVX512 is sumSlotsBF16AVX512 for float32 rows
// (axpyF32AVX512).
//
//go:noescape
func sumSlotsF32AVX512(acc *float32, src *float32, stride uintptr, w *float32, ns int, n int)

// maxFiniteBitsAVX512 returns the largest |x| bit pattern among the finite
// values of v[:n] (n a multiple of 16), 0 when there is none.
//
//go:noescape
func maxFiniteBitsAVX512(v *float32, n int) uint32

// The AVX2 kernels (epilogue_avx2_amd64.s): the functions above, for n a
// multiple of 16, with the same results.

//go:noescape
func storeRowsBF16AVX2(dst *lowp.BFloat16, idx *int32, src *float32, scales *float32, rows, n, stream int)

//go:noescape
func scaleF32AVX2(dst *float32, src *float32, n int, scale float32)

//go:noescape
func axpyBF16AVX2(acc *float32, src *lowp.BFloat16, n int, w float32)

//go:noescape
func axpyF32AVX2(acc *float32, src *float32, n int, w float32)

//go:noescape
func decodeBF16AVX2(dst *float32, src *lowp.BFloat16, n int)

//go:noescape
func decodeBF16MaxAVX2(dst *float32, src *lowp.BFloat16, n int) uint32

// decodeE4M3AVX2 widens n (a multiple of 16) e4m3fn values to float32
// through float16 bits (F16C), like decodeE4M3x32AVX512.
//
//go:noescape
func decodeE4M3AVX2(dst *float32, src *lowp.Float8E4M3FN, n int)

// decodeE4M3x32AVX2 is decodeE4M3AVX2 for n a multiple of 32, a quarter
// faster, that reports false instead of producing NaN: when it does, some
// of the values were NaN and dst holds 480 in their place, so the caller
// redoes the range with decodeE4M3AVX2.
//
//go:noescape
func decodeE4M3x32AVX2(dst *float32, src *lowp.Float8E4M3FN, n int) bool

// decodeE4M3x32FoldAVX2 is decodeE4M3x32AVX2 without its final multiply by
// 256: dst holds value * 2^-8 (e4m3Fold), exact.
//
//go:noescape
func decodeE4M3x32FoldAVX2(dst *float32, src *lowp.Float8E4M3FN, n int) bool

//go:noescape
func maxFiniteBitsAVX2(v *float32, n int) uint32

// sumSlotsBF16AVX2 and sumSlotsF32AVX2 are sumSlotsBF16AVX512 and
// sumSlotsF32AVX512 with AVX2 (the same FMAs in the same order).
//
//go:noescape
func sumSlotsBF16AVX2(acc *float32, src *lowp.BFloat16, stride uintptr, w *float32, ns int, n int)

//go:noescape
func sumSlotsF32AVX2(acc *float32, src *float32, stride uintptr, w *float32, ns int, n int)
