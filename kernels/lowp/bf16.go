package lowp

import "math"

// BFloat16 holds the bits of an IEEE bfloat16 value: 1 sign bit, 8 exponent
// bits (bias 127) and 7 mantissa bits, the upper half of a float32.
type BFloat16 uint16

// BF16 rounds f to the nearest bfloat16, ties to even; values beyond the
// largest finite bfloat16 after rounding become infinities. A NaN becomes
// the canonical quiet NaN with f's sign (0x7fc0 or 0xffc0), exactly as
// ml_dtypes and Eigen do.
func BF16(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BFloat16(b>>16&0x8000 | 0x7fc0)
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// Float32 returns the exact float32 value of x (NaN payloads are kept).
func (x BFloat16) Float32() float32 { return math.Float32frombits(uint32(x) << 16) }

// DecodeBF16 writes the float32 value of every element of src to dst, which
// must be at least as long as src (it panics otherwise); 16 elements per
// loop step with AVX-512, as EncodeBF16.
func DecodeBF16(dst []float32, src []BFloat16) {
	dst = dst[:len(src)]
	i := decodeBF16SIMD(dst, src)
	decodeBF16Go(dst[i:], src[i:])
}

// decodeBF16Go is DecodeBF16's portable loop (len(dst) == len(src)).
func decodeBF16Go(dst []float32, src []BFloat16) {
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s, d := src[i:i+4:i+4], dst[i:i+4:i+4]
		d[0] = math.Float32frombits(uint32(s[0]) << 16)
		d[1] = math.Float32frombits(uint32(s[1]) << 16)
		d[2] = math.Float32frombits(uint32(s[2]) << 16)
		d[3] = math.Float32frombits(uint32(s[3]) << 16)
	}
	for ; i < len(src); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

// EncodeBF16 writes BF16(src[i]) to dst[i] for every element of src; dst
// must be at least as long as src (it panics otherwise). With AVX-512 it
// converts 16 elements per loop step (bf16_amd64.s); elsewhere,
// and on the last len(src) % 16 elements, the loop is unrolled by four and
// branch-free (the NaN case is a conditional move).
func EncodeBF16(dst []BFloat16, src []float32) {
	dst = dst[:len(src)]
	i := encodeBF16SIMD(dst, src)
	encodeBF16Go(dst[i:], src[i:])
}

// encodeBF16Go is EncodeBF16's portable loop (len(dst) == len(src)).
func encodeBF16Go(dst []BFloat16, src []float32) {
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s, d := src[i:i+4:i+4], dst[i:i+4:i+4]
		d[0] = bf16Bits(math.Float32bits(s[0]))
		d[1] = bf16Bits(math.Float32bits(s[1]))
		d[2] = bf16Bits(math.Float32bits(s[2]))
		d[3] = bf16Bits(math.Float32bits(s[3]))
	}
	for ; i < len(src); i++ {
		dst[i] = bf16Bits(math.Float32bits(src[i]))
	}
}

// bf16Bits is BF16 on the bits of a float32, written so that the compiler
// selects the NaN result without a branch.
func bf16Bits(b uint32) BFloat16 {
	r := (b + 0x7fff + (b>>16)&1) >> 16
	if b&0x7fffffff > 0x7f800000 {
		r = b>>16&0x8000 | 0x7fc0
	}
	return BFloat16(r)
}
