package op

import (
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// benchPrefill builds one causal sequence of n tokens, Hq=16, Hkv=1, D=128,
// where each query selects its diagonal block plus random visible blocks
// (topK in all), and returns the call and its visible flop count.
func benchPrefill(b *testing.B, n, topK int) (func() *Result, float64) {
	rng := rand.New(rand.NewPCG(1, 1))
	const hq, hkv, d, blk = 16, 1, 128, 128
	mk := func(rows int) *tensor.Dense {
		s := make([]lowp.BFloat16, rows*d)
		for i := range s {
			s[i] = lowp.BF16(float32(rng.NormFloat64()))
		}
		return tensor.New(tensor.WithShape(rows/1, 1, d), tensor.WithBacking(s))
	}
	q := mk(n * hq)
	q.Reshape(n, hq, d)
	k, v := mk(n), mk(n)
	q2k := make([]int32, n*topK)
	flops := 0.0
	for i := 0; i < n; i++ {
		bi := i / blk
		list := q2k[i*topK : (i+1)*topK]
		for j := range list {
			list[j] = -1
		}
		list[0] = int32(bi)
		perm := rng.Perm(bi)
		for j := 1; j < topK && j-1 < len(perm); j++ {
			list[j] = int32(perm[j-1])
		}
		for _, j := range list {
			if j < 0 {
				continue
			}
			vis := blk
			if int(j) == bi {
				vis = i - bi*blk + 1
			}
			flops += 4 * float64(d*hq*vis)
		}
	}
	cu := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(n)}))
	q2kT := tensor.New(tensor.WithShape(1, n, topK), tensor.WithBacking(q2k))
	rp, qi, err := K2QCSRFunc(q2kT, cu, cu, blk)
	if err != nil {
		b.Fatal(err)
	}
	return func() *Result {
		res, err := SparseAttentionFunc(q, k, v, rp, qi, topK, SparseArgs{CuSeqlensQ: cu, CuSeqlensK: cu, Causal: true})
		if err != nil {
			b.Fatal(err)
		}
		return res
	}, flops
}

// BenchmarkSparsePrefill reports the end-to-end (schedule, partials,
// combine) visible GFLOP/s of a 4K-token causal prefill with topK 16.
func BenchmarkSparsePrefill(b *testing.B) {
	run, flops := benchPrefill(b, 4096, 16)
	run()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
