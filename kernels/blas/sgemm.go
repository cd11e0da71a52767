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
	// Small m reads each panel of B once or twice: packing it would cost
	// as much as the product.
	packed := bT || alpha != 1 || m > smallM
	bp := b
	if packed {
		bp = packB(b, ldb, bT, k, n16, alpha)
	}
	lap := k + aPad
	im.parallel(m, n16, lap, func(tl *grad.GEMMTiler, ap []float32, r0, r1, j0, j1 int) {
		packA(ap, lap, a, lda, aT, r0, r1, k)
		cr := c[r0*ldc:]
		if beta != 0 && beta != 1 {
			for r := range r1 - r0 {
				row := cr[r*ldc+j0 : r*ldc+j1]
				for j := range row {
					row[j] *= beta
				}
			}
		}
		for p0 := j0; p0 < j1; p0 += panelCols {
			w := min(panelCols, j1-p0)
			bw, ldw := bp[p0:], ldb
			if packed {
				bw, ldw = bp[p0*k:], w
			}
			// The arguments were checked above, so Gemm cannot fail.
			if err := tl.Gemm(r1-r0, w, k, ap, lap, bw, ldw, cr[p0:], ldc, beta != 0); err != nil {
				panic(err)
			}
		}
	})
}

// smallM is the largest m whose B is used in place (two 8-row groups).
const smallM = 16

// panelCols is the width of a packed panel of B: one 8x32 AVX-512 tile
// (two 16-column tiles on AVX2).
const panelCols = 32

// packB returns alpha*op(B) (k x n16) as consecutive column panels of
// panelCols columns (the last one possibly 16), each k rows of its width
// stored contiguously: the tiles then read B sequentially. Row-major B
// with a leading dimension of a power-of-two size maps the panel's rows
// to a few cache sets, which the packing avoids.
func packB(b []float32, ldb int, bT bool, k, n16 int, alpha float32) []float32 {
	bp := make([]float32, k*n16)
	for j0 := 0; j0 < n16; j0 += panelCols {
		w := min(panelCols, n16-j0)
		p := bp[j0*k : j0*k+k*w]
		for t := range k {
			row := p[t*w : (t+1)*w]
			if bT {
				for j := range row {
					row[j] = alpha * b[(j0+j)*ldb+t]
				}
				continue
			}
			src := b[t*ldb+j0 : t*ldb+j0+w]
			if alpha == 1 {
				copy(row, src)
				continue
			}
			for j, v := range src {
				row[j] = alpha * v
			}
		}
	}
	return bp
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

// aPad is the padding of a packed row of A: rows k+16 elements apart do
// not all map to one cache set when k is a power of two, as the eight
// rows a tile reads at once would.
const aPad = 16

// packA copies rows [r0, r1) of op(A) (k columns) to ap, lap elements per
// row.
func packA(ap []float32, lap int, a []float32, lda int, aT bool, r0, r1, k int) {
	for r := r0; r < r1; r++ {
		dst := ap[(r-r0)*lap : (r-r0)*lap+k]
		if !aT {
			copy(dst, a[r*lda:r*lda+k])
			continue
		}
		for t := range dst {
			dst[t] = a[t*lda+r]
		}
	}
}

// parallel calls fn on the blocks of C, rowBlock rows [r0, r1) by
// column chunks [j0, j1) of whole panels, on the implementation's
// goroutines, each with its own tiler and a buffer of rowBlock rows of
// lap elements for its rows of A. Columns are split only when there are
// too few row blocks to keep every goroutine busy (decode's few rows).
func (im Implementation) parallel(m, n16, lap int, fn func(tl *grad.GEMMTiler, ap []float32, r0, r1, j0, j1 int)) {
	blocks := (m + rowBlock - 1) / rowBlock
	workers := im.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	panels := (n16 + panelCols - 1) / panelCols
	chunks := 1
	if blocks < 2*workers {
		chunks = min(panels, (2*workers+blocks-1)/blocks)
	}
	chunkCols := (panels + chunks - 1) / chunks * panelCols
	chunks = (n16 + chunkCols - 1) / chunkCols
	items := blocks * chunks
	workers = min(workers, items)
	var next sync.Mutex
	ni := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl := getTiler()
			defer tilers.Put(tl)
			ap := make([]float32, rowBlock*lap)
			for {
				next.Lock()
				i := ni
				ni++
				next.Unlock()
				if i >= items {
					return
				}
				rb, cb := i/chunks, i%chunks
				fn(tl, ap, rb*rowBlock, min(m, (rb+1)*rowBlock), cb*chunkCols, min(n16, (cb+1)*chunkCols))
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
