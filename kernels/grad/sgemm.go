package grad

import (
	"errors"
	"fmt"
)

// GEMMCols is the column granularity of GEMM: its column count must be a
// multiple of it (the tiles are 16, 24 or 32 columns wide).
const GEMMCols = 16

// GEMMAvailable reports whether GEMM runs on this CPU and tile tier: the
// active tier runs SIMD kernels (AVX2+FMA or AVX-512) and the assembly is
// built in.
func GEMMAvailable() bool { return haveAsm && useAsm(GEMMCols) }

// GEMMTiler runs the register-blocked GEMM tiles of the active tier
// outside the attention kernels. A GEMMTiler is not safe for concurrent
// use: give each goroutine its own (the tiles keep their C row pointers
// and tail rows in it).
type GEMMTiler struct{ wk worker }

// NewGEMMTiler returns a tiler on the active tile tier, or an error when
// GEMMAvailable is false.
func NewGEMMTiler() (*GEMMTiler, error) {
	if !GEMMAvailable() {
		return nil, errors.New("grad: GEMM tiles need the avx2 or avx512 tile tier on an amd64 build without purego")
	}
	return &GEMMTiler{wk: worker{simd: true, simd512: useAsm512(GEMMCols)}}, nil
}

// Gemm sets (accumulate false) or adds to (accumulate true) the m x n
// block of C the row-major product A.B:
//
//	c[r*ldc+j] (+)= sum_{t<k} a[r*lda+t] * b[t*ldb+j]
//
// n must be a multiple of GEMMCols. Each element is one FMA chain in t
// order. The slices must hold every element the product reads or
// writes.
func (g *GEMMTiler) Gemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) error {
	switch {
	case m < 0 || n < 0 || k < 0:
		return fmt.Errorf("grad: Gemm: m, n, k must be >= 0, got %d, %d, %d", m, n, k)
	case n%GEMMCols != 0:
		return fmt.Errorf("grad: Gemm: n must be a multiple of %d, got %d", GEMMCols, n)
	case lda < k || ldb < n || ldc < n:
		return fmt.Errorf("grad: Gemm: leading dimensions must be >= (k, n, n) = (%d, %d, %d), got lda %d, ldb %d, ldc %d", k, n, n, lda, ldb, ldc)
	}
	if !GEMMAvailable() {
		return errors.New("grad: Gemm: the active tile tier has no GEMM tiles (tile.SetTier changed it)")
	}
	g.wk.simd512 = useAsm512(GEMMCols) // follow the active tier
	if m == 0 || n == 0 {
		return nil
	}
	if k > 0 && (len(a) < (m-1)*lda+k || len(b) < (k-1)*ldb+n) {
		return fmt.Errorf("grad: Gemm: a needs %d elements and b %d, got %d and %d", (m-1)*lda+k, (k-1)*ldb+n, len(a), len(b))
	}
	if len(c) < (m-1)*ldc+n {
		return fmt.Errorf("grad: Gemm: c needs %d elements, got %d", (m-1)*ldc+n, len(c))
	}
	if k == 0 {
		if !accumulate {
			for r := range m {
				clear(c[r*ldc : r*ldc+n])
			}
		}
		return nil
	}
	g.wk.gemmRow(c, ldc, a, lda, b, ldb, m, n, k, accumulate)
	return nil
}
