package grad

import (
	"math"
	"testing"
)

// TestExpSub checks expSub (the AVX2 kernel when the active tier has it,
// else exp32) against math.Exp: within 2 ulp for x - sub in [-87, 0], 0 below
// -87 (flush instead of gradual underflow), NaN for NaN, 0 for -inf, and a
// tail shorter than eight through exp32.
func TestExpSub(t *testing.T) {
	var xs []float32
	for x := float32(-87); x <= 0; x += 0.00131 {
		xs = append(xs, x)
	}
	xs = append(xs, 0)
	for len(xs)%8 != 3 {
		xs = append(xs, -1)
	}
	const sub = 0.75
	in := make([]float32, len(xs))
	for i, x := range xs {
		in[i] = x + sub
	}
	simd := haveAsm && useAsm(16)
	got := append([]float32(nil), in...)
	expSub(simd, got, sub)
	worst := 0.0
	for i, g := range got {
		x := in[i] - sub
		want := math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		e := math.Abs(float64(g)-want) / ulp
		worst = max(worst, e)
		if e > 2 {
			t.Fatalf("expSub(%v) = %v, want %v (%.2f ulp)", x, g, want, e)
		}
	}
	t.Logf("worst error %.2f ulp over %d values", worst, len(got))
	nan := float32(math.NaN())
	sp := []float32{nan, float32(math.Inf(-1)), -200, -88, 0, 1, -1, -0.5}
	expSub(simd, sp, 0)
	if sp[0] == sp[0] || sp[1] != 0 || sp[2] != 0 || (simd && sp[3] != 0) || sp[4] != 1 {
		t.Errorf("special values: %v", sp)
	}
	if math.Abs(float64(sp[5])-math.E) > 1e-6 {
		t.Errorf("e^1 = %v", sp[5])
	}
}
