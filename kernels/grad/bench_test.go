package grad

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/plan"
)

// benchShape is the benchmark problem: one causal sequence of T tokens,
// HQ 16, Hkv 1, D 128, blk 128, topK 16; every query selects its visible
// blocks (at most 16), as in the bench program's causal workload.
const (
	benchT    = 2048
	benchHQ   = 16
	benchD    = 128
	benchTopK = 16
	benchBlk  = 128
)

// benchProblem builds the benchmark problem and its forward flops
// (4*D per visible (query, head, key)).
func benchProblem(b *testing.B) (*Problem, *tensors, float64) {
	q2k := make([]int32, benchT*benchTopK)
	flops := 0.0
	for q := 0; q < benchT; q++ {
		list := q2k[q*benchTopK : (q+1)*benchTopK]
		for i := range list {
			list[i] = -1
		}
		nb := min(benchTopK, q/benchBlk+1)
		for i := 0; i < nb; i++ {
			list[i] = int32(q/benchBlk - i)
		}
		lo := (q/benchBlk - nb + 1) * benchBlk
		flops += 4 * benchD * benchHQ * float64(q+1-lo)
	}
	cu := []int32{0, benchT}
	csr, err := plan.BuildK2QCSR(nil, q2k, 1, benchT, benchTopK, cu, cu, benchBlk)
	if err != nil {
		b.Fatal(err)
	}
	p := &Problem{
		TotalQ: benchT, HQ: benchHQ, Hkv: 1, D: benchD, CuQ: cu, CuK: cu, TotalK: benchT,
		BlkKV: benchBlk, TopK: benchTopK, Causal: true, Scale: 1 / math.Sqrt(benchD), CSR: csr,
	}
	r := rand.New(rand.NewPCG(1, 2))
	x := &tensors{
		q: toF32(randVec(r, benchT*benchHQ*benchD, 1)), k: toF32(randVec(r, benchT*benchD, 1)),
		v: toF32(randVec(r, benchT*benchD, 1)), dO: toF32(randVec(r, benchT*benchHQ*benchD, 1)),
		dLSE: toF32(randVec(r, benchT*benchHQ, 1)),
	}
	x.o, x.dq = make([]float32, len(x.q)), make([]float32, len(x.q))
	x.lse = make([]float32, benchT*benchHQ)
	x.dk, x.dv = make([]float32, len(x.k)), make([]float32, len(x.v))
	return p, x, flops
}

// BenchmarkForwardF32 reports the float32 forward's GFLOP/s (visible
// flops, 4*D per (query, head, key)) on 1 and 2 workers.
func BenchmarkForwardF32(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			p, x, flops := benchProblem(b)
			pool := attn.NewPool(workers)
			defer pool.Close()
			ws := NewWorkspace(pool)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := ws.Forward(p, x.q, x.k, x.v, x.o, x.lse); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkBackward reports the backward's GFLOP/s, counting 2.5x the
// forward's flops (the FlashAttention convention), on 1 and 2 workers.
func BenchmarkBackward(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			p, x, flops := benchProblem(b)
			pool := attn.NewPool(workers)
			defer pool.Close()
			ws := NewWorkspace(pool)
			if err := ws.Forward(p, x.q, x.k, x.v, x.o, x.lse); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := ws.Backward(p, x.q, x.k, x.v, x.o, x.lse, x.dO, x.dLSE, x.dq, x.dk, x.dv); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2.5*flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmTile times the GEMM tiles of the avx512 and avx2 tiers on
// the backward's tile shape (64 rows, 128 columns, reduction 128) and
// reports GFLOP/s; compare with calib.PeakGFLOPS of the tier
// (go test ./kernels/tile -bench Peak).
func BenchmarkGemmTile(b *testing.B) {
	for _, tier := range gemmTiers {
		b.Run(tier, func(b *testing.B) {
			wk := tileWorker(b, tier)
			m, n, k := 64, 128, 128
			rng := rand.New(rand.NewPCG(1, 2))
			a, bb := randF32s(rng, m*k), randF32s(rng, k*n)
			c := make([]float32, m*n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				wk.gemmRow(c, n, a, k, bb, n, m, n, k, false)
			}
			b.ReportMetric(float64(2*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
