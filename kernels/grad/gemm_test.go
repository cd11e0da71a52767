package grad

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/tile"
)

// gemmTiers are the tiers with their own GEMM tiles.
var gemmTiers = []string{"avx512", "avx2"}

// tileWorker switches tile to tier for the test and returns a worker set
// up for it as Workspace.ensure would (head dimension 16), or skips the
// test when this CPU or build has no GEMM tiles of that tier.
func tileWorker(tb testing.TB, tier string) *worker {
	tb.Helper()
	prev := tile.TierSetting()
	if !haveAsm || tile.SetTier(tier) != nil {
		tb.Skipf("no %s GEMM tiles on this CPU or build", tier)
	}
	tb.Cleanup(func() { _ = tile.SetTier(prev) })
	wk := &worker{simd: useAsm(16), simd512: useAsm512(16)}
	if !wk.simd || wk.simd512 != (tier != "avx2") {
		tb.Fatalf("tier %s: simd %v, simd512 %v", tier, wk.simd, wk.simd512)
	}
	return wk
}

// TestGemmTiles compares gemmRow and gemmCol with a float64 product, on
// the tiles of every tier in gemmTiers, over shapes that leave partial row
// groups (m % 8 != 0, m % 4 != 0), every mix of column tiles (32 and 16 on
// avx512; 24 and 16 on avx2), an empty reduction, both load modes, and
// padded leading dimensions; the elements around C's block must stay
// untouched. Tolerance: each element is a float32 FMA chain of k terms of
// magnitude <= 1, so its error is below k * 2^-24 * sum|terms| (k <= 70:
// < 5e-6 of sum|terms|); 1e-5 relative to sum|terms| (plus |C| when
// loading) is a strict bound.
func TestGemmTiles(t *testing.T) {
	for _, tier := range gemmTiers {
		t.Run(tier, func(t *testing.T) { testGemmTiles(t, tileWorker(t, tier)) })
	}
}

// testGemmTiles is TestGemmTiles on the tiles of wk.
func testGemmTiles(t *testing.T, wk *worker) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, m := range []int{1, 3, 4, 5, 7, 8, 9, 13, 17} {
		for _, ncols := range []int{16, 32, 48, 64, 80, 128} {
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
							wk.gemmCol(c, ldc, a, csA, b, ldb, m, ncols, k, load)
						} else {
							wk.gemmRow(c, ldc, a, lda, b, ldb, m, ncols, k, load)
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

// TestGemmTileOrder checks the FMA-chain contract on the tiles of every
// tier in gemmTiers: the same product cut into different row groups and
// column tiles gives bit-identical elements (row r computed alone equals
// row r computed among 17 rows, and each 16-column block computed alone
// equals it within 64 columns, where avx2 runs 24-column tiles).
func TestGemmTileOrder(t *testing.T) {
	for _, tier := range gemmTiers {
		t.Run(tier, func(t *testing.T) {
			wk := tileWorker(t, tier)
			rng := rand.New(rand.NewPCG(9, 10))
			m, n, k := 17, 64, 33
			a, b := randF32s(rng, m*k), randF32s(rng, k*n)
			all := make([]float32, m*n)
			wk.gemmRow(all, n, a, k, b, n, m, n, k, false)
			for r := 0; r < m; r++ {
				one := make([]float32, n)
				wk.gemmRow(one, n, a[r*k:], k, b, n, 1, n, k, false)
				for j := range one {
					if math.Float32bits(one[j]) != math.Float32bits(all[r*n+j]) {
						t.Fatalf("row %d col %d: alone %v, in a group %v", r, j, one[j], all[r*n+j])
					}
				}
			}
			for j0 := 0; j0 < n; j0 += 16 {
				part := make([]float32, m*16)
				wk.gemmRow(part, 16, a, k, b[j0:], n, m, 16, k, false)
				for r := 0; r < m; r++ {
					for j := range 16 {
						if math.Float32bits(part[r*16+j]) != math.Float32bits(all[r*n+j0+j]) {
							t.Fatalf("row %d col %d: 16 columns alone %v, in %d %v", r, j0+j, part[r*16+j], n, all[r*n+j0+j])
						}
					}
				}
			}
		})
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

// TestGemmNoAllocs: gemmRow and gemmCol run in the backward's inner loops
// and must not allocate (the tile walk's row pointers live in the worker).
func TestGemmNoAllocs(t *testing.T) {
	for _, tier := range gemmTiers {
		t.Run(tier, func(t *testing.T) {
			wk := tileWorker(t, tier)
			a, b, c := make([]float32, 64*128), make([]float32, 128*128), make([]float32, 64*128)
			n := testing.AllocsPerRun(20, func() {
				wk.gemmRow(c, 128, a, 128, b, 128, 64, 128, 128, false)
				wk.gemmCol(c, 128, a, 64, b, 128, 64, 128, 128, true)
			})
			if n != 0 {
				t.Fatalf("%v allocations per gemmRow + gemmCol", n)
			}
		})
	}
}
