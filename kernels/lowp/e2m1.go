package lowp

import "math"

// e2m1Table holds the value of every E2M1 nibble.
// Entry 8 is -0, set in init: the constant -0.0 is +0 in Go.
var e2m1Table = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}

func init() { e2m1Table[8] = math.Float32frombits(0x80000000) }

// E2M1Value returns the value of the E2M1 (OCP float4 e2m1fn) nibble in the
// low 4 bits of nibble (the high bits are ignored): bit 3 is the sign, bits
// 0-2 select a magnitude from {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Pattern 8 is -0.
func E2M1Value(nibble uint8) float32 { return e2m1Table[nibble&15] }

// E2M1 rounds f to the nearest E2M1 value, ties to even, and returns its
// nibble (bit 3 = sign, so negative values and -0 keep their sign).
// Magnitudes above 6, infinities included, saturate to +-6, as ml_dtypes'
// float4_e2m1fn cast does. E2M1 has no NaN: NaN maps to +0 (ml_dtypes
// leaves this case unspecified).
func E2M1(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>28) & 8
	a := math.Float32frombits(b & 0x7fffffff)
	var m uint8
	switch {
	case a != a:
		return 0
	case a <= 0.25:
		m = 0
	case a < 0.75:
		m = 1
	case a <= 1.25:
		m = 2
	case a < 1.75:
		m = 3
	case a <= 2.5:
		m = 4
	case a < 3.5:
		m = 5
	case a <= 5:
		m = 6
	default:
		m = 7
	}
	return sign | m
}
