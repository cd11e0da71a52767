package grad

import (
	"math"
	"testing"
)

// Tolerances of the float32 kernels against the float64 reference, as the
// largest error relative to the largest |reference| of the quantity
// (LSE: absolute). Inputs are O(1) and D <= 128, so a float32 dot product
// has a relative error of a few 1e-7 (sum of D rounded products, partial
// sums of D/4 terms); exp and the online rescaling add a few ulp; dK and dV
// then sum O(100..1000) such terms over the queries and heads that selected
// a key, dQ over topK*blk keys: errors grow like sqrt(terms) * 6e-8 (random
// rounding), i.e. about 1e-6 relative. The bounds leave a margin of about
// 10x over the worst case measured on the shape matrix.
const (
	tolO    = 4e-6
	tolLSE  = 4e-6
	tolGrad = 8e-6
)

// matrixShapes is the float32-vs-reference shape matrix: GQA 1/2/4/16,
// causal or not, dense or paged (with a shared page), D 64/128, topK 1..8.
func matrixShapes() []shape {
	var out []shape
	seed := uint64(100)
	for _, g := range []int{1, 2, 4, 16} {
		for _, causal := range []bool{false, true} {
			for _, paged := range []bool{false, true} {
				for _, d := range []int{64, 128} {
					seed++
					hkv := 1
					if g <= 2 {
						hkv = 2
					}
					out = append(out, shape{
						seqQ: []int{37, 0, 61}, seqK: []int{100, 30, 150}, hq: g * hkv, hkv: hkv, d: d,
						topK: int(seed%8) + 1, blk: 32, causal: causal, paged: paged, pageSize: 16 << (seed % 3),
						shared: paged, pad: 0.15, qOffset: int(seed % 2), seed: seed,
					})
				}
			}
		}
	}
	return out
}

// TestFloat32MatchesReference compares the float32 Forward and Backward
// with the float64 reference over the shape matrix and the
// finite-difference shapes, with and without the LSE gradient.
func TestFloat32MatchesReference(t *testing.T) {
	shapes := append(matrixShapes(), fdShapes...)
	worst := map[string]float64{}
	for n, s := range shapes {
		withLSE := n%2 == 0
		in := newInstance(t, s)
		var dLSE []float64
		if withLSE {
			dLSE = in.dLSE
		}
		ref := in.reference(in.q, in.k, in.v, in.dO, dLSE)
		o, lse, dq, dk, dv := run32(t, in, 2, withLSE)
		for _, c := range []struct {
			name string
			got  []float32
			want []float64
			tol  float64
		}{{"O", o, ref.o, tolO}, {"dQ", dq, ref.dq, tolGrad}, {"dK", dk, ref.dk, tolGrad}, {"dV", dv, ref.dv, tolGrad}} {
			_, rel := errStat(c.got, c.want)
			worst[c.name] = max(worst[c.name], rel)
			if !(rel <= c.tol) {
				t.Errorf("%v (dLSE %v): %s relative error %.3g > %.3g", s, withLSE, c.name, rel, c.tol)
			}
		}
		var lseErr float64
		for i, w := range ref.lse {
			g := float64(lse[i])
			if math.IsInf(w, -1) != math.IsInf(g, -1) {
				t.Fatalf("%v: LSE[%d] = %v, want %v", s, i, g, w)
			}
			if !math.IsInf(w, -1) {
				lseErr = max(lseErr, math.Abs(g-w))
			}
		}
		worst["LSE"] = max(worst["LSE"], lseErr)
		if lseErr > tolLSE {
			t.Errorf("%v: LSE error %.3g > %.3g", s, lseErr, tolLSE)
		}
	}
	t.Logf("%d shapes; worst errors: O %.3g, LSE %.3g (abs), dQ %.3g, dK %.3g, dV %.3g (relative to max |ref|)",
		len(shapes), worst["O"], worst["LSE"], worst["dQ"], worst["dK"], worst["dV"])
}
