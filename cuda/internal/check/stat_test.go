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

// TestStatFactors: the max criterion's z_N and the RMS criterion's k_N
// have the values stat.go and GPU_CHECK.md quote, and the RMS criterion
// allows a few samples more than many.
func TestStatFactors(t *testing.T) {
	if z := zMax(1e6); math.Abs(z-7.5) > 0.05 {
		t.Errorf("z_N at N = 10^6: %.3f, want 7.5", z)
	}
	if k := kRMS(1 << 40); math.Abs(k-kModel) > 1e-3 {
		t.Errorf("k_N for large N: %.4f, want %.2f", k, kModel)
	}
	if kRMS(3) <= 2*kModel || kRMS(10000) >= 1.1*kModel {
		t.Errorf("k_N: %.3f at N = 3, %.3f at N = 10^4", kRMS(3), kRMS(10000))
	}
}

// TestStatExact: a result that is the exact value rounded once passes the
// statistical criterion against the reference with no error to measure;
// one BF16 spacing off on every element fails it while the per-element
// bound, which allows BF16 P, still passes it on most elements.
func TestStatExact(t *testing.T) {
	c := ProbePrefillMatrix()[0]
	if err := c.Gen(3); err != nil {
		t.Fatal(err)
	}
	ref := c.Reference()
	exact := asResult(ref)
	if d := ref.Check(exact); !d.OK() || !math.IsInf(d.StatMarginO, 1) {
		t.Errorf("the rounded exact result: %+v", d)
	}
	off := asResult(ref)
	for i, x := range off.O {
		if x != 0 {
			_, up := roundO.next(float64(x))
			off.O[i] = float32(up)
		}
	}
	d := ref.Check(off)
	if d.StatOK() {
		t.Errorf("every O one BF16 spacing off passes the statistical criterion: %+v", d)
	}
	if d.BadO*2 > len(off.O) {
		t.Errorf("one BF16 spacing fails the bound on %d of %d elements", d.BadO, len(off.O))
	}
}
