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
	expSub(simd, got, sub, 1)
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
	expSub(simd, sp, 0, 1)
	if sp[0] == sp[0] || sp[1] != 0 || sp[2] != 0 || (simd && sp[3] != 0) || sp[4] != 1 {
		t.Errorf("special values: %v", sp)
	}
	if math.Abs(float64(sp[5])-math.E) > 1e-6 {
		t.Errorf("e^1 = %v", sp[5])
	}
}

// TestExpSubScaled checks the fused argument: expSub(x, sub, scale) is
// within 2 ulp of e^(scale*x - sub) (the argument rounded once; the
// reference uses the exact float64 argument, whose rounding adds at most
// |arg| * 2^-24 relative: |arg| <= 20 here gives < 1.2e-6), for the SIMD
// lanes and the Go tail, and with scale = 1 expSub(x, sub) equals
// expSub(x - sub, 0) bit for bit.
func TestExpSubScaled(t *testing.T) {
	simd := haveAsm && useAsm(16)
	const scale, sub = float32(0.088388346), float32(3.25) // 1/sqrt(128)
	var in []float32
	for x := float32(-190); x <= 36; x += 0.37 {
		in = append(in, x)
	}
	got := append([]float32(nil), in...)
	expSub(simd, got, sub, scale)
	for i, g := range got {
		arg := float64(scale)*float64(in[i]) - float64(sub)
		want := math.Exp(arg)
		if e := math.Abs(float64(g)-want) / want; e > 2.4e-6 {
			t.Fatalf("expSub(%v * %v - %v) = %v, want %v (rel %.3g)", scale, in[i], sub, g, want, e)
		}
	}
	// scale = 1: the fused argument 1*x - sub rounds like x - sub.
	a, b := append([]float32(nil), in...), make([]float32, len(in))
	for i, x := range in {
		b[i] = x - sub
	}
	expSub(simd, a, sub, 1)
	expSub(simd, b, 0, 1)
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("scale 1, x = %v: %v vs %v", in[i], a[i], b[i])
		}
	}
}

// TestDScores compares the AVX2 dS kernel with the Go loop bit for bit
// (same operations, no FMA), including a tail shorter than eight.
func TestDScores(t *testing.T) {
	simd := haveAsm && useAsm(16)
	if !simd {
		t.Skip("no AVX2 kernels on this build or tier")
	}
	for n := 0; n < 40; n += 3 {
		s, dp := make([]float32, n), make([]float32, n)
		for i := range s {
			s[i], dp[i] = float32(i)*0.013, float32(n-i)*0.77-3
		}
		a, b := append([]float32(nil), dp...), append([]float32(nil), dp...)
		dScores(true, a, s, 0.0884, 0.4)
		dScores(false, b, s, 0.0884, 0.4)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("n=%d i=%d: simd %v, Go %v", n, i, a[i], b[i])
			}
		}
	}
}

// TestVecHelpers compares vmax, vsum and vscale (the AVX2 kernels where
// the tier has them) with Go loops at lengths with and without a tail:
// vmax and vscale bit for bit, NaN propagating like Go's max; vsum within
// n * 2^-24 of the sum of magnitudes (eight lane sums instead of one
// sequential sum).
func TestVecHelpers(t *testing.T) {
	simd := haveAsm && useAsm(16)
	nan, ninf := float32(math.NaN()), float32(math.Inf(-1))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 130} {
		for _, special := range []float32{0, nan, ninf} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32((i*37)%19) - 9.5
			}
			if n > 0 && special != 0 {
				x[(n*5)/7] = special
			}
			want := ninf
			var sum, mag float64
			for _, v := range x {
				want = max(want, v)
				sum += float64(v)
				mag += math.Abs(float64(v))
			}
			got := vmax(simd, x, ninf)
			if math.IsNaN(float64(want)) != math.IsNaN(float64(got)) || (!math.IsNaN(float64(want)) && got != want) {
				t.Fatalf("n=%d special=%v: vmax %v, want %v", n, special, got, want)
			}
			if special == 0 {
				if s := vsum(simd, x); math.Abs(float64(s)-sum) > float64(n)*0x1p-24*mag+1e-30 {
					t.Fatalf("n=%d: vsum %v, want %v", n, s, sum)
				}
			}
			y := append([]float32(nil), x...)
			vscale(simd, y, 0.37)
			for i := range y {
				if w := x[i] * 0.37; math.Float32bits(y[i]) != math.Float32bits(w) && !math.IsNaN(float64(w)) {
					t.Fatalf("n=%d: vscale[%d] = %v, want %v", n, i, y[i], w)
				}
			}
		}
	}
}
