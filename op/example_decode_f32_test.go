package op_test

import (
	"fmt"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Float32 decode through a DecodeWrapper: one request of 4 tokens in one
// page of 4, a query of zeros (every key weighs the same) and values 1.001,
// 1.002, 1.003, 1.004, which BFloat16 would round to 1 (its spacing near 1
// is 2^-7). With float32 q, k and v, Out is float32 and keeps them: the
// mean is 1.0025.
func ExampleDecodeWrapper_float32() {
	const d, ps = 64, 4
	f32 := func(data []float32, shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	}
	q := f32(make([]float32, d), 1, 1, d) // [B*seqlen_q, Hq, D]
	k := f32(make([]float32, ps*d), 1, 1, ps, d)
	v := f32(rowsOf(d, 1.001, 1.002, 1.003, 1.004), 1, 1, ps, d)
	w, err := op.NewDecodeWrapper(ps)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	args := op.DecodeArgs{PageTable: ints([]int{1, 1}, 0), SeqUsedK: ints([]int{1}, 4), SeqlenQ: 1}
	if err := w.Plan(op.PlanArgs{DecodeArgs: args, NumQOHeads: 1, NumKVHeads: 1, HeadDim: d}, nil); err != nil {
		panic(err)
	}
	res, err := w.Run(q, k, v, 0)
	if err != nil {
		panic(err)
	}
	fmt.Printf("Out %v, O = %.4f\n", res.Out.Dtype(), res.Out.Data().([]float32)[0])
	// Output:
	// Out float32, O = 1.0025
}

// Float32 decode in a graph, with token-major (NHD) pages: the request and
// values of ExampleDecodeWrapper_float32, k and v shaped [num_pages,
// page_size, Hkv, D]. The node's value is float32 and keeps the values
// BFloat16 would round; every key weighs the same, so LSE = ln 4.
func ExampleDecodeAttention_float32() {
	const d, ps = 64, 4
	f32 := func(data []float32, shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	}
	g := G.NewGraph()
	q := input(g, "q", f32(make([]float32, d), 1, 1, d)) // [B*seqlen_q, Hq, D]
	k := input(g, "k", f32(make([]float32, ps*d), 1, ps, 1, d))
	v := input(g, "v", f32(rowsOf(d, 1.001, 1.002, 1.003, 1.004), 1, ps, 1, d))
	pt, seqUsed := input(g, "page_table", ints([]int{1, 1}, 0)), input(g, "seqused_k", ints([]int{1}, 4))
	sched, err := op.DecodeSchedule(pt, seqUsed, op.Heads(1, 1), op.PageSize(ps))
	if err != nil {
		panic(err)
	}
	out, err := op.DecodeAttention(q, k, v, pt, seqUsed, sched, nil, op.KVLayout(op.NHD))
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
	fmt.Printf("Out %v, O = %.4f, LSE = %.4f\n", out.Dtype(), out.Value().Data().([]float32)[0], lse.Value().Data().([]float32)[0])
	// Output:
	// Out float32, O = 1.0025, LSE = 1.3863
}
