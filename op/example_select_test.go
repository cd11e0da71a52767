package op_test

import (
	"fmt"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// One call for the common case, eager: scores -> top-k -> CSR -> schedule
// -> attention. Two sequences (6 and 4 queries over 300 and 200 keys),
// 4 query heads on 2 KV heads, each query attending to its 2 best blocks
// of 64 keys.
func ExampleBlockSparseAttentionFunc() {
	q, k, v := bf16(10, 4, 64), bf16(500, 2, 64), bf16(500, 2, 64)
	cuQ, cuK := i32([]int{3}, 0, 6, 10), i32([]int{3}, 0, 300, 500)
	res, err := op.BlockSparseAttentionFunc(q, k, v, cuQ, cuK, op.TopK(2), op.BlkKV(64), op.Causal())
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Out.Shape(), res.LSE.Shape())

	// An option that does not apply is an error naming it.
	_, err = op.BlockSparseAttentionFunc(q, k, v, cuQ, cuK, op.TopK(2), op.PageSize(16))
	fmt.Println(err)
	// Output:
	// (10, 4, 64) (10, 4)
	// BlockSparseAttentionFunc: PageSize: expected one of the options BlockSparseAttentionFunc takes (TopK, MaxSeqlenK, BlkKV, Causal, SoftmaxScale, Reduce, Workers, KeepFirst, KeepLast, Temperature, PartialDtype, MMADtypes), got PageSize, which does not apply to BlockSparseAttentionFunc
}

// The selection alone, eager: q2k_indices, the k2q CSR and the schedule,
// with the SparseArgs an attention over them takes.
func ExampleSelectBlocksFunc() {
	q, k, v := bf16(10, 4, 64), bf16(500, 2, 64), bf16(500, 2, 64)
	cuQ, cuK := i32([]int{3}, 0, 6, 10), i32([]int{3}, 0, 300, 500)
	sel, err := op.SelectBlocksFunc(q, k, cuQ, cuK, op.TopK(2), op.BlkKV(64), op.Causal(), op.KeepLast())
	if err != nil {
		panic(err)
	}
	args := sel.Args()
	args.PartialDtype = tensor.Float32
	res, err := op.SparseAttentionFunc(q, k, v, sel.RowPtr, sel.QIndices, sel.TopK, args)
	if err != nil {
		panic(err)
	}
	fmt.Println(sel.Q2K.Shape(), sel.Schedule != nil, res.Out.Shape())
	// Output: (2, 10, 2) true (10, 4, 64)
}

// One call for the common case, graph: BlockSparseAttention adds the
// selection and the attention; SelectBlocks adds the selection alone,
// returning the CSR and schedule nodes SparseAttention takes.
func ExampleBlockSparseAttention() {
	g := G.NewGraph()
	in := func(name string, t *tensor.Dense) *G.Node { return G.NodeFromAny(g, t, G.WithName(name)) }
	q, k, v := in("q", bf16(10, 4, 64)), in("k", bf16(500, 2, 64)), in("v", bf16(500, 2, 64))
	cuQ, cuK := in("cu_q", i32([]int{3}, 0, 6, 10)), in("cu_k", i32([]int{3}, 0, 300, 500))
	out, err := op.BlockSparseAttention(q, k, v, cuQ, cuK, op.TopK(2), op.MaxSeqlenK(300), op.BlkKV(64), op.Causal())
	if err != nil {
		panic(err)
	}
	csr, sched, err := op.SelectBlocks(q, k, cuQ, cuK, op.TopK(2), op.MaxSeqlenK(300), op.BlkKV(64), op.Causal())
	if err != nil {
		panic(err)
	}
	fmt.Println(csr.Dims(), sched.Dims())
	runTape(g)
	fmt.Println(out.Value().Shape())

	// Causal() is given once and reaches both stages; a required option
	// left out is an error naming it.
	_, err = op.BlockSparseAttention(q, k, v, cuQ, cuK, op.TopK(2))
	fmt.Println(err)
	// Output:
	// 2 1
	// (10, 4, 64)
	// BlockSparseAttention (SelectBlocks): MaxSeqlenK: expected the MaxSeqlenK(...) option (it fixes the scores' and the CSR's shapes), got none
}

// Dense varlen prefill on the same kernels: every key of each sequence
// (causal here), eager and graph, for models that mix dense and sparse
// layers.
func ExampleDenseAttentionFunc() {
	q, k, v := bf16(10, 4, 64), bf16(500, 2, 64), bf16(500, 2, 64)
	cuQ, cuK := i32([]int{3}, 0, 6, 10), i32([]int{3}, 0, 300, 500)
	res, err := op.DenseAttentionFunc(q, k, v, cuQ, cuK, op.Causal())
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Out.Shape())

	g := G.NewGraph()
	in := func(name string, t *tensor.Dense) *G.Node { return G.NodeFromAny(g, t, G.WithName(name)) }
	out, err := op.DenseAttention(in("q", q), in("k", k), in("v", v), in("cu_q", cuQ), in("cu_k", cuK),
		op.MaxSeqlenK(300), op.Causal())
	if err != nil {
		panic(err)
	}
	runTape(g)
	fmt.Println(out.Value().Shape())
	// Output:
	// (10, 4, 64)
	// (10, 4, 64)
}

// runTape runs g once on a TapeMachine.
func runTape(g *G.ExprGraph) {
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
}
