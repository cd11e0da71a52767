package blas

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/tensor"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/internal/cputime"
	"github.com/sparseattn/msa/kernels/tile"
)

// peak1 is the FMA peak of one goroutine on the active tile tier
// (calib.PeakGFLOPS), measured once.
var peak1 = sync.OnceValue(func() float64 {
	return calib.PeakGFLOPS(tile.PeakLoop(tile.Tier()), 300*time.Millisecond)
})

// BenchmarkSgemm compares Gonum's Sgemm (Gorgonia's default BLAS) with
// this package's on the projection shapes of the bench's graph group at
// d_model 1024, Hq x D = 2048: the Q and O projections of a 2K-token
// prefill and the Q projection of a batch-8 decode step, on one goroutine and on
// GOMAXPROCS. It reports the GFLOP/s of the fastest product (2*m*n*k
// flops; on a time-shared machine that is the rate when the goroutines
// had their cores, like peak1's best window) and, on one goroutine, its
// percentage of peak1. GFLOP/CPU-s divides the flops by the process's CPU
// time of the call (best call; unix): what the code does while it runs,
// which a machine shared with other processes does not change much.
// With -tags openblas, OpenBLAS runs too (on its own threads, whose CPU
// time counts as well).
func BenchmarkSgemm(b *testing.B) {
	for _, sh := range [][3]int{{2048, 2048, 1024}, {2048, 1024, 2048}, {8, 2048, 1024}} {
		m, n, k := sh[0], sh[1], sh[2]
		r := rand.New(rand.NewPCG(5, 6))
		a, bm, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		impls := []struct {
			name    string
			im      tensor.BLAS
			workers int
		}{
			{"gonum", gonum.Implementation{}, 0},
			{"msa-1", &Implementation{Workers: 1}, 1},
			{"msa", New(), 0},
		}
		if ob, err := OpenBLAS(); err == nil { // -tags openblas
			impls = append(impls, struct {
				name    string
				im      tensor.BLAS
				workers int
			}{"openblas", ob, 0})
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", m, n, k, impl.name), func(b *testing.B) {
				best, bestCPU := time.Duration(1<<62), time.Duration(1<<62)
				for b.Loop() {
					c0, cpuOK := cputime.Process()
					t0 := time.Now()
					impl.im.Sgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 1, a, k, bm, n, 0, c, n)
					best = min(best, time.Since(t0))
					if c1, ok := cputime.Process(); ok && cpuOK && c1 > c0 {
						bestCPU = min(bestCPU, c1-c0)
					}
				}
				gf := 2 * float64(m*n*k) / best.Seconds() / 1e9
				b.ReportMetric(gf, "best-GFLOP/s")
				if bestCPU < 1<<62 {
					b.ReportMetric(2*float64(m*n*k)/bestCPU.Seconds()/1e9, "GFLOP/CPU-s")
				}
				if impl.workers == 1 {
					b.ReportMetric(100*gf/peak1(), "%peak1")
				}
			})
		}
	}
}
