package blas

import (
	"runtime"
	"sync"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/sparseattn/msa/kernels/grad"
)

// Implementation is Gonum's pure-Go BLAS with Sgemm on the SIMD GEMM
// tiles. The zero value is ready to use and runs on GOMAXPROCS
// goroutines.
type Implementation struct {
	gonum.Implementation
	// Workers is the goroutines of one Sgemm; 0 means GOMAXPROCS.
	Workers int
}

// New returns an Implementation on GOMAXPROCS goroutines.
func New() *Implementation { return &Implementation{} }

// minFlops is the smallest product (m*n*k multiply-adds) the tiles take:
// below it the packing and goroutine start-up cost more than Gonum's
// loops (a 32x32x32 product is about a microsecond either way).
const minFlops = 32 * 32 * 32

// rowBlock is the rows of C one goroutine computes at a time: 64 rows of
// A at k = 1024 are 256 KiB, which stay in L2 while the column panels of
// B pass over them.
const rowBlock = 64

// tilers holds idle GEMM tilers; each goroutine of a product takes one.
var tilers sync.Pool

// Sgemm computes C = alpha * op(A) * op(B) + beta * C, op(X) = X or Xᵀ
// as tA and tB say, with A m×k, B k×n and C m×n after op, all row-major
// (blas.Float32). The first n rounded down to a multiple of 16 columns run
// on the SIMD GEMM tiles, the rest on Gonum's Sgemm. Each element of
// op(A)*op(B) is one FMA chain in k order starting from beta*C, with alpha
// folded into B (alpha*op(B) is rounded once per element).
func (im *Implementation) Sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	n16 := n &^ (grad.GEMMCols - 1)
	if !fastSgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, c, ldc) || n16 == 0 {
		im.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	aT, bT := isTrans(tA), isTrans(tB)
	if n16 < n { // the tail columns: C[:, n16:] from B's last n-n16 columns
		bt := b[n16:]
		if bT {
			bt = b[n16*ldb:]
		}
		im.Implementation.Sgemm(tA, tB, m, n-n16, k, alpha, a, lda, bt, ldb, beta, c[n16:], ldc)
	}
	// A row-major m x k: packed when transposed.
	ap, lap := a, lda
	if aT {
		ap, lap = transpose(a, lda, k, m), k
	}
	// B row-major k x n16 scaled by alpha: packed when transposed or scaled.
	bp, lbp := b, ldb
	if bT || alpha != 1 {
		bp, lbp = make([]float32, k*n16), n16
		for t := range k {
			row := bp[t*n16 : (t+1)*n16]
			for j := range row {
				if bT {
					row[j] = alpha * b[j*ldb+t]
				} else {
					row[j] = alpha * b[t*ldb+j]
				}
			}
		}
	}
	im.parallelRows(m, func(tl *grad.GEMMTiler, r0, r1 int) {
		cr := c[r0*ldc:]
		if beta != 0 && beta != 1 {
			for r := range r1 - r0 {
				row := cr[r*ldc : r*ldc+n16]
				for j := range row {
					row[j] *= beta
				}
			}
		}
		// The arguments were checked above, so Gemm cannot fail.
		if err := tl.Gemm(r1-r0, n16, k, ap[r0*lap:], lap, bp, lbp, cr, ldc, beta != 0); err != nil {
			panic(err)
		}
	})
}

// fastSgemm reports whether the tiles can take an Sgemm call: its
// arguments are valid (else Gonum panics with its message), it has work
// for them (alpha != 0, k > 0) and it is large enough.
func fastSgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	if !validTrans(tA) || !validTrans(tB) || m <= 0 || n <= 0 || k <= 0 || alpha == 0 {
		return false
	}
	if m*n*k < minFlops || !grad.GEMMAvailable() {
		return false
	}
	ar, ac := m, k // op(A) is ar x ac stored as given
	if isTrans(tA) {
		ar, ac = k, m
	}
	br, bc := k, n
	if isTrans(tB) {
		br, bc = n, k
	}
	return lda >= ac && ldb >= bc && ldc >= n &&
		len(a) >= (ar-1)*lda+ac && len(b) >= (br-1)*ldb+bc && len(c) >= (m-1)*ldc+n
}

func validTrans(t gblas.Transpose) bool {
	return t == gblas.NoTrans || t == gblas.Trans || t == gblas.ConjTrans
}

func isTrans(t gblas.Transpose) bool { return t == gblas.Trans || t == gblas.ConjTrans }

// transpose returns the rows x cols row-major transpose of the cols x rows
// matrix x (ld elements per row).
func transpose(x []float32, ld, cols, rows int) []float32 {
	out := make([]float32, rows*cols)
	for t := range cols {
		src := x[t*ld : t*ld+rows]
		for r, v := range src {
			out[r*cols+t] = v
		}
	}
	return out
}

// parallelRows calls fn on blocks of rowBlock rows of [0, m) on the
// implementation's goroutines, each with its own tiler.
func (im *Implementation) parallelRows(m int, fn func(tl *grad.GEMMTiler, r0, r1 int)) {
	blocks := (m + rowBlock - 1) / rowBlock
	workers := im.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, blocks)
	var next sync.Mutex
	nb := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl := getTiler()
			defer tilers.Put(tl)
			for {
				next.Lock()
				i := nb
				nb++
				next.Unlock()
				if i >= blocks {
					return
				}
				fn(tl, i*rowBlock, min(m, (i+1)*rowBlock))
			}
		}()
	}
	wg.Wait()
}

// getTiler takes an idle tiler or makes one (GEMMAvailable was checked).
func getTiler() *grad.GEMMTiler {
	if tl, ok := tilers.Get().(*grad.GEMMTiler); ok {
		return tl
	}
	tl, err := grad.NewGEMMTiler()
	if err != nil {
		panic(err)
	}
	return tl
}
