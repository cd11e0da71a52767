package grad

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/tile"
)

// useTier512 switches tile to the avx512 tier for the test, or skips it
// when this CPU or build has no AVX-512 GEMM tiles.
func useTier512(tb testing.TB) {
	tb.Helper()
	prev := tile.Tier()
	if err := tile.SetTier("avx512"); err != nil || !useAsm512(16) {
		tb.Skip("no AVX-512 GEMM tiles on this CPU or build")
	}
	tb.Cleanup(func() { _ = tile.SetTier(prev) })
}

// TestGemmTiles compares gemmRow and gemmCol with a float64 product over
// shapes that leave partial row groups (m % 8 != 0), 16-column tails, an
// empty reduction, both load modes, and padded leading dimensions; the
// elements around C's block must stay untouched. Tolerance: each element
// is a float32 FMA chain of k terms of magnitude <= 1, so its error is
// below k * 2^-24 * sum|terms| (k <= 70: < 5e-6 of sum|terms|); 1e-5
// relative to sum|terms| (plus |C| when loading) is a strict bound.
func TestGemmTiles(t *testing.T) {
	useTier512(t)
	rng := rand.New(rand.NewPCG(7, 8))
	var scr [8][32]float32
	for _, m := range []int{1, 7, 8, 9, 17} {
		for _, ncols := range []int{16, 32, 48, 64} {
			for _, k := range []int{0, 1, 2, 5, 70} {
				for _, load := range []bool{false, true} {
					for _, col := range []bool{false, true} {
						lda, ldb, ldc := k+3, ncols+5, ncols+16
						csA := m + 9 // Col layout: A(r,t) = a[r+t*csA]
						a := randF32s(rng, max(m*lda, (k+1)*csA+8))
						b := randF32s(rng, max(1, k)*ldb)
						c0 := randF32s(rng, (m+1)*ldc)
						c := append([]float32(nil), c0...)
						if col {
							gemmCol(&scr, c, ldc, a, csA, b, ldb, m, ncols, k, load)
						} else {
							gemmRow(&scr, c, ldc, a, lda, b, ldb, m, ncols, k, load)
						}
						for r := 0; r <= m; r++ {
							for j := 0; j < ldc; j++ {
								got := c[r*ldc+j]
								if r == m || j >= ncols {
									if got != c0[r*ldc+j] {
										t.Fatalf("m=%d n=%d k=%d: element (%d,%d) outside the block changed", m, ncols, k, r, j)
									}
									continue
								}
								want, mag := 0.0, 0.0
								if load {
									want, mag = float64(c0[r*ldc+j]), math.Abs(float64(c0[r*ldc+j]))
								}
								for x := 0; x < k; x++ {
									av := a[r*lda+x]
									if col {
										av = a[r+x*csA]
									}
									p := float64(av) * float64(b[x*ldb+j])
									want += p
									mag += math.Abs(p)
								}
								if math.Abs(float64(got)-want) > 1e-5*mag+1e-30 {
									t.Fatalf("col=%v load=%v m=%d n=%d k=%d: C(%d,%d) = %v, want %v", col, load, m, ncols, k, r, j, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmTileOrder checks the FMA-chain contract: the same product cut
// into different row groups and column tiles gives bit-identical elements
// (row r computed alone equals row r computed among 17 rows).
func TestGemmTileOrder(t *testing.T) {
	useTier512(t)
	rng := rand.New(rand.NewPCG(9, 10))
	var scr [8][32]float32
	m, n, k := 17, 48, 33
	a, b := randF32s(rng, m*k), randF32s(rng, k*n)
	all := make([]float32, m*n)
	gemmRow(&scr, all, n, a, k, b, n, m, n, k, false)
	for r := 0; r < m; r++ {
		one := make([]float32, n)
		gemmRow(&scr, one, n, a[r*k:], k, b, n, 1, n, k, false)
		for j := range one {
			if math.Float32bits(one[j]) != math.Float32bits(all[r*n+j]) {
				t.Fatalf("row %d col %d: alone %v, in a group %v", r, j, one[j], all[r*n+j])
			}
		}
	}
}

// randF32s returns n float32 values uniform in [-1, 1).
func randF32s(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(2*r.Float64() - 1)
	}
	return x
}
