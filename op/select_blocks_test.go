package op

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparseattn/msa/op/internal/blocks"
	"github.com/sparseattn/msa/op/internal/validate"
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
		rp, qi, err := K2QCSRFunc(q2k, cuQ, cuK, 64)
		if err != nil {
			t.Fatal(err)
		}
		args := SparseArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: 64, Causal: true, Workers: 2, SoftmaxScale: 0.1}
		want, err := SparseAttentionFunc(q, k, v, rp, qi, 2, args)
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
	wantNames(t, err, "blk_kv", "SelectBlocksFunc (FwdScheduleFunc)")
	_, err = BlockSparseAttentionFunc(q, k, v, cuQ, cuK, TopK(2), PartialDtype(tensor.Int32))
	wantNames(t, err, "partial_dtype", "BlockSparseAttentionFunc (SparseAttentionFunc)")

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

// TestOneCallGradients: with float32 q, k, v the one-call graph forms are
// differentiable; G.Grad of sum(out) gives the gradients of
// SparseAttentionBackwardFunc over the same selection (dOut = 1).
func TestOneCallGradients(t *testing.T) {
	q, k, v, cuQ, cuK := selectProblem("f32")
	opts := []Option{BlkKV(64), Causal(), Workers(2)}
	sel, err := SelectBlocksFunc(q, k, cuQ, cuK, append(opts, TopK(2))...)
	if err != nil {
		t.Fatal(err)
	}
	dense := &Selection{TopK: 5, BlkKV: 64, Causal: true, cuQ: cuQ, cuK: cuK, workers: 2}
	q2k := make([]int32, 2*10*dense.TopK)
	blocks.All(q2k, validate.Int32s(cuQ), []int32{300, 200}, 2, dense.TopK, 64, true)
	dense.Q2K = tensor.New(tensor.WithShape(2, 10, dense.TopK), tensor.WithBacking(q2k))
	if dense.RowPtr, dense.QIndices, err = K2QCSRFunc(dense.Q2K, cuQ, cuK, 64); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		sel   *Selection
		build func(q, k, v, cq, ck *G.Node) (*G.Node, error)
	}{
		"BlockSparseAttention": {sel, func(q, k, v, cq, ck *G.Node) (*G.Node, error) {
			return BlockSparseAttention(q, k, v, cq, ck, append(opts, TopK(2), MaxSeqlenK(300))...)
		}},
		"DenseAttention": {dense, func(q, k, v, cq, ck *G.Node) (*G.Node, error) {
			return DenseAttention(q, k, v, cq, ck, append(opts, MaxSeqlenK(300))...)
		}},
	} {
		g := G.NewGraph()
		in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
		qn, kn, vn := in("q", q), in("k", k), in("v", v)
		out, err := c.build(qn, kn, vn, in("cu_q", cuQ), in("cu_k", cuK))
		if err != nil {
			t.Fatal(err)
		}
		grads, err := G.Grad(G.Must(G.Sum(out)), qn, kn, vn)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := runOnce(g); err != nil {
			t.Fatal(err)
		}
		fwd, err := SparseAttentionFunc(q, k, v, c.sel.RowPtr, c.sel.QIndices, c.sel.TopK, c.sel.Args())
		if err != nil {
			t.Fatal(err)
		}
		ones := make([]float32, 10*4*64)
		for i := range ones {
			ones[i] = 1
		}
		want, err := SparseAttentionBackwardFunc(q, k, v, fwd.Out, fwd.LSE, tensor.New(tensor.WithShape(10, 4, 64), tensor.WithBacking(ones)), nil,
			c.sel.RowPtr, c.sel.QIndices, c.sel.TopK, c.sel.Args())
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range []*tensor.Dense{want.DQ, want.DK, want.DV} {
			if !bytes.Equal(grads[i].Value().(*tensor.Dense).Header.Raw, w.Header.Raw) {
				t.Fatalf("%s: the gradient of input %d differs from SparseAttentionBackwardFunc's", name, i)
			}
		}
	}
}

// TestOneCallOptionsReachAStage: every option a one-call form accepts is
// passed on to a stage that takes it (an accepted option no stage reads
// would be silently ignored).
func TestOneCallOptionsReachAStage(t *testing.T) {
	for _, c := range []struct {
		form     string
		accepted []optID
		stages   [][]optID
	}{
		{"SelectBlocks", selectOpts, [][]optID{scoreOpts, topKOpts, csrOpts, schedOpts}},
		{"BlockSparseAttention", union(selectOpts, attnLayerOpts), [][]optID{scoreOpts, topKOpts, csrOpts, schedOpts, attnLayerOpts}},
		// MaxSeqlenK, BlkKV and Causal also size and fill the block list.
		{"DenseAttention", denseOpts, [][]optID{csrOpts, schedOpts, attnLayerOpts}},
	} {
		var read []optID
		for _, s := range c.stages {
			read = union(read, s)
		}
		for _, id := range c.accepted {
			if !slices.Contains(read, id) {
				t.Errorf("%s accepts %s, which no stage takes", c.form, optNames[id])
			}
		}
	}
}
