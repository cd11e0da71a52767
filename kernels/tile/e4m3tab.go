package tile

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// E4M3Tables are the tables of the AVX512_VBMI e4m3fn decoder (the lane
// kernels' side conversion and WidenE4M3x64; the
// assembly fixes the layout): bytes 2 and 3 of the float32 bits of every
// e4m3fn magnitude 0..127 (an e4m3fn value's float32 bits have only their
// two high bytes set; NaN as the quiet NaN 0x7fc00000; the sign is ORed in
// separately), the dword permutation that puts 64 input bytes in the order
// the in-lane unpacks need (dword 4L+k <- dword 4k+L), and the sign mask
// of 4 bytes.
type E4M3Tables struct {
	B2, B3 [128]byte
	Perm   [16]uint32
	Sign   uint32
}

// E4M3Tab holds the decoder's tables.
var E4M3Tab = func() (t E4M3Tables) {
	for x := range 128 {
		bits := math.Float32bits(lowp.Float8E4M3FN(x).Float32())
		if x == 0x7f {
			bits = 0x7fc00000
		}
		if bits&0xffff != 0 {
			panic("tile: e4m3 value with float32 mantissa bits below bit 16")
		}
		t.B2[x], t.B3[x] = byte(bits>>16), byte(bits>>24)
	}
	for l := range 4 {
		for k := range 4 {
			t.Perm[4*l+k] = uint32(4*k + l)
		}
	}
	t.Sign = 0x80808080
	return t
}()
