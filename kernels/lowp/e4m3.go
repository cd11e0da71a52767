package lowp

import "math"

// Float8E4M3FN holds the bits of an OCP float8 e4m3fn value: 1 sign bit,
// 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN = S.1111.111
// (0x7f and 0xff), largest finite magnitude 448, smallest subnormal 2^-9.
type Float8E4M3FN uint8

// e4m3Table maps every bit pattern to its float32 value.
var e4m3Table = func() (t [256]float32) {
	for i := range t {
		t[i] = e4m3Decode(uint8(i))
	}
	return
}()

// e4m3Decode computes the value of one pattern from its fields. The two NaN
// patterns decode to the quiet float32 NaN with the same sign, as in
// ml_dtypes.
func e4m3Decode(b uint8) float32 {
	sign := uint32(b&0x80) << 24
	e := int(b>>3) & 0xf
	m := float64(b & 7)
	var v float64
	switch {
	case e == 0xf && b&7 == 7:
		return math.Float32frombits(sign | 0x7fc00000)
	case e == 0:
		v = m / 8 * math.Ldexp(1, -6)
	default:
		v = (1 + m/8) * math.Ldexp(1, e-7)
	}
	return math.Float32frombits(sign | math.Float32bits(float32(v)))
}

// Float32 returns the exact float32 value of x.
func (x Float8E4M3FN) Float32() float32 { return e4m3Table[x] }

// E4M3 rounds f to the nearest e4m3fn value, ties to even. Values whose
// rounded magnitude exceeds 448 (that is, |f| > 464), infinities and NaN
// become NaN with f's sign (the behaviour of ml_dtypes and torch casts).
func E4M3(f float32) Float8E4M3FN { return e4m3Round(f, false) }

// E4M3Sat is E4M3 with saturation: finite values and infinities beyond the
// range clamp to +-448 (CUDA's __NV_SATFINITE); NaN becomes NaN with f's
// sign. It equals E4M3 of f clamped to [-448, 448].
func E4M3Sat(f float32) Float8E4M3FN { return e4m3Round(f, true) }

func e4m3Round(f float32, sat bool) Float8E4M3FN {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	if a > 0x7f800000 {
		return Float8E4M3FN(sign | 0x7f)
	}
	if a < 0x3c800000 { // |f| < 2^-6: subnormal result, multiples of 2^-9
		// Exact in float64; RoundToEven gives 0..8, and 8 is the encoding
		// of the smallest normal 2^-6.
		v := math.RoundToEven(float64(math.Float32frombits(a)) * 512)
		return Float8E4M3FN(sign | uint8(v))
	}
	// Normal: re-bias the exponent (127 -> 7) and keep 3 mantissa bits,
	// rounding the 20 dropped bits to nearest even. A carry out of the
	// mantissa correctly bumps the exponent.
	if a > 0x43e80000 { // |f| > 464 (464 itself ties to even, 448): overflow
		if sat {
			return Float8E4M3FN(sign | 0x7e)
		}
		return Float8E4M3FN(sign | 0x7f)
	}
	a -= 120 << 23
	a += 0x7ffff + (a>>20)&1
	return Float8E4M3FN(sign | uint8(a>>20))
}

// DecodeE4M3 writes the float32 value of every element of src to dst, which
// must be at least as long as src (it panics otherwise).
func DecodeE4M3(dst []float32, src []Float8E4M3FN) {
	dst = dst[:len(src)]
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s, d := src[i:i+4:i+4], dst[i:i+4:i+4]
		d[0] = e4m3Table[s[0]]
		d[1] = e4m3Table[s[1]]
		d[2] = e4m3Table[s[2]]
		d[3] = e4m3Table[s[3]]
	}
	for ; i < len(src); i++ {
		dst[i] = e4m3Table[src[i]]
	}
}

// EncodeE4M3 writes E4M3(src[i]) to dst[i] for every element of src; dst
// must be at least as long as src (it panics otherwise).
func EncodeE4M3(dst []Float8E4M3FN, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = e4m3Round(f, false)
	}
}

// EncodeE4M3Sat writes E4M3Sat(src[i]) to dst[i] for every element of src;
// dst must be at least as long as src (it panics otherwise).
func EncodeE4M3Sat(dst []Float8E4M3FN, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = e4m3Round(f, true)
	}
}
