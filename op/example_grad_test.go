package op_test

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// pattern returns a float32 tensor of a deterministic pattern scaled by s.
func pattern(s float64, seed int, shape ...int) *tensor.Dense {
	n := 1
	for _, x := range shape {
		n *= x
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(s * math.Sin(float64(i*7+seed*13)))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
}

// A training step through SparseAttention: float32 projections q, k, v =
// x W of one sequence of 8 tokens (blocks of 4 keys, one head, D = 8),
// causal block-sparse attention where each query selects block 0 and its
// own block, and a squared-error loss. G.Grad adds the attention's
// backward node (it reuses the forward's LSE), a TapeMachine runs forward
// and backward, and Adam updates Wq, Wk and Wv.
func ExampleSparseAttention_trainingStep() {
	const tokens, model, d, blk = 8, 8, 8, 4
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(tokens, model), G.WithName("x"), G.WithValue(pattern(1, 0, tokens, model)))
	target := G.NewTensor(g, tensor.Float32, 3, G.WithShape(tokens, 1, d), G.WithName("target"), G.WithValue(pattern(0.5, 1, tokens, 1, d)))
	var weights G.Nodes
	var qkv [3]*G.Node
	for i, name := range []string{"Wq", "Wk", "Wv"} {
		w := G.NewMatrix(g, tensor.Float32, G.WithShape(model, d), G.WithName(name), G.WithValue(pattern(0.3, i+2, model, d)))
		weights = append(weights, w)
		qkv[i] = G.Must(G.Reshape(G.Must(G.Mul(x, w)), tensor.Shape{tokens, 1, d}))
	}
	q2k := make([]int32, tokens*2) // [Hkv = 1, tokens, topK = 2]: block 0 and the query's block
	for i := 0; i < tokens; i++ {
		q2k[2*i], q2k[2*i+1] = 0, int32(i/blk)
		if i < blk {
			q2k[2*i+1] = -1 // block 0 twice is padding
		}
	}
	in := func(name string, shape []int, v []int32) *G.Node {
		t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
		return G.NewTensor(g, tensor.Int32, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t))
	}
	q2kn := in("q2k", []int{1, tokens, 2}, q2k)
	cu := in("cu", []int{2}, []int32{0, tokens})
	csr, err := op.K2QCSR(q2kn, cu, cu, op.BlkKV(blk), op.MaxSeqlenK(tokens))
	if err != nil {
		panic(err)
	}
	sched, err := op.FwdSchedule(csr, cu, cu, op.QheadPerKV(1), op.Workers(1))
	if err != nil {
		panic(err)
	}
	out, err := op.SparseAttention(qkv[0], qkv[1], qkv[2], csr, sched, cu, cu, op.Causal(), op.Workers(1))
	if err != nil {
		panic(err)
	}
	diff := G.Must(G.Sub(out, target))
	loss := G.Must(G.Mean(G.Must(G.Square(diff))))
	if _, err := G.Grad(loss, weights...); err != nil {
		panic(err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(weights...))
	defer vm.Close()
	solver := G.NewAdamSolver(G.WithLearnRate(0.05))
	for step := 0; step <= 40; step++ {
		if err := vm.RunAll(); err != nil {
			panic(err)
		}
		if step%10 == 0 {
			fmt.Printf("step %2d: loss %.4f\n", step, loss.Value().Data().(float32))
		}
		if err := solver.Step(G.NodesToValueGrads(weights)); err != nil {
			panic(err)
		}
		vm.Reset()
	}
	fmt.Println("out:", out.Value().Dtype(), out.Shape())
	// Output:
	// step  0: loss 0.2573
	// step 10: loss 0.0316
	// step 20: loss 0.0137
	// step 30: loss 0.0036
	// step 40: loss 0.0015
	// out: float32 (8, 1, 8)
}
