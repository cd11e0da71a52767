package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The graph group builds model graphs the way a model author writes them:
// float32 hidden states, projections with Gorgonia's G.Mul, CastToBF16 to
// the attention dtype, the attention ops of package op, CastFromBF16, the
// output projection and the residual G.Add.

// graphDims are a graph case's model dimensions.
type graphDims struct {
	model, hq, hkv, d int
}

// f32Tensor returns a float32 tensor of N(0, std^2) values.
func f32Tensor(seed uint64, std float64, shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	v := normals(n, seed)
	if std != 1 {
		for i := range v {
			v[i] *= float32(std)
		}
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// inputNode adds an input node holding v (names must be unique: Gorgonia
// merges input nodes with the same name, type and shape).
func inputNode(g *G.ExprGraph, name string, v *tensor.Dense) (*G.Node, error) {
	n := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
	return n, G.Let(n, v)
}

// layerWeights are one layer's projection weight nodes.
type layerWeights struct{ wq, wk, wv, wo *G.Node }

// addLayerWeights adds one layer's weights, scaled so activations stay O(1).
func addLayerWeights(g *G.ExprGraph, prefix string, dm graphDims, seed uint64) (layerWeights, error) {
	var w layerWeights
	s := 1 / math.Sqrt(float64(dm.model))
	specs := []struct {
		dst        **G.Node
		name       string
		rows, cols int
		std        float64
	}{
		{&w.wq, "wq", dm.model, dm.hq * dm.d, s},
		{&w.wk, "wk", dm.model, dm.hkv * dm.d, s},
		{&w.wv, "wv", dm.model, dm.hkv * dm.d, s},
		{&w.wo, "wo", dm.hq * dm.d, dm.model, 1 / math.Sqrt(float64(dm.hq*dm.d))},
	}
	for i, sp := range specs {
		n, err := inputNode(g, prefix+sp.name, f32Tensor(seed+uint64(i), sp.std, sp.rows, sp.cols))
		if err != nil {
			return w, err
		}
		*sp.dst = n
	}
	return w, nil
}

// projectBF16 computes bf16(reshape(x . w, [rows, heads, d])).
func projectBF16(x, w *G.Node, rows, heads, d int) (*G.Node, error) {
	y, err := G.Mul(x, w)
	if err != nil {
		return nil, err
	}
	if y, err = G.Reshape(y, tensor.Shape{rows, heads, d}); err != nil {
		return nil, err
	}
	return op.CastToBF16(y)
}

// outputResidual computes x + reshape(float32(o), [rows, H*D]) . wo.
func outputResidual(x, o, wo *G.Node, rows, hq, d int) (*G.Node, error) {
	o32, err := op.CastFromBF16(o)
	if err != nil {
		return nil, err
	}
	if o32, err = G.Reshape(o32, tensor.Shape{rows, hq * d}); err != nil {
		return nil, err
	}
	y, err := G.Mul(o32, wo)
	if err != nil {
		return nil, err
	}
	return G.Add(x, y)
}

// prefillGraph is one sparse-attention transformer layer over one causal
// sequence of T tokens:
//
//	q, k, v = bf16(reshape(x . Wq|Wk|Wv))
//	q2k     = TopKBlocks(BlockScores(q, k), topK)   (first and diagonal block kept)
//	o       = SparseAttention(q, k, v, K2QCSR(q2k), FwdSchedule(csr), causal)
//	y       = x + reshape(float32(o)) . Wo
type prefillGraph struct {
	g      *G.ExprGraph
	x, out *G.Node
	in     feed
}

// feed is a graph's hidden-state input: two alternating inputs, as a
// serving loop feeds new tokens, copied into the tensor let into x before
// each run. The copy is needed: a TapeMachine runs the residual G.Add(x, y)
// in place (Gorgonia's add overwrites its first input when that input is
// not read later), so after a run the let tensor holds x + y.
type feed struct {
	src [2][]float32
	buf *tensor.Dense
	n   int
}

func newFeed(seed uint64, rows, cols int) feed {
	return feed{src: [2][]float32{normals(rows*cols, seed), normals(rows*cols, seed+1)},
		buf: tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(make([]float32, rows*cols)))}
}

// next copies the next input into the buffer and lets it into x.
func (f *feed) next(x *G.Node) error {
	f.n++
	copy(f.buf.Data().([]float32), f.src[f.n%2])
	return G.Let(x, f.buf)
}

func buildPrefillGraph(T int, dm graphDims, topK, blk, workers int, seed uint64) (*prefillGraph, error) {
	pg := &prefillGraph{g: G.NewGraph()}
	g := pg.g
	pg.in = newFeed(seed, T, dm.model)
	var err error
	if pg.x, err = inputNode(g, "x", pg.in.buf); err != nil {
		return nil, err
	}
	cu, err := inputNode(g, "cu_seqlens", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(T)})))
	if err != nil {
		return nil, err
	}
	w, err := addLayerWeights(g, "", dm, seed+10)
	if err != nil {
		return nil, err
	}
	q, err := projectBF16(pg.x, w.wq, T, dm.hq, dm.d)
	if err != nil {
		return nil, err
	}
	k, err := projectBF16(pg.x, w.wk, T, dm.hkv, dm.d)
	if err != nil {
		return nil, err
	}
	v, err := projectBF16(pg.x, w.wv, T, dm.hkv, dm.d)
	if err != nil {
		return nil, err
	}
	scores, err := op.BlockScores(q, k, cu, cu, op.BlkKV(blk), op.MaxSeqlenK(T), op.Causal(), op.Workers(workers))
	if err != nil {
		return nil, err
	}
	q2k, err := op.TopKBlocks(scores, op.TopK(topK), op.KeepFirst(), op.KeepLast())
	if err != nil {
		return nil, err
	}
	csr, err := op.K2QCSR(q2k, cu, cu, op.BlkKV(blk), op.MaxSeqlenK(T))
	if err != nil {
		return nil, err
	}
	sched, err := op.FwdSchedule(csr, cu, cu, op.QheadPerKV(dm.hq/dm.hkv), op.Workers(workers))
	if err != nil {
		return nil, err
	}
	o, err := op.SparseAttention(q, k, v, csr, sched, cu, cu, op.Causal(), op.Workers(workers))
	if err != nil {
		return nil, err
	}
	pg.out, err = outputResidual(pg.x, o, w.wo, T, dm.hq, dm.d)
	return pg, err
}

// decodeGraph is one decode step of an L-layer model over a batch of
// requests with paged BF16 K/V caches:
//
//	sched = DecodeSchedule(page_table, seqused_k)          (shared by every layer)
//	per layer: q, k_new, v_new = bf16(reshape(x . Wq|Wk|Wv))
//	           K, V = WritePagedKV(cache, k_new|v_new)     (this step's token appended)
//	           x = x + reshape(float32(DecodeAttention(q, K, V, sched))) . Wo
//
// A step: seqused_k grows by one (in place), a new x is let, RunAll, and
// every layer's updated cache is let back into its cache input (the way
// the graph API documents it; WritePagedKV updates the let tensor in place
// and returns it, so this re-lets the same tensor and copies nothing).
type decodeGraph struct {
	g                 *G.ExprGraph
	x, su, out        *G.Node
	cacheIn, cacheOut [][2]*G.Node
	in                feed
	suT               *tensor.Dense
	used              []int32 // suT's backing
	start, capacity   int     // context at the first step, pages * page size per request
	steps             int
}

func buildDecodeGraph(batch, ctx, layers, page int, dm graphDims, maxSteps, workers int, seed uint64) (*decodeGraph, error) {
	dg := &decodeGraph{g: G.NewGraph(), start: ctx}
	g := dg.g
	cols := (ctx + maxSteps + page - 1) / page
	dg.capacity = cols * page
	numPages := batch * cols
	r := rand.New(rand.NewPCG(seed, 17))
	pt := make([]int32, numPages)
	for i, p := range r.Perm(numPages) {
		pt[i] = int32(p)
	}
	dg.used = make([]int32, batch)
	for b := range dg.used {
		dg.used[b] = int32(ctx)
	}
	dg.suT = tensor.New(tensor.WithShape(batch), tensor.WithBacking(dg.used))
	dg.in = newFeed(seed+1, batch, dm.model)
	var err error
	if dg.x, err = inputNode(g, "x", dg.in.buf); err != nil {
		return nil, err
	}
	ptN, err := inputNode(g, "page_table", tensor.New(tensor.WithShape(batch, cols), tensor.WithBacking(pt)))
	if err != nil {
		return nil, err
	}
	if dg.su, err = inputNode(g, "seqused_k", dg.suT); err != nil {
		return nil, err
	}
	sched, err := op.DecodeSchedule(ptN, dg.su, op.Heads(dm.hq, dm.hkv), op.PageSize(page), op.SeqlenQ(1), op.Workers(workers))
	if err != nil {
		return nil, err
	}
	x := dg.x
	for l := 0; l < layers; l++ {
		w, err := addLayerWeights(g, fmt.Sprintf("l%d.", l), dm, seed+uint64(100*(l+1)))
		if err != nil {
			return nil, err
		}
		q, err := projectBF16(x, w.wq, batch, dm.hq, dm.d)
		if err != nil {
			return nil, err
		}
		var in, out [2]*G.Node
		for kv, wm := range []*G.Node{w.wk, w.wv} {
			nw, err := projectBF16(x, wm, batch, dm.hkv, dm.d)
			if err != nil {
				return nil, err
			}
			data, _ := fillQ("bf16", numPages*dm.hkv*page*dm.d, seed+uint64(1000*l+kv), workers)
			cache := tensor.New(tensor.WithShape(numPages, dm.hkv, page, dm.d), tensor.WithBacking(data.([]lowp.BFloat16)))
			if in[kv], err = inputNode(g, fmt.Sprintf("l%d.cache%d", l, kv), cache); err != nil {
				return nil, err
			}
			if out[kv], err = op.WritePagedKV(in[kv], nw, ptN, dg.su, op.SeqlenQ(1)); err != nil {
				return nil, err
			}
		}
		dg.cacheIn, dg.cacheOut = append(dg.cacheIn, in), append(dg.cacheOut, out)
		o, err := op.DecodeAttention(q, out[0], out[1], ptN, dg.su, sched, nil)
		if err != nil {
			return nil, err
		}
		if x, err = outputResidual(x, o, w.wo, batch, dm.hq, dm.d); err != nil {
			return nil, err
		}
	}
	dg.out = x
	return dg, nil
}

// prepareStep readies the next step: every request's context grows by
// the new token (seqused_k is updated in place; back to the starting
// context when the pages are full) and the next x is let.
func (dg *decodeGraph) prepareStep() error {
	if int(dg.used[0])+1 > dg.capacity {
		for b := range dg.used {
			dg.used[b] = int32(dg.start)
		}
	}
	for b := range dg.used {
		dg.used[b]++
	}
	dg.steps++
	if err := G.Let(dg.su, dg.suT); err != nil {
		return err
	}
	return dg.in.next(dg.x)
}

// finishStep lets every layer's updated cache back into its input, as the
// next step's cache (no copy).
func (dg *decodeGraph) finishStep() error {
	for l := range dg.cacheOut {
		for kv := 0; kv < 2; kv++ {
			if err := G.Let(dg.cacheIn[l][kv], dg.cacheOut[l][kv].Value()); err != nil {
				return err
			}
		}
	}
	return nil
}
