package graphtest

import (
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestSparseGraphMatchesEager builds q2k -> CSR -> schedule -> attention ->
// (out, LSE, temperature LSE) as one graph and runs it in a TapeMachine and
// a LispMachine; both must equal the eager API bit for bit, and the LSE
// nodes must not recompute the attention.
func TestSparseGraphMatchesEager(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seqQ, seqK := []int{33, 0, 70}, []int{260, 10, 400}
	const hq, hkv, d, topK, blk, workers = 8, 2, 128, 4, 128, 2
	totalQ, totalK := 103, 670
	q := randBF16(rng, totalQ, hq, d)
	k := randBF16(rng, totalK, hkv, d)
	v := randBF16(rng, totalK, hkv, d)
	q2k := i32([]int{hkv, totalQ, topK}, randQ2K(rng, hkv, topK, blk, seqQ, seqK))
	cuQ := i32([]int{4}, prefix(seqQ))
	cuK := i32([]int{4}, prefix(seqK))

	// Eager reference.
	rp, qi, err := op.K2QCSRFunc(q2k, cuQ, cuK, blk)
	must(t, err)
	want, err := op.SparseAttentionFunc(q, k, v, rp, qi, topK, op.SparseArgs{
		CuSeqlensQ: cuQ, CuSeqlensK: cuK, Causal: true, Temperature: 0.7,
		ReturnTemperatureLSE: true, Workers: workers,
	})
	must(t, err)

	for _, machine := range []string{"tape", "lisp"} {
		t.Run(machine, func(t *testing.T) {
			g := G.NewGraph()
			qn, kn, vn := input(g, "q", q), input(g, "k", k), input(g, "v", v)
			q2kn, cuQn, cuKn := input(g, "q2k", q2k), input(g, "cu_q", cuQ), input(g, "cu_k", cuK)
			csr, err := op.K2QCSR(q2kn, cuQn, cuKn, op.BlkKV(blk), op.MaxSeqlenK(400))
			must(t, err)
			sched, err := op.FwdSchedule(csr, cuQn, cuKn, op.QheadPerKV(hq/hkv), op.Workers(workers))
			must(t, err)
			out, err := op.SparseAttention(qn, kn, vn, csr, sched, cuQn, cuKn,
				op.Causal(), op.Temperature(0.7), op.Workers(workers))
			must(t, err)
			lse, err := op.LSE(out)
			must(t, err)
			tlse, err := op.TemperatureLSE(out)
			must(t, err)
			m := newMachine(g, machine)
			defer func() { m.Close() }()
			for run := 0; run < 2; run++ {
				must(t, m.RunAll())
				sameBits(t, "out", out.Value().(*tensor.Dense), want.Out)
				sameBits(t, "lse", lse.Value().(*tensor.Dense), want.LSE)
				sameBits(t, "temperature lse", tlse.Value().(*tensor.Dense), want.TemperatureLSE)
				m = resetMachine(g, m, machine)
			}
		})
	}
}
