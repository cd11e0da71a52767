package blas

import (
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

// Sgemm computes C = alpha * op(A) * op(B) + beta * C, op(X) = X or Xᵀ
// as tA and tB say, with A m×k, B k×n and C m×n after op, all row-major
// (blas.Float32). The first n rounded down to a multiple of 16 columns run
// on the SIMD GEMM tiles, the rest on Gonum's Sgemm. Each element of
// op(A)*op(B) is one FMA chain in k order starting from beta*C, with alpha
// folded into B (alpha*op(B) is rounded once per element). Warm (packing
// buffers and helper goroutines made by an earlier call of the same or a
// larger size), a tiled call allocates nothing.
func (im Implementation) Sgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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
	j := jobs.Get().(*job)
	// Small m reads each panel of B once or twice: packing it would cost
	// as much as the product.
	j.sgemmArgs = sgemmArgs{aT: aT, bT: bT, m: m, n16: n16, k: k, alpha: alpha, beta: beta,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, packB: bT || alpha != 1 || m > smallM}
	j.run(im.Workers)
	j.sgemmArgs, j.bp = sgemmArgs{}, nil // keep no caller memory alive in the pool
	jobs.Put(j)
}

// smallM is the largest m whose B is used in place (two 8-row groups).
const smallM = 16

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
