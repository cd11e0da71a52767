package check

import (
	"math"
	"testing"
)

// TestRoundingNeed: a value's rounding interval is half-way to each
// neighbour, so need is 0 inside it and the distance to its edge outside,
// for BF16 (across a binade edge and zero) and float32.
func TestRoundingNeed(t *testing.T) {
	for _, tc := range []struct {
		rd      rounding
		o, g    float64
		want    float64
		comment string
	}{
		{roundO, 1 + 0x1p-8, 1, 0, "midpoint rounds to even 1 (spacing 2^-7)"},
		{roundO, 1 + 3*0x1p-9, 1, 0x1p-9, "half a spacing past the midpoint"},
		{roundO, 1 - 0x1p-8, 1, 0x1p-9, "below 1 the spacing halves"},
		{roundO, 0.3, 0.3, 0, "own rounding"},
		{roundO, -1 - 0x1p-6, -1, 0x1p-6 - 0x1p-8, "negative"},
		{roundO, 0x1p-134, 0, 0, "zero's interval reaches half the smallest subnormal"},
		{roundLSE, 5 + 0x1p-20, 5, 0x1p-20 - 0x1p-22, "float32 spacing at 5 is 2^-21"},
	} {
		g := tc.rd.round(tc.g)
		if tc.comment == "own rounding" {
			g = tc.rd.round(tc.o)
		}
		if got := tc.rd.need(tc.o, g); math.Abs(got-tc.want) > 1e-18 {
			t.Errorf("%s: need(%g, %g) = %g, want %g", tc.comment, tc.o, g, got, tc.want)
		}
	}
}
