package op_test

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// bf16 returns a BFloat16 tensor filled with a deterministic pattern.
func bf16(shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	data := make([]lowp.BFloat16, n)
	for i := range data {
		data[i] = lowp.BF16(float32(i%7-3) / 4)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
}

func i32(shape []int, v ...int32) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// Eager, operator-level use: one sequence of 4 queries over 256 keys (two
// blocks of 128), one KV head shared by 2 query heads, each query selecting
// up to 2 blocks.
func ExampleSparseAttentionFunc() {
	q, k, v := bf16(4, 2, 64), bf16(256, 1, 64), bf16(256, 1, 64)
	cuQ, cuK := i32([]int{2}, 0, 4), i32([]int{2}, 0, 256)
	// q2k_indices [Hkv=1, total_q=4, topK=2]: -1 marks an unused slot.
	q2k := i32([]int{1, 4, 2}, 0, 1, 1, -1, 0, -1, 1, 0)
	rowPtr, qIdx, err := op.K2QCSRFunc(q2k, cuQ, cuK, 128)
	if err != nil {
		panic(err)
	}
	res, err := op.SparseAttentionFunc(q, k, v, rowPtr, qIdx, 2, op.SparseArgs{
		CuSeqlensQ: cuQ, CuSeqlensK: cuK, Causal: true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Out.Shape(), res.LSE.Shape())
	// Output: (4, 2, 64) (4, 2)
}

// Reusing the output across calls (SparseArgs.Out, OutLSE; FlashInfer's
// out= and lse=): each call writes into the caller's tensors and returns
// them, so a loop over steps allocates no output.
func ExampleSparseAttentionFunc_out() {
	q, k, v := bf16(4, 2, 64), bf16(256, 1, 64), bf16(256, 1, 64)
	cuQ, cuK := i32([]int{2}, 0, 4), i32([]int{2}, 0, 256)
	q2k := i32([]int{1, 4, 2}, 0, 1, 1, -1, 0, -1, 1, 0)
	rowPtr, qIdx, err := op.K2QCSRFunc(q2k, cuQ, cuK, 128)
	if err != nil {
		panic(err)
	}
	out := tensor.New(tensor.WithShape(4, 2, 64), tensor.Of(op.BFloat16))
	lse := tensor.New(tensor.WithShape(4, 2), tensor.Of(tensor.Float32))
	args := op.SparseArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, Causal: true, Out: out, OutLSE: lse}
	for step := 0; step < 2; step++ {
		res, err := op.SparseAttentionFunc(q, k, v, rowPtr, qIdx, 2, args)
		if err != nil {
			panic(err)
		}
		fmt.Println(step, res.Out == out, res.LSE == lse)
	}
	// An output of the wrong shape is refused, naming the argument.
	args.Out = tensor.New(tensor.WithShape(4, 2, 32), tensor.Of(op.BFloat16))
	_, err = op.SparseAttentionFunc(q, k, v, rowPtr, qIdx, 2, args)
	fmt.Println(err)
	// Output:
	// 0 true true
	// 1 true true
	// SparseAttentionFunc: out: expected a contiguous bfloat16 tensor of shape [4 2 64] (not a view), got bfloat16 [4 2 32]
}

// Graph use: q2k -> CSR -> schedule -> attention -> LSE in one ExprGraph,
// run by a TapeMachine.
func ExampleSparseAttention() {
	g := G.NewGraph()
	in := func(name string, t *tensor.Dense) *G.Node {
		n := G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name))
		if err := G.Let(n, t); err != nil {
			panic(err)
		}
		return n
	}
	q, k, v := in("q", bf16(4, 2, 64)), in("k", bf16(256, 1, 64)), in("v", bf16(256, 1, 64))
	cuQ, cuK := in("cu_q", i32([]int{2}, 0, 4)), in("cu_k", i32([]int{2}, 0, 256))
	q2k := in("q2k", i32([]int{1, 4, 2}, 0, 1, 1, -1, 0, -1, 1, 0))

	csr, err := op.K2QCSR(q2k, cuQ, cuK, op.BlkKV(128), op.MaxSeqlenK(256))
	if err != nil {
		panic(err)
	}
	sched, err := op.FwdSchedule(csr, cuQ, cuK, op.QheadPerKV(2), op.Workers(0))
	if err != nil {
		panic(err)
	}
	out, err := op.SparseAttention(q, k, v, csr, sched, cuQ, cuK, op.Causal())
	if err != nil {
		panic(err)
	}
	lse, err := op.LSE(out)
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
	fmt.Println(out.Value().Shape(), lse.Value().Shape())
	// Output: (4, 2, 64) (4, 2)
}

// Plan once, run for every layer and step: paged decode of 2 requests with
// 16-token pages.
func ExampleDecodeWrapper() {
	pageTable := i32([]int{2, 4}, 3, 0, 5, 1, 2, 4, 6, 7)
	seqused := i32([]int{2}, 40, 17)
	w, err := op.NewDecodeWrapper(16)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	if err := w.Plan(op.PlanArgs{
		DecodeArgs: op.DecodeArgs{PageTable: pageTable, SeqUsedK: seqused, SeqlenQ: 1, MaxSeqlenK: 64},
		NumQOHeads: 4, NumKVHeads: 1, HeadDim: 64}, nil); err != nil {
		panic(err)
	}
	q, k, v := bf16(2, 4, 64), bf16(8, 1, 16, 64), bf16(8, 1, 16, 64)
	for layer := 0; layer < 3; layer++ {
		res, err := w.Run(q, k, v, 0)
		if err != nil {
			panic(err)
		}
		if layer == 0 {
			fmt.Println(res.Out.Shape(), res.LSE.Shape())
		}
	}
	// Output: (2, 4, 64) (2, 4)
}
