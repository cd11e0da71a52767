package op_test

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ints returns an int32 tensor of the given shape.
func ints(shape []int, v ...int32) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// rowsOf returns rows of d elements, row t holding vals[t] everywhere.
func rowsOf(d int, vals ...float32) []float32 {
	out := make([]float32, len(vals)*d)
	for t, x := range vals {
		for e := 0; e < d; e++ {
			out[t*d+e] = x
		}
	}
	return out
}

// mustBF16 is op.NewBF16 for data known to fit the shape.
func mustBF16(data []float32, shape ...int) *tensor.Dense {
	t, err := op.NewBF16(data, shape...)
	if err != nil {
		panic(err)
	}
	return t
}

// input adds a named input node holding t to g.
func input(g *G.ExprGraph, name string, t *tensor.Dense) *G.Node {
	n := G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name))
	if err := G.Let(n, t); err != nil {
		panic(err)
	}
	return n
}

// Graph decode over a paged cache: the prompt is written eagerly with
// WritePagedKVFunc, then each decode step's graph appends the new token's key
// and value with WritePagedKV (in place) and attends with DecodeAttention
// under a DecodeSchedule, all recomputed after a G.Let of the new token and
// the new seqused_k.
//
// One request, one head, pages of 4 tokens (the request owns pages 2 and 0
// of a 3-page pool). The query is e_0 and the softmax scale ln 3, so a key
// with k_0 = 1 weighs 3 times a key of zeros. The prompt's values are 1, 2,
// 3 with zero keys; step 1 appends value 4 with k_0 = 1: O = (1+2+3+3*4)/6
// = 3, LSE = ln 6. Step 2 appends value 10 with a zero key: O = (18+10)/7 =
// 4, LSE = ln 7.
func ExampleDecodeAttention() {
	const d, ps = 64, 4
	e0 := make([]float32, d)
	e0[0] = 1
	kCache := mustBF16(make([]float32, 3*ps*d), 3, 1, ps, d) // [num_pages, Hkv, page_size, D]
	vCache := mustBF16(make([]float32, 3*ps*d), 3, 1, ps, d)
	pageTable := ints([]int{1, 2}, 2, 0)

	// The prompt: 3 tokens, eagerly.
	prompt := func(x *tensor.Dense, rows []float32) {
		if err := op.WritePagedKVFunc(x, mustBF16(rows, 3, 1, d), pageTable, ints([]int{2}, 0, 3), ints([]int{1}, 3), op.HND); err != nil {
			panic(err)
		}
	}
	prompt(kCache, make([]float32, 3*d))
	prompt(vCache, rowsOf(d, 1, 2, 3))

	// The decode step's graph.
	g := G.NewGraph()
	q := input(g, "q", mustBF16(e0, 1, 1, d)) // [B*seqlen_q, Hq, D]
	kc, vc := input(g, "k_cache", kCache), input(g, "v_cache", vCache)
	newK := input(g, "k_new", mustBF16(e0, 1, 1, d)) // [B*seqlen_q, Hkv, D]
	newV := input(g, "v_new", mustBF16(rowsOf(d, 4), 1, 1, d))
	pt := input(g, "page_table", pageTable)
	seqUsed := input(g, "seqused_k", ints([]int{1}, 4)) // counts the new token
	sched, err := op.DecodeSchedule(pt, seqUsed, op.Heads(1, 1), op.PageSize(ps))
	if err != nil {
		panic(err)
	}
	k, err := op.WritePagedKV(kc, newK, pt, seqUsed)
	if err != nil {
		panic(err)
	}
	v, err := op.WritePagedKV(vc, newV, pt, seqUsed)
	if err != nil {
		panic(err)
	}
	out, err := op.DecodeAttention(q, k, v, pt, seqUsed, sched, nil, op.SoftmaxScale(math.Log(3)))
	if err != nil {
		panic(err)
	}
	lse, err := op.LSE(out)
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	// step runs the graph and prints O and LSE next to sum / weights and
	// ln(weights).
	step := func(n int, sum, weights float64) {
		if err := m.RunAll(); err != nil {
			panic(err)
		}
		o, _ := op.Float32s(out.Value().(*tensor.Dense))
		l, _ := op.Float32s(lse.Value().(*tensor.Dense))
		fmt.Printf("step %d: O = %.2f (%g/%g), LSE = %.4f (ln %g = %.4f)\n", n, o[0], sum, weights, l[0], weights, math.Log(weights))
		m.Reset()
	}
	step(1, 1+2+3+3*4, 6)

	// Step 2: the next token and the new length.
	for _, x := range []struct {
		n *G.Node
		t *tensor.Dense
	}{
		{newK, mustBF16(make([]float32, d), 1, 1, d)},
		{newV, mustBF16(rowsOf(d, 10), 1, 1, d)},
		{seqUsed, ints([]int{1}, 5)},
	} {
		if err := G.Let(x.n, x.t); err != nil {
			panic(err)
		}
	}
	step(2, 1+2+3+3*4+10, 7)
	c, _ := op.Float32s(vCache) // the cache input's tensor, updated in place
	fmt.Println("V cache, page 2:", c[2*ps*d], c[2*ps*d+d], c[2*ps*d+2*d], c[2*ps*d+3*d], "page 0:", c[0])
	// Output:
	// step 1: O = 3.00 (18/6), LSE = 1.7918 (ln 6 = 1.7918)
	// step 2: O = 4.00 (28/7), LSE = 1.9459 (ln 7 = 1.9459)
	// V cache, page 2: 1 2 3 4 page 0: 10
}

// Block scores of two sequences in blocks of 2 keys (scale 1, one head).
// Sequence 0 has 4 keys: block 0's mean key is (2, 0), block 1's (0, 2),
// so its query q0 = (0.5, 1) scores 1 and 2. Sequence 1 has 2 keys, mean
// (1, 1): its query q1 = (1, 0) scores 1, and -Inf for the block it does
// not have. TopKBlocks then picks each query's best block.
func ExampleBlockScores() {
	const d = 64
	qData := make([]float32, 2*d)
	qData[0], qData[1] = 0.5, 1 // q0
	qData[d] = 1                // q1
	kData := make([]float32, 6*d)
	kData[0], kData[d] = 1, 3         // keys 0, 1: sequence 0, block 0
	kData[2*d+1], kData[3*d+1] = 1, 3 // keys 2, 3: sequence 0, block 1
	for _, t := range []int{4, 5} {   // keys 4, 5: sequence 1, block 0
		kData[t*d], kData[t*d+1] = 1, 1
	}
	g := G.NewGraph()
	q := input(g, "q", tensor.New(tensor.WithShape(2, 1, d), tensor.WithBacking(qData))) // float32 [total_q, Hq, D]
	k := input(g, "k", tensor.New(tensor.WithShape(6, 1, d), tensor.WithBacking(kData))) // float32 [total_k, Hkv, D]
	cuQ, cuK := input(g, "cu_q", ints([]int{3}, 0, 1, 2)), input(g, "cu_k", ints([]int{3}, 0, 4, 6))
	scores, err := op.BlockScores(q, k, cuQ, cuK, op.BlkKV(2), op.MaxSeqlenK(4), op.SoftmaxScale(1))
	if err != nil {
		panic(err)
	}
	best, err := op.TopKBlocks(scores, op.TopK(1))
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
	fmt.Println(scores.Value().Shape(), scores.Value().Data()) // [Hkv, total_q, max_blocks]
	fmt.Println(best.Value().Data())
	// Output:
	// (1, 2, 2) [1 2 1 -Inf]
	// [1 0]
}

// Eager paged decode, dense and sparse: one request of 8 tokens in pages
// of 4 (pages 1 and 0), a query of zeros (every visible key weighs the
// same) and values 1..8. Dense decode averages all 8 values (LSE = ln 8);
// sparse decode with blocks of 2 tokens, selecting blocks 1 and 3 (tokens
// 2, 3, 6, 7), averages 3, 4, 7 and 8 (LSE = ln 4).
func ExampleDecodeAttentionFunc() {
	const d, ps = 64, 4
	q := mustBF16(make([]float32, d), 1, 1, d) // [B*seqlen_q, Hq, D]
	k := mustBF16(make([]float32, 2*ps*d), 2, 1, ps, d)
	// Page 1 holds tokens 0..3, page 0 tokens 4..7.
	v := mustBF16(rowsOf(d, 5, 6, 7, 8, 1, 2, 3, 4), 2, 1, ps, d)
	args := op.DecodeArgs{PageTable: ints([]int{1, 2}, 1, 0), SeqUsedK: ints([]int{1}, 8), SeqlenQ: 1}
	dense, err := op.DecodeAttentionFunc(q, k, v, nil, args)
	if err != nil {
		panic(err)
	}
	args.BlkKV = 2
	q2k := ints([]int{1, 1, 2}, 3, 1) // [Hkv, B*seqlen_q, topK]
	sparse, err := op.DecodeAttentionFunc(q, k, v, q2k, args)
	if err != nil {
		panic(err)
	}
	for _, r := range []struct {
		name string
		res  *op.Result
	}{{"dense", dense}, {"sparse", sparse}} {
		o, _ := op.Float32s(r.res.Out)
		l, _ := op.Float32s(r.res.LSE)
		fmt.Printf("%s: O = %.2f, LSE = %.4f\n", r.name, o[0], l[0])
	}
	fmt.Printf("ln 8 = %.4f, ln 4 = %.4f\n", math.Log(8), math.Log(4))
	// Output:
	// dense: O = 4.50, LSE = 2.0794
	// sparse: O = 5.50, LSE = 1.3863
	// ln 8 = 2.0794, ln 4 = 1.3863
}

// NVFP4 K/V from float32 data with NewNVFP4. Each value row is constant:
// 1.5, 3, 4.5 and 6 with global scale 0.5 give the e4m3 block scales 0.5,
// 1, 1.5 and 2 (amax / 6 / global; 0.5 is byte 0x30) and the e2m1 value 6
// for every element, so the values round-trip exactly (6 * 0.5 * 0.5 =
// 1.5). The scales are padded to the 128x4 layout: 128 rows, 4 columns. A
// query of zeros weighs the 4 keys equally: O is their mean, 3.75, with
// V's global scale applied; LSE = ln 4.
func ExampleSparseAttentionNVFP4KVFunc() {
	const keys, d = 4, 64
	vals := rowsOf(d, 1.5, 3, 4.5, 6)
	k, err := op.NewNVFP4(vals, 0.5, keys, 1, d) // [total_k, Hkv, D] -> Data [total_k, Hkv, D/2]
	if err != nil {
		panic(err)
	}
	v, err := op.NewNVFP4(vals, 0.5, keys, 1, d)
	if err != nil {
		panic(err)
	}
	fmt.Println("packed V:", v.Data.Shape(), "scales:", v.Scale.Shape(), "first scale byte:", fmt.Sprintf("%#x", v.Scale.Data().([]uint8)[0]))
	q := mustBF16(make([]float32, d), 1, 1, d)
	cuQ, cuK := ints([]int{2}, 0, 1), ints([]int{2}, 0, keys)
	rowPtr, qIdx, err := op.K2QCSRFunc(ints([]int{1, 1, 1}, 0), cuQ, cuK, 0)
	if err != nil {
		panic(err)
	}
	res, err := op.SparseAttentionNVFP4KVFunc(q, k.Data, v.Data, k.Scale, v.Scale, k.Global, v.Global, rowPtr, qIdx, 1,
		op.SparseArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK})
	if err != nil {
		panic(err)
	}
	o, _ := op.Float32s(res.Out)
	l, _ := op.Float32s(res.LSE)
	fmt.Printf("O = %.2f, LSE = %.4f\n", o[0], l[0])
	// Output:
	// packed V: (4, 1, 32) scales: (128, 4) first scale byte: 0x30
	// O = 3.75, LSE = 1.3863
}

// A CSR built outside the graph (here by K2QCSRFunc) wrapped by
// PackK2QCSR for FwdSchedule and SparseAttention. Three queries over one
// sequence of 4 keys in blocks of 2: q0 selects block 0, q1 block 1, q2
// both. Rows are blocks (block-major, then sequence): row 0 lists queries
// 0 and 2, row 1 queries 1 and 2; -1 pads each head's indices to
// total_q * topK. The packed value holds each head's row pointers followed
// by its query indices. With a query of zeros and values 1..4, q0 averages
// 1 and 2, q1 3 and 4, q2 all four.
func ExamplePackK2QCSR() {
	const d = 64
	cuQ, cuK := ints([]int{2}, 0, 3), ints([]int{2}, 0, 4)
	q2k := ints([]int{1, 3, 2}, 0, -1, 1, -1, 0, 1) // [Hkv, total_q, topK]
	rowPtr, qIdx, err := op.K2QCSRFunc(q2k, cuQ, cuK, 2)
	if err != nil {
		panic(err)
	}
	fmt.Println("k2q_row_ptr", rowPtr.Data(), "k2q_q_indices", qIdx.Data())

	g := G.NewGraph()
	q := input(g, "q", mustBF16(make([]float32, 3*d), 3, 1, d))
	k := input(g, "k", mustBF16(make([]float32, 4*d), 4, 1, d))
	v := input(g, "v", mustBF16(rowsOf(d, 1, 2, 3, 4), 4, 1, d))
	cq, ck := input(g, "cu_q", cuQ), input(g, "cu_k", cuK)
	csr, err := op.PackK2QCSR(input(g, "k2q_row_ptr", rowPtr), input(g, "k2q_q_indices", qIdx), op.TopK(2), op.TotalQ(3), op.BlkKV(2))
	if err != nil {
		panic(err)
	}
	sched, err := op.FwdSchedule(csr, cq, ck, op.QheadPerKV(1))
	if err != nil {
		panic(err)
	}
	out, err := op.SparseAttention(q, k, v, csr, sched, cq, ck)
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
	fmt.Println("packed", csr.Value().Shape(), csr.Value().Data())
	o, _ := op.Float32s(out.Value().(*tensor.Dense))
	fmt.Println("O[q][0]:", o[0], o[d], o[2*d])
	// Output:
	// k2q_row_ptr [0 2 4] k2q_q_indices [0 2 1 2 -1 -1]
	// packed (1, 9) [0 2 4 0 2 1 2 -1 -1]
	// O[q][0]: 1.5 3.5 2.5
}
