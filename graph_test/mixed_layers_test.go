package graphtest

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mixedTol bounds the float32 graph against the float64 reference, relative
// to the largest reference value: float32 rounds each product and sum of
// the 32-term projections (at most 32 * 2^-24 ≈ 2e-6 relative) and of the
// softmax and weighted sums over at most 40 keys (40 * 2^-24 ≈ 2.4e-6);
// 1e-4 leaves a margin of ten over their sum, through two layers.
const mixedTol = 1e-4

// wave returns n deterministic values s*sin(7i + 13 seed), of mean square
// s^2/2: distinct inputs and weights without a random source.
func wave(n, seed int, s float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(s * math.Sin(float64(7*i+13*seed)))
	}
	return out
}

// TestMixedDenseSparseLayers builds a two-layer float32 model whose first
// layer is dense causal attention (DenseAttention) and whose second is
// block-sparse attention that selects its own blocks (BlockSparseAttention),
// each one constructor. The first layer is checked against the float64
// reference; the second against the eager one-call form on the same inputs
// (bit for bit) and against the reference over the blocks that form selects.
func TestMixedDenseSparseLayers(t *testing.T) {
	const model, hq, hkv, d, blk, topK = 32, 4, 2, 16, 8, 3
	lens := []int{24, 40}
	cu := prefix(lens)
	tokens := int(cu[len(cu)-1])
	dm := blockDims{model: model, hq: hq, hkv: hkv, d: d}
	x := f32([]int{tokens, model}, wave(tokens*model, 0, 1))
	w := make([]*tensor.Dense, 8) // Wq, Wk, Wv, Wo of each layer
	for i := range w {
		cols := []int{hq * d, hkv * d, hkv * d, model}[i%4]
		rows := model
		if i%4 == 3 {
			rows = hq * d
		}
		w[i] = f32([]int{rows, cols}, wave(rows*cols, i+1, math.Sqrt(3/float64(rows))))
	}

	g := G.NewGraph()
	xn, cun := input(g, "x", x), input(g, "cu", i32([]int{len(cu)}, cu))
	wn := make([]*G.Node, len(w))
	for i := range w {
		wn[i] = input(g, []string{"wq", "wk", "wv", "wo"}[i%4]+string(rune('1'+i/4)), w[i])
	}
	proj := func(in *G.Node, wi, heads int) *G.Node {
		return G.Must(G.Reshape(G.Must(G.Mul(in, wn[wi])), tensor.Shape{tokens, heads, d}))
	}
	q1, k1, v1 := proj(xn, 0, hq), proj(xn, 1, hkv), proj(xn, 2, hkv)
	a1, err := op.DenseAttention(q1, k1, v1, cun, cun, op.MaxSeqlenK(40), op.BlkKV(blk), op.Causal())
	must(t, err)
	h := G.Must(G.Add(xn, G.Must(G.Mul(G.Must(G.Reshape(a1, tensor.Shape{tokens, hq * d})), wn[3]))))
	q2, k2, v2 := proj(h, 4, hq), proj(h, 5, hkv), proj(h, 6, hkv)
	opts := []op.Option{op.TopK(topK), op.BlkKV(blk), op.Causal()}
	a2, err := op.BlockSparseAttention(q2, k2, v2, cun, cun, append(opts, op.MaxSeqlenK(40))...)
	must(t, err)
	m := G.NewTapeMachine(g)
	defer m.Close()
	must(t, m.RunAll())

	// Layer 1 against the float64 reference.
	x64 := widen(x.Data().([]float32))
	ref1 := refAttention(matmul64(x64, w[0].Data().([]float32), tokens, model, hq*d),
		matmul64(x64, w[1].Data().([]float32), tokens, model, hkv*d),
		matmul64(x64, w[2].Data().([]float32), tokens, model, hkv*d), cu, dm, 1/math.Sqrt(d), causalKeys)
	compareTol(t, "DenseAttention layer", a1.Value().Data().([]float32), ref1, mixedTol)

	// Layer 2 against the eager one-call form on the graph's own inputs,
	// and against the reference over the blocks it selected.
	qv, kv, vv := q2.Value().(*tensor.Dense), k2.Value().(*tensor.Dense), v2.Value().(*tensor.Dense)
	cuT := i32([]int{len(cu)}, cu)
	res, err := op.BlockSparseAttentionFunc(qv, kv, vv, cuT, cuT, opts...)
	must(t, err)
	sameBits(t, "BlockSparseAttention vs BlockSparseAttentionFunc", a2.Value().(*tensor.Dense), res.Out)
	sel, err := op.SelectBlocksFunc(qv, kv, cuT, cuT, opts...)
	must(t, err)
	ref2 := refAttention(widen(qv.Data().([]float32)), widen(kv.Data().([]float32)), widen(vv.Data().([]float32)), cu, dm,
		1/math.Sqrt(d), blockKeys(sel.Q2K.Data().([]int32), tokens, topK, blk, cu))
	compareTol(t, "BlockSparseAttention layer", a2.Value().Data().([]float32), ref2, mixedTol)
}
