package lowp

import "math"

// Float16 holds the bits of an IEEE-754 binary16 value: 1 sign bit,
// 5 exponent bits (bias 15), 10 mantissa bits; largest finite magnitude
// 65504, smallest subnormal 2^-24.
type Float16 uint16

// F16 rounds f to the nearest float16, ties to even, subnormal results
// included. Magnitudes of 65520 and above (the tie above 65504 rounds up)
// become infinities. A NaN becomes a quiet NaN with f's sign and the top 9
// bits of f's payload (as x86 F16C and Arm conversions do; numpy keeps the
// payload but does not set the quiet bit).
func F16(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return Float16(sign | 0x7e00 | uint16(a>>13)&0x1ff)
	case a >= 0x477ff000: // |f| >= 65520, or infinity
		return Float16(sign | 0x7c00)
	case a < 0x38800000: // |f| < 2^-14: subnormal result, multiples of 2^-24
		// Adding 0.5 rounds |f| to a multiple of ulp(0.5) = 2^-24 with the
		// float32 adder's ties-to-even; the mantissa of the sum is the
		// subnormal encoding (1024 is the smallest normal, 2^-14).
		s := math.Float32frombits(a) + 0.5
		return Float16(sign | uint16(math.Float32bits(s)-0x3f000000))
	}
	// Normal: re-bias the exponent (127 -> 15) and round the 13 dropped
	// mantissa bits to nearest even; a carry bumps the exponent.
	a -= 112 << 23
	a += 0xfff + (a>>13)&1
	return Float16(sign | uint16(a>>13))
}

// Decoding tables after J. van der Zijp, "Fast Half Float Conversions":
// bits = f16Mant[f16Off[h>>10]+h&0x3ff] + f16Exp[h>>10], exact for every
// pattern and branch-free.
var (
	f16Mant [2048]uint32
	f16Exp  [64]uint32
	f16Off  [64]uint32
)

func init() {
	for i := 1; i < 1024; i++ { // subnormals: normalise i * 2^-24
		m := uint32(i) << 13
		e := uint32(0)
		for m&0x00800000 == 0 {
			e -= 0x00800000
			m <<= 1
		}
		f16Mant[i] = m&^0x00800000 | (e + 0x38800000)
	}
	for i := 1024; i < 2048; i++ {
		f16Mant[i] = 0x38000000 + uint32(i-1024)<<13
	}
	for i := 1; i < 31; i++ {
		f16Exp[i] = uint32(i) << 23
		f16Exp[i+32] = 0x80000000 | uint32(i)<<23
	}
	f16Exp[31] = 0x47800000
	f16Exp[32] = 0x80000000
	f16Exp[63] = 0xc7800000
	for i := range f16Off {
		if i != 0 && i != 32 {
			f16Off[i] = 1024
		}
	}
}

// Float32 returns the exact float32 value of x (NaN payloads are kept).
func (x Float16) Float32() float32 { return f16Decode(x) }

// DecodeF16 writes the float32 value of every element of src to dst, which
// must be at least as long as src (it panics otherwise).
func DecodeF16(dst []float32, src []Float16) {
	dst = dst[:len(src)]
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s, d := src[i:i+4:i+4], dst[i:i+4:i+4]
		d[0] = f16Decode(s[0])
		d[1] = f16Decode(s[1])
		d[2] = f16Decode(s[2])
		d[3] = f16Decode(s[3])
	}
	for ; i < len(src); i++ {
		dst[i] = f16Decode(src[i])
	}
}

// f16Decode is the branch-free table decode of one value.
func f16Decode(x Float16) float32 {
	h := uint32(x)
	e := h >> 10 & 63
	return math.Float32frombits(f16Mant[(f16Off[e]+h&0x3ff)&2047] + f16Exp[e])
}

// EncodeF16 writes F16(src[i]) to dst[i] for every element of src; dst must
// be at least as long as src (it panics otherwise).
func EncodeF16(dst []Float16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F16(f)
	}
}
