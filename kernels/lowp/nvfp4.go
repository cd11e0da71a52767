package lowp

import (
	"fmt"
	"math"
)

// NVFP4BlockSize is the number of consecutive elements along D that share
// one E4M3 scale in NVFP4.
const NVFP4BlockSize = 16

// Scale128x4Shape returns the padded shape of a rows x cols block-scale
// matrix in the cuBLAS 128x4 tiled layout: rows rounded up to a multiple of
// 128 and cols to a multiple of 4. The layout holds
// paddedRows*paddedCols bytes.
func Scale128x4Shape(rows, cols int) (paddedRows, paddedCols int) {
	return (rows + 127) / 128 * 128, (cols + 3) / 4 * 4
}

// Scale128x4Offset returns the byte offset of element (r, c) of a
// rows x cols block-scale matrix stored in the cuBLAS 128x4 tiled layout
// (cols is the unpadded column count):
//
//	(r/128*ceil(cols/4) + c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4
//
// Each 128x4 tile occupies 512 contiguous bytes; tiles are ordered
// row-major. It is a bijection from the padded shape ([Scale128x4Shape])
// onto [0, paddedRows*paddedCols).
func Scale128x4Offset(r, c, cols int) int {
	return (r/128*((cols+3)/4)+c/4)*512 + (r%32)*16 + (r%128/32)*4 + c%4
}

// QuantizeNVFP4 quantises the row-major rows x d matrix x (d a positive
// multiple of 16, len(x) == rows*d) to NVFP4 with the given global scale.
//
// For each row and each block of 16 consecutive elements, with amax the
// largest magnitude in the block (computed in float32):
//
//	scale = E4M3Sat(amax / 6 / globalScale)
//	element = E2M1(x / (scale.Float32() * globalScale))
//
// each operation rounded to float32 in that order; when
// scale.Float32()*globalScale is 0 the block's elements are all +0. A block
// containing NaN gets the NaN scale (0x7f) and +0 elements, so it
// dequantises to NaN; infinities saturate the scale to 448 and the
// infinite elements to +-6.
//
// packed holds rows*d/2 bytes, row r at packed[r*d/2:], element 2i in the
// low nibble and 2i+1 in the high nibble of byte i. scales holds the
// rows x d/16 E4M3 scale bytes in the 128x4 layout ([Scale128x4Offset]),
// padded to [Scale128x4Shape] with zero bytes. The values are recovered by
// [DequantizeNVFP4Row].
//
// It returns an error if rows < 0, d is not a positive multiple of 16,
// len(x) != rows*d, or globalScale is not a finite number > 0.
func QuantizeNVFP4(x []float32, rows, d int, globalScale float32) (packed, scales []uint8, err error) {
	switch {
	case rows < 0:
		return nil, nil, fmt.Errorf("lowp: QuantizeNVFP4: rows = %d < 0", rows)
	case d <= 0 || d%NVFP4BlockSize != 0:
		return nil, nil, fmt.Errorf("lowp: QuantizeNVFP4: d = %d is not a positive multiple of %d", d, NVFP4BlockSize)
	case len(x) != rows*d:
		return nil, nil, fmt.Errorf("lowp: QuantizeNVFP4: len(x) = %d, want rows*d = %d*%d = %d", len(x), rows, d, rows*d)
	case !(globalScale > 0) || math.IsInf(float64(globalScale), 1):
		return nil, nil, fmt.Errorf("lowp: QuantizeNVFP4: globalScale = %v, want a finite number > 0", globalScale)
	}
	cols := d / NVFP4BlockSize
	pr, pc := Scale128x4Shape(rows, cols)
	packed = make([]uint8, rows*d/2)
	scales = make([]uint8, pr*pc)
	for r := range rows {
		for c := range cols {
			blk := x[r*d+c*NVFP4BlockSize : r*d+(c+1)*NVFP4BlockSize]
			var amax float32
			nan := false
			for _, v := range blk {
				a := float32(math.Abs(float64(v)))
				if a > amax {
					amax = a
				}
				nan = nan || a != a
			}
			if nan {
				amax = float32(math.NaN())
			}
			s := E4M3Sat(float32(float32(amax/6) / globalScale))
			scales[Scale128x4Offset(r, c, cols)] = uint8(s)
			den := float32(s.Float32() * globalScale)
			if den == 0 {
				continue
			}
			out := packed[(r*d+c*NVFP4BlockSize)/2 : (r*d+(c+1)*NVFP4BlockSize)/2]
			for i := range out {
				lo := E2M1(float32(blk[2*i] / den))
				hi := E2M1(float32(blk[2*i+1] / den))
				out[i] = lo | hi<<4
			}
		}
	}
	return packed, scales, nil
}

// DequantizeNVFP4Row writes the d values of row row of an NVFP4 matrix
// produced by [QuantizeNVFP4] (packed: rows*d/2 bytes; scales: the 128x4
// layout of the rows x d/16 scales) to dst[:d]:
//
//	value = (E2M1Value(nibble) * scale) * globalScale
//
// The first product is exact, so each value is the exact product rounded
// once to float32. d must be a multiple of 16; it panics if a slice is too
// short for row and d.
func DequantizeNVFP4Row(dst []float32, packed []uint8, scales []uint8, row, d int, globalScale float32) {
	cols := d / NVFP4BlockSize
	prow := packed[row*d/2 : (row+1)*d/2]
	dst = dst[:d]
	for c := range cols {
		s := Float8E4M3FN(scales[Scale128x4Offset(row, c, cols)]).Float32()
		decodeE2M1Block(dst[c*NVFP4BlockSize:(c+1)*NVFP4BlockSize], prow[c*NVFP4BlockSize/2:(c+1)*NVFP4BlockSize/2], s, globalScale)
	}
}

// DecodeNVFP4Row decodes one packed NVFP4 row whose block scales have
// already been gathered from the 128x4 layout: element i of dst (for i <
// 2*len(packedRow)) is (E2M1Value(nibble i) * blockScales[i/16].Float32())
// * globalScale, the same values as [DequantizeNVFP4Row]. len(packedRow)
// must be a multiple of 8; dst must hold 2*len(packedRow) values and
// blockScales len(packedRow)/8 scales (it panics otherwise).
func DecodeNVFP4Row(dst []float32, packedRow []uint8, blockScales []Float8E4M3FN, globalScale float32) {
	const half = NVFP4BlockSize / 2
	n := len(packedRow) / half
	if n*half != len(packedRow) {
		panic("lowp: DecodeNVFP4Row: len(packedRow) is not a multiple of 8")
	}
	dst = dst[:n*NVFP4BlockSize]
	blockScales = blockScales[:n]
	for c, s := range blockScales {
		decodeE2M1Block(dst[c*NVFP4BlockSize:(c+1)*NVFP4BlockSize], packedRow[c*half:(c+1)*half], e4m3Table[s], globalScale)
	}
}

// GatherScales128x4 copies the cols block scales of row row from a scale
// matrix in the 128x4 layout to dst[:cols].
func GatherScales128x4(dst []Float8E4M3FN, scales []uint8, row, cols int) {
	dst = dst[:cols]
	for c := range dst {
		dst[c] = Float8E4M3FN(scales[Scale128x4Offset(row, c, cols)])
	}
}

// decodeE2M1Block decodes 16 elements from 8 packed bytes.
func decodeE2M1Block(dst []float32, src []uint8, scale, globalScale float32) {
	dst = dst[:NVFP4BlockSize]
	src = src[:NVFP4BlockSize/2]
	for i, b := range src {
		dst[2*i] = float32(e2m1Table[b&15]*scale) * globalScale
		dst[2*i+1] = float32(e2m1Table[b>>4]*scale) * globalScale
	}
}
