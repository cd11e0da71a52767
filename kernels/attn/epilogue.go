package attn

import (
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// The epilogue kernels: storing a float32 row as BF16 (round to nearest
// even) and the combine's acc += w * row for BF16 and float32 partials, and
// the K/V staging decoders. They have AVX-512 implementations
// (epilogue_amd64.s) used whenever the block kernel's tier runs AVX-512
// kernels and AVX2 implementations (epilogue_avx2_amd64.s) for the avx2
// tier: the CPU-feature decision is taken once, in package tile
// (tile.VectorISA), and followed here (plus F16C, which the AVX2 e4m3
// decoder needs).

// vec selects the epilogue kernels of a run.
type vec uint8

const (
	vecGo     vec = iota // portable Go loops
	vecAVX2              // AVX2 + FMA + F16C kernels
	vecAVX512            // AVX-512 kernels
)

// simdLen returns how many leading elements of n the SIMD kernels take:
// whole groups of 16, or none for the portable loops. The portable loops
// finish the rest.
func simdLen(n int, v vec) int {
	if v == vecGo {
		return 0
	}
	return n &^ 15
}

// vecLevel returns the epilogue kernels that follow the tile tier in use.
func vecLevel() vec {
	if !haveAsm {
		return vecGo
	}
	switch tile.VectorISA() {
	case tile.ISAAVX512:
		return vecAVX512
	case tile.ISAAVX2:
		if hasF16C() {
			return vecAVX2
		}
	}
	return vecGo
}

// storeBF16 writes dst[i] = BF16(src[i] * scale) for len(src) elements. A
// zero scale writes zeros (a row that saw no key), whatever src holds.
func storeBF16(dst []lowp.BFloat16, src []float32, scale float32, lv vec) {
	n := len(src)
	dst = dst[:n]
	if scale == 0 {
		clear(dst)
		return
	}
	v := simdLen(n, lv)
	if v > 0 {
		var row int32 // one row, at dst
		storeRowsBF16SIMD(&dst[0], &row, &src[0], &scale, 1, v, false, lv)
	}
	for i := v; i < n; i++ {
		dst[i] = lowp.BF16(src[i] * scale)
	}
}

// storeRowsBF16 is storeBF16 for the rows of src (len(idx) rows of d
// values, contiguous): row r goes to dst row idx[r] (d values apart) times
// scales[r], with one kernel call for all rows when d is a multiple of 16
// and a SIMD tier is active. With stream the kernels write rows that start
// on a vector boundary with non-temporal stores (for rows that are read
// back only after much other traffic: the results are the same). It
// panics (an internal error: the callers compute idx) if an index is
// outside dst.
func storeRowsBF16(dst []lowp.BFloat16, idx []int32, src []float32, scales []float32, d int, stream bool, lv vec) {
	m := len(idx)
	if m == 0 {
		return
	}
	src, scales = src[:m*d], scales[:m]
	rows := len(dst) / d
	for _, i := range idx {
		if uint(i) >= uint(rows) {
			panic("attn: storeRowsBF16: row index out of range")
		}
	}
	if d%16 == 0 && lv != vecGo {
		storeRowsBF16SIMD(&dst[0], &idx[0], &src[0], &scales[0], m, d, stream, lv)
		return
	}
	for r, i := range idx {
		storeBF16(dst[int(i)*d:(int(i)+1)*d], src[r*d:(r+1)*d], scales[r], lv)
	}
}

// storeRowsBF16SIMD calls the tier's row-store kernel (n a multiple of 16).
func storeRowsBF16SIMD(dst *lowp.BFloat16, idx *int32, src *float32, scales *float32, rows, n int, stream bool, lv vec) {
	st := 0
	if stream {
		st = 1
	}
	if lv == vecAVX512 {
		storeRowsBF16AVX512(dst, idx, src, scales, rows, n, st)
	} else {
		storeRowsBF16AVX2(dst, idx, src, scales, rows, n, st)
	}
}

// scaleF32 writes dst[i] = src[i] * scale (zeros for a zero scale).
func scaleF32(dst, src []float32, scale float32, lv vec) {
	n := len(src)
	dst = dst[:n]
	if scale == 0 {
		clear(dst)
		return
	}
	v := simdLen(n, lv)
	if v > 0 {
		if lv == vecAVX512 {
			scaleF32AVX512(&dst[0], &src[0], v, scale)
		} else {
			scaleF32AVX2(&dst[0], &src[0], v, scale)
		}
	}
	for i := v; i < n; i++ {
		dst[i] = src[i] * scale
	}
}

// axpyBF16 computes acc[i] += w * float32(src[i]).
func axpyBF16(acc []float32, w float32, src []lowp.BFloat16, lv vec) {
	n := len(acc)
	src = src[:n]
	v := simdLen(n, lv)
	if v > 0 {
		if lv == vecAVX512 {
			axpyBF16AVX512(&acc[0], &src[0], v, w)
		} else {
			axpyBF16AVX2(&acc[0], &src[0], v, w)
		}
	}
	for i := v; i < n; i++ {
		acc[i] += w * src[i].Float32()
	}
}

// axpyF32 computes acc[i] += w * src[i].
func axpyF32(acc []float32, w float32, src []float32, lv vec) {
	n := len(acc)
	src = src[:n]
	v := simdLen(n, lv)
	if v > 0 {
		if lv == vecAVX512 {
			axpyF32AVX512(&acc[0], &src[0], v, w)
		} else {
			axpyF32AVX2(&acc[0], &src[0], v, w)
		}
	}
	for i := v; i < n; i++ {
		acc[i] += w * src[i]
	}
}

// decodeBF16 writes dst[i] = float32(src[i]) for len(src) elements.
func decodeBF16(dst []float32, src []lowp.BFloat16, lv vec) {
	n := len(src)
	dst = dst[:n]
	v := simdLen(n, lv)
	if v > 0 {
		if lv == vecAVX512 {
			decodeBF16AVX512(&dst[0], &src[0], v)
		} else {
			decodeBF16AVX2(&dst[0], &src[0], v)
		}
	}
	lowp.DecodeBF16(dst[v:], src[v:])
}

// decodeBF16Max is decodeBF16 that also returns maxFiniteBits of dst (the
// largest finite |x| bits, 0 when there is none), computed while the
// values are in registers instead of by a second pass over dst.
func decodeBF16Max(dst []float32, src []lowp.BFloat16, lv vec) uint32 {
	n := len(src)
	dst = dst[:n]
	v := simdLen(n, lv)
	var m uint32
	if v > 0 {
		if lv == vecAVX512 {
			m = decodeBF16MaxAVX512(&dst[0], &src[0], v)
		} else {
			m = decodeBF16MaxAVX2(&dst[0], &src[0], v)
		}
	}
	lowp.DecodeBF16(dst[v:], src[v:])
	return max(m, maxFiniteBits(dst[v:], vecGo))
}

// e2m1Values is the E2M1 value table the NVFP4 kernel indexes.
var e2m1Values = func() (t [16]float32) {
	for i := range t {
		t[i] = lowp.E2M1Value(uint8(i))
	}
	return t
}()

// decodeNVFP4Row writes row r of an NVFP4 matrix (d columns; packed D/2
// bytes per row, block scales in the 128x4 layout) as float32 into dst[:d],
// the values of lowp.DequantizeNVFP4Row. scratch holds d/16 floats (the
// row's block scales).
func decodeNVFP4Row(dst []float32, packed, scales []uint8, r, d int, global float32, scratch []float32, avx512 bool) {
	cols := d / lowp.NVFP4BlockSize
	if !avx512 || cols == 0 || cols*lowp.NVFP4BlockSize != d {
		lowp.DequantizeNVFP4Row(dst[:d], packed, scales, r, d, global)
		return
	}
	sc := scratch[:cols]
	for c := range sc {
		sc[c] = lowp.Float8E4M3FN(scales[lowp.Scale128x4Offset(r, c, cols)]).Float32()
	}
	row := packed[r*d/2 : (r+1)*d/2]
	dst = dst[:d]
	decodeNVFP4AVX512(&dst[0], &row[0], &sc[0], cols, global, &e2m1Values[0])
}

// e4m3Fold is the power of two that decode's AVX2 staging leaves out of
// e4m3fn keys and values (decodeE4M3Fold): the float16 route yields
// value * 2^-8 before its last multiply, and dropping that multiply makes
// the staging a fifth faster. The accumulation puts the factor back where
// it is one multiply per row, not per value: in the score scale (keys,
// s = (scale*e4m3Fold) * (q.k/e4m3Fold)) and in the output's normalising
// factor (values). Powers of two commute with rounding, so the result is
// the unfolded one bit for bit, except where a product or partial sum
// becomes subnormal at the smaller scale (magnitudes below 2^-118, far
// under float32's resolution of the terms that dominate a row).
const e4m3Fold = 256

// decodeE4M3Fold writes dst[i] = float32(src[i]) / e4m3Fold (exact: every
// e4m3fn magnitude over 256 is a normal float32) for len(src) elements:
// groups of 32 through decodeE4M3x32FoldAVX2 when lv is vecAVX2, the rest
// (and a group that holds a NaN) through decodeE4M3 and a multiply.
func decodeE4M3Fold(dst []float32, src []lowp.Float8E4M3FN, lv vec) {
	n := len(src)
	dst = dst[:n]
	v := 0
	if lv == vecAVX2 {
		if v = n &^ 31; v > 0 && !decodeE4M3x32FoldAVX2(&dst[0], &src[0], v) {
			v = 0 // a NaN among them
		}
	}
	if v < n {
		decodeE4M3(dst[v:], src[v:], lv)
		for i := v; i < n; i++ {
			dst[i] *= 1.0 / e4m3Fold
		}
	}
}

// decodeE4M3 writes dst[i] = float32(src[i]) for len(src) elements.
// AVX-512: groups of 64 through the byte-table kernel where the CPU has
// AVX512_VBMI (e4m3VBMI), then groups of 32 through the float16 kernel, a
// remaining group of 16 through the arithmetic one; AVX2: groups of 32
// through the kernel without a NaN step (the float16 kernel redoes them
// when they hold a NaN), a remaining group of 16 through the float16
// kernel; the rest in Go.
func decodeE4M3(dst []float32, src []lowp.Float8E4M3FN, lv vec) {
	n := len(src)
	dst = dst[:n]
	v := 0
	switch lv {
	case vecAVX512:
		if e4m3VBMI {
			if v = n &^ 63; v > 0 {
				tile.WidenE4M3x64(dst[:v], src[:v])
			}
		}
		if w := n &^ 31; w > v {
			decodeE4M3x32AVX512(&dst[v], &src[v], w-v)
			v = w
		}
		if w := n &^ 15; w > v {
			decodeE4M3AVX512(&dst[v], &src[v], w-v)
			v = w
		}
	case vecAVX2:
		if v = n &^ 31; v > 0 && !decodeE4M3x32AVX2(&dst[0], &src[0], v) {
			decodeE4M3AVX2(&dst[0], &src[0], v) // a NaN among them
		}
		if w := n &^ 15; w > v {
			decodeE4M3AVX2(&dst[v], &src[v], w-v)
			v = w
		}
	}
	lowp.DecodeE4M3(dst[v:], src[v:])
}

// e4m3VBMI selects the AVX512_VBMI byte-table e4m3 decoder on the
// avx512 vec level (tests switch it off to cover the float16 kernel too).
var e4m3VBMI = hasVBMI()
