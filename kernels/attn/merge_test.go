package attn

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// refMerge is mergeLSE in float64: the merged LSE, the weights and ok.
// Only the differences l - m are taken in float32, as mergeLSE does (an
// LSE is itself a float32 with its rounding; the difference of two is
// exact when they are within a factor of two, and otherwise rounds by half
// an ulp of the larger, which the weight inherits whatever computes it).
func refMerge(lses []float32) (lse float64, ws []float64, ok bool) {
	m := math.Inf(-1)
	for _, l := range lses {
		if float64(l) > m {
			m = float64(l)
		}
	}
	if math.IsInf(m, 0) {
		return 0, nil, false
	}
	ws = make([]float64, len(lses))
	s := 0.0
	for i, l := range lses {
		if l == l {
			ws[i] = math.Exp(float64(l - float32(m)))
			s += ws[i]
		}
	}
	for i := range ws {
		ws[i] /= s
	}
	return m + math.Log(s), ws, true
}

// TestMergeLSE compares mergeLSE under every kernel (the portable loop and
// the SIMD kernels of the tiers this CPU has) with refMerge, over slot
// counts around the vector widths and LSEs that mix ordinary values, wide
// spreads (weights deep in the subnormal range and below it), empty slots
// (-inf), NaN, +inf, and rows where nothing is visible.
//
// Tolerances: e^x is within half an ulp (portable) or 2 ulp (SIMD) of the
// exact value, the float32 sum of n weights adds up to n/2 ulp in the worst
// order, and the product with 1/S one more: each weight is checked to
// (n+8) * 2^-24 relative plus 2^-148 absolute (twice the subnormal spacing,
// for weights that underflow). The LSE m + ln S is checked to the ulps of
// ln S's error plus two of the result.
func TestMergeLSE(t *testing.T) {
	run := func(t *testing.T, lv vec) {
		rng := rand.New(rand.NewSource(7))
		inf := float32(math.Inf(1))
		nan := float32(math.NaN())
		for _, n := range []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40} {
			cases := [][]float32{}
			fill := func(f func(i int) float32) []float32 {
				l := make([]float32, n)
				for i := range l {
					l[i] = f(i)
				}
				return l
			}
			cases = append(cases,
				fill(func(int) float32 { return -inf }),
				fill(func(int) float32 { return nan }),
				fill(func(i int) float32 { return []float32{nan, -inf}[i%2] }),
				fill(func(i int) float32 {
					if i == n/2 {
						return inf
					}
					return float32(rng.NormFloat64())
				}),
				fill(func(i int) float32 {
					if i == n-1 {
						return 3.5
					}
					return -inf
				}),
			)
			for trial := 0; trial < 300; trial++ {
				spread := []float64{0.5, 3, 40, 100}[trial%4]
				base := float32(rng.NormFloat64() * 30)
				cases = append(cases, fill(func(int) float32 {
					switch u := rng.Float64(); {
					case u < 0.15:
						return -inf
					case u < 0.2:
						return nan
					case u < 0.3:
						// Weights e^-87 .. e^-110 relative to a top slot
						// at base: subnormal, or below the smallest one.
						return base - float32(87+rng.Float64()*23)
					}
					return base + float32(rng.NormFloat64()*spread)
				}))
				cases[len(cases)-1][rng.Intn(n)] = base
			}
			for ci, l := range cases {
				ws := make([]float32, n)
				for i := range ws {
					ws[i] = -7 // must be overwritten when ok
				}
				lse, ok := mergeLSE(l, ws, lv)
				rl, rw, rok := refMerge(l)
				where := fmt.Sprintf("n=%d case %d %v", n, ci, l)
				if ok != rok {
					t.Fatalf("%s: ok = %v, want %v", where, ok, rok)
				}
				if !ok {
					if !math.IsInf(float64(lse), -1) {
						t.Fatalf("%s: lse = %v without ok, want -inf", where, lse)
					}
					continue
				}
				tolW := float64(n+8) * 0x1p-24
				for i, w := range ws {
					if d := math.Abs(float64(w) - rw[i]); !(d <= tolW*rw[i]+0x1p-148) {
						t.Fatalf("%s: w[%d] = %g, want %g (diff %g)", where, i, w, rw[i], d)
					}
				}
				ulp := math.Abs(rl) * 0x1p-23
				if d := math.Abs(float64(lse) - rl); !(d <= 2*ulp+float64(n+4)*0x1p-24) {
					t.Fatalf("%s: lse = %v, want %v (diff %g)", where, lse, rl, d)
				}
			}
		}
	}
	t.Run("go", func(t *testing.T) { run(t, vecGo) })
	forVecLevels(t, run)
}

// TestMergeTLSE: a partial temperature LSE of +inf (beyond float32) makes
// the merge +inf, partials that saw no key give -inf, finite ones merge
// as mergeLSE does.
func TestMergeTLSE(t *testing.T) {
	inf, ninf := float32(math.Inf(1)), float32(math.Inf(-1))
	ws := make([]float32, 3)
	for _, lv := range []vec{vecGo, vecLevel()} {
		if got := mergeTLSE([]float32{1, inf, 2}, ws, lv); got != inf {
			t.Errorf("vec %v: +inf partial merged to %v", lv, got)
		}
		if got := mergeTLSE([]float32{ninf, ninf}, ws, lv); got != ninf {
			t.Errorf("vec %v: no key merged to %v", lv, got)
		}
		want, _ := mergeLSE([]float32{1, 2, 3}, ws, lv)
		if got := mergeTLSE([]float32{1, 2, 3}, ws, lv); got != want || math.Abs(float64(got)-(3+math.Log(1+math.Exp(-1)+math.Exp(-2)))) > 1e-6 {
			t.Errorf("vec %v: finite partials merged to %v, want %v", lv, got, want)
		}
	}
}
