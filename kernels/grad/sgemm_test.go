package grad

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestGEMMTilerGemm compares GEMMTiler.Gemm with a float64 product, both
// modes, with a partial row group and padded leading dimensions.
// Tolerance: as in TestGemmTiles, each element is a float32 FMA chain of
// k <= 40 terms of magnitude <= 1 (plus |C| when accumulating), so 1e-5
// of the magnitude sum bounds its error.
func TestGEMMTilerGemm(t *testing.T) {
	g, err := NewGEMMTiler()
	if err != nil {
		t.Skip(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	m, n, k, lda, ldb, ldc := 13, 48, 40, 41, 50, 49
	a, b := randF32s(r, m*lda), randF32s(r, k*ldb)
	for _, acc := range []bool{false, true} {
		c := randF32s(r, m*ldc)
		c0 := append([]float32(nil), c...)
		if err := g.Gemm(m, n, k, a, lda, b, ldb, c, ldc, acc); err != nil {
			t.Fatal(err)
		}
		for i := range m {
			for j := range n {
				want, mag := 0.0, 0.0
				if acc {
					want, mag = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
				}
				for p := range k {
					x := float64(a[i*lda+p]) * float64(b[p*ldb+j])
					want += x
					mag += math.Abs(x)
				}
				if d := math.Abs(float64(c[i*ldc+j]) - want); d > 1e-5*mag {
					t.Fatalf("accumulate %v: C[%d][%d] = %g, want %g", acc, i, j, c[i*ldc+j], want)
				}
			}
			if c[i*ldc+n] != c0[i*ldc+n] {
				t.Fatalf("accumulate %v: C[%d][%d] past n changed", acc, i, n)
			}
		}
	}
}

// TestGEMMTilerGemmBadInput checks that each bad argument gets an error
// naming it.
func TestGEMMTilerGemmBadInput(t *testing.T) {
	g, err := NewGEMMTiler()
	if err != nil {
		t.Skip(err)
	}
	x := make([]float32, 32*32)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"negative m", g.Gemm(-1, 16, 16, x, 16, x, 16, x, 16, false), "m, n, k must be >= 0"},
		{"n not x16", g.Gemm(16, 20, 16, x, 16, x, 20, x, 20, false), "n must be a multiple of 16, got 20"},
		{"lda", g.Gemm(16, 16, 16, x, 15, x, 16, x, 16, false), "lda 15"},
		{"short a", g.Gemm(16, 16, 16, x[:100], 16, x, 16, x, 16, false), "a needs 256 elements"},
		{"short c", g.Gemm(16, 16, 16, x, 16, x, 16, x[:200], 16, false), "c needs 256 elements, got 200"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, tc.err, tc.want)
		}
	}
}
