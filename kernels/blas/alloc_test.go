package blas

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	gblas "gonum.org/v1/gonum/blas"

	"github.com/sparseattn/msa/kernels/grad"
)

// A warm tiled Sgemm allocates nothing: the packing buffers, tilers and
// helper goroutines of an earlier call of the same size are reused. The
// shapes take both packing routes (packed B; B in place for few rows) and
// the column split of few-row products, on two workers. Without the tiles
// (purego, the generic tier) Sgemm is Gonum's, whose allocations are its
// own.
func TestSgemmWarmAllocsNothing(t *testing.T) {
	if !grad.GEMMAvailable() {
		t.Skip("no GEMM tiles on this tier or build: Sgemm is Gonum's")
	}
	r := rand.New(rand.NewPCG(11, 12))
	im := &Implementation{Workers: 2}
	for _, sh := range [][3]int{{256, 256, 192}, {8, 512, 256}, {100, 64, 130}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		for _, tB := range []gblas.Transpose{gblas.NoTrans, gblas.Trans} {
			ldb := n
			if tB == gblas.Trans {
				ldb = k
			}
			call := func() { im.Sgemm(gblas.NoTrans, tB, m, n, k, 1, a, k, b, ldb, 0, c, n) }
			call()
			if got := testing.AllocsPerRun(20, call); got != 0 {
				t.Errorf("%dx%dx%d tB %c: %v allocations per warm call, want 0", m, n, k, tB, got)
			}
		}
	}
}

// Concurrent Sgemm calls share the helper goroutines: each finishes with
// the result of a call made alone (no deadlock, no mixed-up jobs), also
// when they ask for more helpers than there are CPUs.
func TestSgemmConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const m, n, k, calls = 150, 96, 80, 6
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	want := make([]float32, m*n)
	(&Implementation{Workers: 1}).Sgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 1, a, k, b, n, 0, want, n)
	var wg sync.WaitGroup
	errs := make(chan string, calls)
	for g := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			im := &Implementation{Workers: 2 + g%3}
			for range 20 {
				c := make([]float32, m*n)
				im.Sgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 1, a, k, b, n, 0, c, n)
				for i := range c {
					if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
						errs <- "a concurrent call's C differs from the one made alone"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
