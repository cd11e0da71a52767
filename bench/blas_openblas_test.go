//go:build openblas && cgo

package main

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// OpenBLAS's Sgemm through the binding agrees with Gonum's on a
// projection-like product (both transposes of B, as Gorgonia's matmuls
// and their gradients call it). Each float32 result rounds at most k+2
// times (k products summed, beta*C, alpha), a relative error of at most
// u = 2^-24 of S = sum |a_t b_t| + |c| each; two such results differ by at
// most 2 (k+2) u S, doubled for second-order terms.
func TestOpenBLASSgemmAgreesWithGonum(t *testing.T) {
	b, err := openBLAS()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const m, n, k = 67, 96, 130
	for _, tB := range []gblas.Transpose{gblas.NoTrans, gblas.Trans} {
		x, w, c0 := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
		for _, s := range [][]float32{x, w, c0} {
			for i := range s {
				s[i] = float32(r.Float64()*2 - 1)
			}
		}
		ldb := n
		if tB == gblas.Trans {
			ldb = k
		}
		got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
		b.Sgemm(gblas.NoTrans, tB, m, n, k, 1, x, k, w, ldb, 0.5, got, n)
		gonum.Implementation{}.Sgemm(gblas.NoTrans, tB, m, n, k, 1, x, k, w, ldb, 0.5, want, n)
		for i := range m {
			for j := range n {
				s := 0.5 * math.Abs(float64(c0[i*n+j]))
				for t := range k {
					bv := w[t*n+j]
					if tB == gblas.Trans {
						bv = w[j*k+t]
					}
					s += math.Abs(float64(x[i*k+t]) * float64(bv))
				}
				tol := 2 * 2 * float64(k+2) * 0x1p-24 * s
				if d := math.Abs(float64(got[i*n+j] - want[i*n+j])); d > tol {
					t.Fatalf("tB %v C[%d,%d]: OpenBLAS %v, Gonum %v (|diff| %g > %g)", tB, i, j, got[i*n+j], want[i*n+j], d, tol)
				}
			}
		}
	}
}
