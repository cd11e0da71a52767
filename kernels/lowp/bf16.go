package lowp

import "math"

// BFloat16 holds the bits of an IEEE-754 bfloat16 value.
type BFloat16 uint16

// BF16 rounds f to the nearest bfloat16, ties to even. NaN stays NaN (quiet).
func BF16(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force quiet bit
		return BFloat16(b>>16 | 0x0040)
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// Float32 returns the exact float32 value of x.
func (x BFloat16) Float32() float32 { return math.Float32frombits(uint32(x) << 16) }
