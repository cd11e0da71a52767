package lowp

import "math"

// Float8E4M3FN holds the bits of an OCP float8 e4m3fn value: 1 sign bit,
// 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN = S.1111.111,
// largest finite magnitude 448.
type Float8E4M3FN uint8

// e4m3Table maps every bit pattern to its float32 value.
var e4m3Table = func() (t [256]float32) {
	for i := range t {
		t[i] = e4m3Decode(uint8(i))
	}
	return
}()

func e4m3Decode(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	e := int(b>>3) & 0xf
	m := float32(b & 7)
	switch {
	case e == 0xf && b&7 == 7:
		return float32(math.NaN())
	case e == 0:
		return sign * m / 8 * float32(math.Ldexp(1, -6))
	default:
		return sign * (1 + m/8) * float32(math.Ldexp(1, e-7))
	}
}

// Float32 returns the exact float32 value of x.
func (x Float8E4M3FN) Float32() float32 { return e4m3Table[x] }

// E4M3 rounds f to the nearest e4m3fn value, ties to even. Values whose
// rounded magnitude exceeds 448, infinities and NaN become NaN (the
// behaviour of ml_dtypes and torch casts).
func E4M3(f float32) Float8E4M3FN { return e4m3Round(f, false) }

// E4M3Sat is E4M3 with saturation: finite values and infinities beyond the
// range clamp to +-448 (CUDA's __NV_SATFINITE); NaN stays NaN.
func E4M3Sat(f float32) Float8E4M3FN { return e4m3Round(f, true) }

func e4m3Round(f float32, sat bool) Float8E4M3FN {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	if a > 0x7f800000 {
		return Float8E4M3FN(sign | 0x7f)
	}
	if a == 0x7f800000 {
		if sat {
			return Float8E4M3FN(sign | 0x7e)
		}
		return Float8E4M3FN(sign | 0x7f)
	}
	x := math.Float32frombits(a)
	// Smallest normal is 2^-6; subnormal spacing 2^-9.
	var q uint8
	if x < 1.0/64 {
		// Subnormal: multiples of 2^-9, RNE via float64 rounding.
		v := math.RoundToEven(float64(x) * 512)
		q = uint8(v) // v <= 8; 8 becomes the smallest normal (exp field 1, mantissa 0)
	} else {
		// Normal: keep 3 mantissa bits with RNE on the float32 bits.
		exp := int(a>>23) - 127
		mant := a & 0x7fffff
		r := mant + 0x7ffff + (mant>>20)&1
		if r >= 0x800000 {
			r -= 0x800000
			exp++
		}
		e := exp + 7
		if e > 15 || (e == 15 && r>>20 == 7) {
			if sat {
				return Float8E4M3FN(sign | 0x7e)
			}
			return Float8E4M3FN(sign | 0x7f)
		}
		q = uint8(e<<3) | uint8(r>>20)
	}
	return Float8E4M3FN(sign | q)
}
