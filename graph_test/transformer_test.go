package graphtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// These tests build whole attention blocks in one ExprGraph, the way a
// model author would: float32 projections with Gorgonia's own G.Mul, a cast
// to bf16, in-graph block selection, sparse (or decode) attention, a cast
// back and the output projection. Each is checked against the float64
// reference of reference_test.go.
//
// Tolerance (every comparison): max |y - ref| <= 1e-2 * max |ref|. The
// graph differs from the float64 reference only by (1) the attention
// output O and the partial outputs being stored as bf16 (relative error
// 2^-9 each, so |dO| <= ~2^-8 * max|V|), (2) float32 accumulation in the
// projections and the kernels (~1e-6 relative), and (3) rare one-ulp bf16
// disagreements when a float32 projection lies next to a rounding midpoint.
// Through the output projection (a sum of H*D terms with random signs) the
// bf16 error stays well below 1% of the output's range: observed 0.11% to
// 0.15% (logged with -v), so the bound has a 7x margin. A real bug (a wrong block, a missed mask, a wrong head) moves
// the output by tens of percent.
const blockTol = 1e-2

// Shapes of the prefill block: 3 sequences (one empty) of 300 tokens in
// all, blocks of 32 keys, so the longest sequence has 6 blocks.
const (
	tModel, tHq, tHkv, tD = 128, 4, 2, 64
	tBlk, tMaxSeqlen      = 32, 180
	tWorkers              = 2
)

var tSeqs = []int{180, 0, 120}

// randF32 returns n float32 N(0, std^2) values.
func randF32(rng *rand.Rand, n int, std float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * std)
	}
	return out
}

func f32(shape []int, v []float32) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// newWeights draws the weights of one block, scaled so activations stay
// O(1).
func newWeights(rng *rand.Rand, dm blockDims) blockWeights {
	s := 1 / math.Sqrt(float64(dm.model))
	return blockWeights{
		wq: randF32(rng, dm.model*dm.hq*dm.d, s),
		wk: randF32(rng, dm.model*dm.hkv*dm.d, s),
		wv: randF32(rng, dm.model*dm.hkv*dm.d, s),
		wo: randF32(rng, dm.hq*dm.d*dm.model, 1/math.Sqrt(float64(dm.hq*dm.d))),
	}
}

// weightNodes adds a block's weights as input nodes (names must be unique:
// Gorgonia merges input nodes with the same name, type and shape).
type weightNodes struct{ wq, wk, wv, wo *G.Node }

func addWeights(g *G.ExprGraph, prefix string, dm blockDims, w blockWeights) weightNodes {
	return weightNodes{
		wq: input(g, prefix+"wq", f32([]int{dm.model, dm.hq * dm.d}, w.wq)),
		wk: input(g, prefix+"wk", f32([]int{dm.model, dm.hkv * dm.d}, w.wk)),
		wv: input(g, prefix+"wv", f32([]int{dm.model, dm.hkv * dm.d}, w.wv)),
		wo: input(g, prefix+"wo", f32([]int{dm.hq * dm.d, dm.model}, w.wo)),
	}
}

// project computes bf16(reshape(x . w, [rows, heads, d])).
func project(x, w *G.Node, rows, heads, d int) (*G.Node, error) {
	y, err := G.Mul(x, w) // float32 [rows, heads*d]
	if err != nil {
		return nil, err
	}
	if y, err = G.Reshape(y, tensor.Shape{rows, heads, d}); err != nil {
		return nil, err
	}
	return op.CastToBF16(y)
}

// outProject computes reshape(float32(o), [rows, H*D]) . wo.
func outProject(o, wo *G.Node, rows, hq, d int) (*G.Node, error) {
	o32, err := op.CastFromBF16(o)
	if err != nil {
		return nil, err
	}
	if o32, err = G.Reshape(o32, tensor.Shape{rows, hq * d}); err != nil {
		return nil, err
	}
	return G.Mul(o32, wo)
}

// sparseBlock holds the nodes of a sparse-attention block worth reading
// after a run.
type sparseBlock struct {
	scores, q2k, y *G.Node
}

// buildSparseBlock adds one sparse-attention transformer block:
//
//	x [T, model] float32
//	-> q, k, v = bf16(reshape(x . W))          (G.Mul in float32)
//	-> scores  = BlockScores(q, k)             [Hkv, T, max_blocks]
//	-> q2k     = TopKBlocks(scores, topK)      [Hkv, T, topK]
//	-> csr     = K2QCSR(q2k) -> sched = FwdSchedule(csr)
//	-> o       = SparseAttention(q, k, v, csr, sched, causal)
//	-> y       = reshape(float32(o)) . Wo      [T, model]
func buildSparseBlock(x, cu *G.Node, w weightNodes, dm blockDims, topK int) (*sparseBlock, error) {
	t := x.Shape()[0]
	q, err := project(x, w.wq, t, dm.hq, dm.d)
	if err != nil {
		return nil, err
	}
	k, err := project(x, w.wk, t, dm.hkv, dm.d)
	if err != nil {
		return nil, err
	}
	v, err := project(x, w.wv, t, dm.hkv, dm.d)
	if err != nil {
		return nil, err
	}
	// Self-attention: the same cu_seqlens for queries and keys.
	scores, err := op.BlockScores(q, k, cu, cu, op.BlkKV(tBlk), op.MaxSeqlenK(tMaxSeqlen), op.Causal(), op.Workers(tWorkers))
	if err != nil {
		return nil, err
	}
	// Always keep the first block (attention sink) and the diagonal block
	// (local window); the other slots go to the best-scoring blocks.
	q2k, err := op.TopKBlocks(scores, op.TopK(topK), op.KeepFirst(), op.KeepLast())
	if err != nil {
		return nil, err
	}
	csr, err := op.K2QCSR(q2k, cu, cu, op.BlkKV(tBlk), op.MaxSeqlenK(tMaxSeqlen))
	if err != nil {
		return nil, err
	}
	sched, err := op.FwdSchedule(csr, cu, cu, op.QheadPerKV(dm.hq/dm.hkv), op.Workers(tWorkers))
	if err != nil {
		return nil, err
	}
	o, err := op.SparseAttention(q, k, v, csr, sched, cu, cu, op.Causal(), op.Workers(tWorkers))
	if err != nil {
		return nil, err
	}
	y, err := outProject(o, w.wo, t, dm.hq, dm.d)
	if err != nil {
		return nil, err
	}
	return &sparseBlock{scores: scores, q2k: q2k, y: y}, nil
}

// runSparseBlock builds and runs the block once and returns its values with
// the float64 reference's projections.
func runSparseBlock(t *testing.T, topK int) (x []float32, w blockWeights, scores []float32, q2k []int32, y []float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	dm := blockDims{tModel, tHq, tHkv, tD}
	total := 0
	for _, n := range tSeqs {
		total += n
	}
	x = randF32(rng, total*dm.model, 1)
	w = newWeights(rng, dm)

	g := G.NewGraph()
	xn := input(g, "x", f32([]int{total, dm.model}, x))
	cu := input(g, "cu_seqlens", i32([]int{len(tSeqs) + 1}, prefix(tSeqs)))
	blk, err := buildSparseBlock(xn, cu, addWeights(g, "", dm, w), dm, topK)
	must(t, err)
	m := G.NewTapeMachine(g)
	defer m.Close()
	must(t, m.RunAll())
	scores = blk.scores.Value().Data().([]float32)
	q2k = blk.q2k.Value().Data().([]int32)
	y = append([]float32(nil), blk.y.Value().Data().([]float32)...)
	return x, w, scores, q2k, y
}

// compareOut checks |got - want| <= blockTol * max|want| and logs the error.
func compareOut(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	compareTol(t, what, got, want, blockTol)
}

// compareTol checks |got - want| <= tol * max|want| and logs the error.
func compareTol(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	maxRef, maxErr := 0.0, 0.0
	for i := range want {
		maxRef = math.Max(maxRef, math.Abs(want[i]))
		maxErr = math.Max(maxErr, math.Abs(float64(got[i])-want[i]))
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: NaN at %d", what, i)
		}
	}
	t.Logf("%s: max |err| = %.3g, max |ref| = %.3g (relative %.2g)", what, maxErr, maxRef, maxErr/maxRef)
	if maxErr > tol*maxRef {
		t.Fatalf("%s: max |err| %.3g > %.3g * max |ref| %.3g", what, maxErr, tol, maxRef)
	}
}

// TestTransformerBlockSparse runs the sparse block (topK = 3 of up to 6
// blocks) and compares it with the float64 reference.
//
// The reference's block selection: it computes its own float64 block
// scores and checks that the graph's q2k is a correct top-k of them (the
// forced blocks present, the visible blocks only, the right count, and no
// unselected block scoring more than scoreEps above a selected one), then
// attends exactly the graph's blocks. Re-deriving the selection
// independently would make the test flaky on near-ties: two blocks whose
// scores differ by less than the float32-vs-float64 rounding can be picked
// either way, and both choices are correct.
func TestTransformerBlockSparse(t *testing.T) {
	const topK = 3
	dm := blockDims{tModel, tHq, tHkv, tD}
	x, w, scores, q2k, y := runSparseBlock(t, topK)
	cu := prefix(tSeqs)
	total := int(cu[len(cu)-1])
	maxBlocks := (tMaxSeqlen + tBlk - 1) / tBlk
	scale := 1 / math.Sqrt(tD)

	q, k, v := refProjections(widen(x), total, dm, w)
	ref := refBlockScores(q, k, cu, dm, tBlk, maxBlocks, true, scale)

	// Scores: the same -inf pattern, finite values within float32 rounding.
	const scoreEps = 1e-3
	maxDiff := 0.0
	for i, r := range ref {
		s := float64(scores[i])
		if math.IsInf(r, -1) != math.IsInf(s, -1) {
			t.Fatalf("scores[%d] = %v, reference %v", i, s, r)
		}
		if !math.IsInf(r, -1) {
			maxDiff = math.Max(maxDiff, math.Abs(s-r))
		}
	}
	t.Logf("block scores: max |err| = %.3g", maxDiff)
	if maxDiff > scoreEps {
		t.Fatalf("block scores differ by %.3g > %g", maxDiff, scoreEps)
	}

	// Selection: a correct top-k of the reference scores.
	sparse := 0
	for row := 0; row < tHkv*total; row++ {
		list := q2k[row*topK : (row+1)*topK]
		rs := ref[row*maxBlocks : (row+1)*maxBlocks]
		var visible []int
		for j, s := range rs {
			if !math.IsInf(s, -1) {
				visible = append(visible, j)
			}
		}
		if len(visible) > topK {
			sparse++
		}
		sel := map[int]bool{}
		n := 0
		for _, j := range list {
			if j >= 0 {
				sel[int(j)] = true
				n++
			}
		}
		if n != min(topK, len(visible)) {
			t.Fatalf("row %d: %d blocks selected of %d visible: %v", row, n, len(visible), list)
		}
		if len(visible) > 0 && (!sel[0] || !sel[visible[len(visible)-1]]) {
			t.Fatalf("row %d: forced blocks missing from %v (visible %v)", row, list, visible)
		}
		for _, u := range visible {
			if sel[u] {
				continue
			}
			for j := range sel {
				if j != 0 && j != visible[len(visible)-1] && rs[u] > rs[j]+scoreEps {
					t.Fatalf("row %d: block %d (%.4f) unselected, block %d (%.4f) selected", row, u, rs[u], j, rs[j])
				}
			}
		}
	}
	if sparse == 0 {
		t.Fatal("no query has more visible blocks than topK: the test is not sparse")
	}

	o := refAttention(q, k, v, cu, dm, scale, blockKeys(q2k, total, topK, tBlk, cu))
	compareOut(t, "sparse block", y, matmul64(o, w.wo, total, dm.hq*dm.d, dm.model))

	// The sparsity must matter: dense attention is a different result.
	dense := matmul64(refAttention(q, k, v, cu, dm, scale, causalKeys), w.wo, total, dm.hq*dm.d, dm.model)
	maxRef, maxDiff := 0.0, 0.0
	for i := range dense {
		maxRef = math.Max(maxRef, math.Abs(dense[i]))
		maxDiff = math.Max(maxDiff, math.Abs(float64(y[i])-dense[i]))
	}
	if maxDiff <= 5*blockTol*maxRef {
		t.Fatalf("sparse block within %.3g of dense attention: the selection has no effect", maxDiff)
	}
}

// TestTransformerBlockDense runs the same block with topK >= the number of
// blocks: every visible block is selected and the block must equal dense
// causal attention (no sparsity anywhere in the reference).
func TestTransformerBlockDense(t *testing.T) {
	const topK = 8
	dm := blockDims{tModel, tHq, tHkv, tD}
	x, w, _, q2k, y := runSparseBlock(t, topK)
	cu := prefix(tSeqs)
	total := int(cu[len(cu)-1])
	for h := 0; h < tHkv; h++ {
		for b := range tSeqs {
			for i := 0; i < tSeqs[b]; i++ {
				list := q2k[(h*total+int(cu[b])+i)*topK:][:topK]
				for s, j := range list {
					want := int32(s)
					if s > i/tBlk {
						want = -1
					}
					if j != want {
						t.Fatalf("head %d seq %d query %d: q2k %v, want blocks 0..%d", h, b, i, list, i/tBlk)
					}
				}
			}
		}
	}
	q, k, v := refProjections(widen(x), total, dm, w)
	o := refAttention(q, k, v, cu, dm, 1/math.Sqrt(tD), causalKeys)
	compareOut(t, "dense block", y, matmul64(o, w.wo, total, dm.hq*dm.d, dm.model))
}

// TestTransformerDecodeLoop runs a decode loop of a 2-layer model in one
// graph: per layer, x -> q/k/v projections (float32 G.Mul) -> bf16 -> the
// new k/v appended to the layer's paged cache (WritePagedKV) ->
// DecodeAttention -> float32 -> output projection -> residual add. One
// DecodeSchedule node serves every layer; each step grows seqused_k and
// feeds new token embeddings through G.Let; WritePagedKV updates the cache
// tensors in place, so nothing is fed back. The final hidden state is compared with a
// float64 reference that keeps its own K/V history.
func TestTransformerDecodeLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 5))
	const (
		batch, seqlenQ, layers, steps = 2, 2, 2, 3
		pageSize, cols                = 16, 8
	)
	dm := blockDims{tModel, tHq, tHkv, tD}
	rows := batch * seqlenQ
	numPages := batch * cols
	pt := make([]int32, batch*cols)
	for i, p := range rng.Perm(numPages) {
		pt[i] = int32(p)
	}
	used := []int32{37, 5} // tokens already in the cache

	// The caches start with random bf16 history; the reference keeps the
	// same history as float64 per request: hist[layer][b] = [pos][Hkv][D].
	caches := make([][2]*tensor.Dense, layers)
	hist := make([][2][][]float64, layers)
	for l := range caches {
		for kv := 0; kv < 2; kv++ {
			c := randBF16(rng, numPages, tHkv, pageSize, tD)
			caches[l][kv] = c
			data := c.Data().([]lowp.BFloat16)
			hist[l][kv] = make([][]float64, batch)
			for b := 0; b < batch; b++ {
				for pos := 0; pos < int(used[b]); pos++ {
					page := int(pt[b*cols+pos/pageSize])
					for h := 0; h < tHkv; h++ {
						for c := 0; c < tD; c++ {
							x := data[((page*tHkv+h)*pageSize+pos%pageSize)*tD+c]
							hist[l][kv][b] = append(hist[l][kv][b], float64(x.Float32()))
						}
					}
				}
			}
		}
	}
	weights := make([]blockWeights, layers)
	for l := range weights {
		weights[l] = newWeights(rng, dm)
	}

	// The graph.
	g := G.NewGraph()
	x0 := input(g, "x", f32([]int{rows, dm.model}, make([]float32, rows*dm.model)))
	ptN := input(g, "page_table", i32([]int{batch, cols}, pt))
	usedN := input(g, "seqused_k", i32([]int{batch}, append([]int32{}, used...)))
	sched, err := op.DecodeSchedule(ptN, usedN, op.Heads(tHq, tHkv), op.PageSize(pageSize), op.SeqlenQ(seqlenQ), op.Workers(tWorkers))
	must(t, err)
	cacheIn := make([][2]*G.Node, layers)  // the cache inputs
	cacheOut := make([][2]*G.Node, layers) // the caches with this step's tokens
	x := x0
	for l := 0; l < layers; l++ {
		w := addWeights(g, fmt.Sprintf("l%d.", l), dm, weights[l])
		q, err := project(x, w.wq, rows, tHq, tD)
		must(t, err)
		for kv, wm := range []*G.Node{w.wk, w.wv} {
			nw, err := project(x, wm, rows, tHkv, tD)
			must(t, err)
			cacheIn[l][kv] = input(g, fmt.Sprintf("l%d.cache%d", l, kv), caches[l][kv])
			cacheOut[l][kv], err = op.WritePagedKV(cacheIn[l][kv], nw, ptN, usedN, op.SeqlenQ(seqlenQ))
			must(t, err)
		}
		o, err := op.DecodeAttention(q, cacheOut[l][0], cacheOut[l][1], ptN, usedN, sched, nil)
		must(t, err)
		y, err := outProject(o, w.wo, rows, tHq, tD)
		must(t, err)
		x, err = G.Add(x, y) // residual
		must(t, err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()

	for step := 0; step < steps; step++ {
		for b := range used {
			used[b] += seqlenQ
		}
		must(t, G.Let(usedN, i32([]int{batch}, append([]int32{}, used...))))
		xs := randF32(rng, rows*dm.model, 1)
		must(t, G.Let(x0, f32([]int{rows, dm.model}, append([]float32{}, xs...))))
		must(t, m.RunAll())
		got := append([]float32(nil), x.Value().Data().([]float32)...)
		// WritePagedKV updated the caches in place: the tensors given to
		// G.Let now hold this step's tokens, with no copy and no re-Let.
		for l := range cacheOut {
			for kv := 0; kv < 2; kv++ {
				if cacheOut[l][kv].Value().(*tensor.Dense) != caches[l][kv] {
					t.Fatalf("layer %d cache %d: WritePagedKV's value is not the cache input's tensor", l, kv)
				}
			}
		}
		m.Reset()

		// The float64 reference of the same step.
		x64 := widen(xs)
		for l := 0; l < layers; l++ {
			q, kn, vn := refProjections(x64, rows, dm, weights[l])
			for b := 0; b < batch; b++ {
				n := seqlenQ * tHkv * tD
				hist[l][0][b] = append(hist[l][0][b], kn[b*n:(b+1)*n]...)
				hist[l][1][b] = append(hist[l][1][b], vn[b*n:(b+1)*n]...)
			}
			o := refDecodeAttention(q, hist[l][0], hist[l][1], batch, seqlenQ, dm, 1/math.Sqrt(tD))
			y := matmul64(o, weights[l].wo, rows, tHq*tD, dm.model)
			for i := range x64 {
				x64[i] += y[i]
			}
		}
		compareOut(t, fmt.Sprintf("decode step %d", step), got, x64)
	}
}
