package op

import (
	"bytes"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// selectProblem returns q [10, 4, 64], k, v [500, 2, 64] and the prefix
// sums of two sequences (6 and 4 queries over 300 and 200 keys).
func selectProblem(dt string) (q, k, v, cuQ, cuK *tensor.Dense) {
	s := sparseSpec{seed: 41, seqQ: []int{6, 4}, seqK: []int{300, 200}, hq: 4, hkv: 2, d: 64, topK: 2, blk: 64,
		qDt: "bf16", kvDt: "bf16"}
	pr := buildSparse(s)
	q, k, v = pr.q, pr.k, pr.v
	if dt == "f32" {
		rng := rand.New(rand.NewPCG(41, 1))
		f := func(x *tensor.Dense) *tensor.Dense {
			d := make([]float32, x.Shape().TotalSize())
			for i := range d {
				d[i] = float32(rng.NormFloat64())
			}
			return tensor.New(tensor.WithShape(x.Shape()...), tensor.WithBacking(d))
		}
		q, k, v = f(q), f(k), f(v)
	}
	return q, k, v, pr.cuQ, pr.cuK
}

// TestBlockSparseAttentionMatchesChain: the one-call forms give the bits
// of the five building blocks chained by hand, eager and graph, for
// BFloat16 and float32 operands.
func TestBlockSparseAttentionMatchesChain(t *testing.T) {
	for _, dt := range []string{"bf16", "f32"} {
		q, k, v, cuQ, cuK := selectProblem(dt)
		scores, err := BlockScoresFunc(q, k, cuQ, cuK, BlockScoreConfig{BlkKV: 64, Causal: true, Reduce: ReduceMean, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		q2k, err := TopKBlocksFunc(scores, 2, TopKConfig{KeepFirst: true})
		if err != nil {
			t.Fatal(err)
		}
		rp, qi, err := BuildK2QCSR(q2k, cuQ, cuK, 64)
		if err != nil {
			t.Fatal(err)
		}
		args := SparseArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: 64, Causal: true, Workers: 2, SoftmaxScale: 0.1}
		want, err := SparseAttenFunc(q, k, v, rp, qi, 2, args)
		if err != nil {
			t.Fatal(err)
		}
		opts := []Option{TopK(2), BlkKV(64), Causal(), Reduce(ReduceMean), Workers(2), KeepFirst(), SoftmaxScale(0.1)}
		got, err := BlockSparseAttentionFunc(q, k, v, cuQ, cuK, opts...)
		if err != nil {
			t.Fatal(err)
		}
		sameResult(t, dt+" eager one call vs chain", want, got)

		g := G.NewGraph()
		in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
		out, err := BlockSparseAttention(in("q", q), in("k", k), in("v", v), in("cu_q", cuQ), in("cu_k", cuK),
			append(opts, MaxSeqlenK(300))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := runOnce(g); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Value().(*tensor.Dense).Header.Raw, want.Out.Header.Raw) {
			t.Fatalf("%s: graph one call differs from the eager chain", dt)
		}
	}
}

// TestOneCallRefusals: the one-call forms refuse an option of no stage,
// a missing required option, and name the stage of a stage's error.
func TestOneCallRefusals(t *testing.T) {
	q, k, v, cuQ, cuK := selectProblem("bf16")
	_, err := BlockSparseAttentionFunc(q, k, v, cuQ, cuK, TopK(2), SharedKV())
	wantNames(t, err, "SharedKV", "BlockSparseAttentionFunc")
	_, err = SelectBlocksFunc(q, k, cuQ, cuK, BlkKV(64))
	wantNames(t, err, "TopK", "SelectBlocksFunc")
	_, err = SelectBlocksFunc(q, k, cuQ, cuK, TopK(2), BlkKV(256))
	wantNames(t, err, "blk_kv", "SelectBlocksFunc (PrepareSparseFwdSchedule)")
	_, err = BlockSparseAttentionFunc(q, k, v, cuQ, cuK, TopK(2), PartialDtype(tensor.Int32))
	wantNames(t, err, "partial_dtype", "BlockSparseAttentionFunc (SparseAttenFunc)")

	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	qn, kn, vn, cq, ck := in("q", q), in("k", k), in("v", v), in("cu_q", cuQ), in("cu_k", cuK)
	_, err = BlockSparseAttention(qn, kn, vn, cq, ck, TopK(2), MaxSeqlenK(300), PageSize(16))
	wantNames(t, err, "PageSize", "BlockSparseAttention")
	_, _, err = SelectBlocks(qn, kn, cq, ck, TopK(2), MaxSeqlenK(300), Causal(), Temperature(2))
	wantNames(t, err, "Temperature", "SelectBlocks")
	_, _, err = SelectBlocks(qn, kn, cq, ck, TopK(2), MaxSeqlenK(300), BlkKV(256))
	wantNames(t, err, "blk_kv", "SelectBlocks (K2QCSR)")
	_, err = BlockSparseAttention(qn, kn, vn, cq, ck, TopK(100), MaxSeqlenK(300))
	wantNames(t, err, "topK", "BlockSparseAttention (SelectBlocks (TopKBlocks))")
}
