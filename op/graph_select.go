package op

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/op/internal/selection"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file holds the graph ops that let a whole model block live in one
// ExprGraph: in-graph block selection (BlockScores, TopKBlocks), the casts
// between Gorgonia's float32 arithmetic and the BFloat16 operands of the
// attention ops (CastToBF16, CastFromBF16), and the paged K/V cache append
// of a decode step (WritePagedKV).

// blockScoresOp computes BlockScoresFunc's scores.
type blockScoresOp struct {
	opBase
	cfg                    BlockScoreConfig
	qDt, kDt               tensor.Dtype
	hkv, totalQ, maxBlocks int
	host                   blockScoresHost // the CUDA path's host side (graph_nodes_host.go)
}

func (op *blockScoresOp) Arity() int { return 4 }
func (op *blockScoresOp) Type() hm.Type {
	return fnType(tt(3, op.qDt), tt(3, op.kDt), tt(1, tensor.Int32), tt(1, tensor.Int32), tt(3, tensor.Float32))
}
func (op *blockScoresOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.hkv, op.totalQ, op.maxBlocks}, nil
}
func (op *blockScoresOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.BlockScores%+v/%v/%v/%d/%d/%d", op.cfg, op.qDt, op.kDt, op.hkv, op.totalQ, op.maxBlocks)
}
func (op *blockScoresOp) Hashcode() uint32 { return hashOf(op) }
func (op *blockScoresOp) String() string {
	return fmt.Sprintf("BlockScores{blk_kv=%d, causal=%v, reduce=%v}", op.cfg.BlkKV, op.cfg.Causal, op.cfg.Reduce)
}

func (op *blockScoresOp) Do(vals ...G.Value) (G.Value, error) {
	const fn = "BlockScores"
	if len(vals) != 4 {
		return nil, validate.ArgErr(fn, "inputs", "4 values", len(vals))
	}
	s := new(selection.Scorer)
	if err := op.check(s, tv(vals[0]), tv(vals[1]), tv(vals[2]), tv(vals[3])); err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(op.hkv, op.totalQ, op.maxBlocks), tensor.WithBacking(s.Run())), nil
}

// check validates the node's inputs into the request s (the CPU Do's and
// the CUDA path's check; a message is formatted only on failure).
func (op *blockScoresOp) check(s *selection.Scorer, q, k, cuQ, cuK tensor.Tensor) error {
	const fn = "BlockScores"
	if err := validateBlockScoresInto(s, fn, q, k, cuQ, cuK, op.cfg, false); err != nil {
		return err
	}
	if s.Hkv != op.hkv || s.TotalQ != op.totalQ {
		return validate.ArgErr(fn, "q/k", fmt.Sprintf("total_q = %d, Hkv = %d as at graph construction", op.totalQ, op.hkv),
			fmt.Sprintf("total_q = %d, Hkv = %d", s.TotalQ, s.Hkv))
	}
	return nil
}

// BlockScores adds block scoring (see BlockScoresFunc for the formula) to
// the graph of q [total_q, Hq, D] and k [total_k, Hkv, D] (BFloat16,
// Float8E4M3FN or float32) with cuQ, cuK int32 [B+1]. Options: MaxSeqlenK
// (required: the node's value is float32 [Hkv, total_q, max_blocks] with
// max_blocks = ceil(max_seqlen_k / blk_kv), and a longer key sequence is an
// error at run time), BlkKV (absent or 0: 128), Causal, SoftmaxScale,
// Reduce and Workers, with the meanings of BlockScoreConfig's fields. Feed
// the node to TopKBlocks, then K2QCSR with the same BlkKV and MaxSeqlenK.
func BlockScores(q, k, cuQ, cuK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "BlockScores"
	o, err := applyOptions(fn, opts, optMaxSeqlenK, optBlkKV, optCausal, optSoftmaxScale, optReduce, optWorkers)
	if err != nil {
		return nil, err
	}
	if err := o.required(fn, optMaxSeqlenK, "it fixes the scores' last dimension"); err != nil {
		return nil, err
	}
	cfg := BlockScoreConfig{BlkKV: o.blkKV, MaxSeqlenK: o.maxSeqlenK, Causal: o.causal, SoftmaxScale: o.scale,
		Reduce: o.reduce, Workers: o.workers}
	for _, x := range []struct {
		n    *G.Node
		name string
	}{{q, "q"}, {k, "k"}} {
		if err := nodeCheck(fn, x.name, x.n, 3, BFloat16, Float8E4M3FN, tensor.Float32); err != nil {
			return nil, err
		}
	}
	if err := nodeCheck(fn, "cu_seqlens_q", cuQ, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_k", cuK, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if cfg.BlkKV == 0 {
		cfg.BlkKV = 128
	}
	if cfg.BlkKV < 1 || cfg.BlkKV > validate.MaxInt32 {
		return nil, validate.ArgErr(fn, "blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", validate.MaxInt32), cfg.BlkKV)
	}
	if cfg.MaxSeqlenK < 1 || cfg.MaxSeqlenK > max(k.Shape()[0], 1) {
		return nil, validate.ArgErr(fn, "max_seqlen_k", fmt.Sprintf("1 <= max_seqlen_k <= total_k = k.shape[0] = %d (it fixes the output shape)", k.Shape()[0]), cfg.MaxSeqlenK)
	}
	if cfg.Reduce != ReduceMax && cfg.Reduce != ReduceMean {
		return nil, validate.ArgErr(fn, "reduce", "ReduceMax or ReduceMean", cfg.Reduce)
	}
	qs, ks := q.Shape(), k.Shape()
	if ks[1] < 1 || qs[1]%ks[1] != 0 || qs[2] != ks[2] || qs[2] < 1 {
		return nil, validate.ArgErr(fn, "q/k", "q [total_q, Hq, D], k [total_k, Hkv, D] with Hq divisible by Hkv and one D >= 1",
			fmt.Sprintf("q %v, k %v", qs, ks))
	}
	if cuQ.Shape()[0] != cuK.Shape()[0] || cuQ.Shape()[0] < 1 {
		return nil, validate.ArgErr(fn, "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = %v matching cu_seqlens_q", cuQ.Shape()), cuK.Shape())
	}
	if err := validate.CheckScalars(fn, cfg.SoftmaxScale, 0, qs[2]); err != nil {
		return nil, err
	}
	op := &blockScoresOp{cfg: cfg, qDt: q.Dtype(), kDt: k.Dtype(), hkv: ks[1], totalQ: qs[0],
		maxBlocks: validate.CeilDiv(cfg.MaxSeqlenK, cfg.BlkKV)}
	if _, err := valueSize(fn, "max_seqlen_k", "scores [Hkv, total_q, ceil(max_seqlen_k / blk_kv)]", op.hkv, op.totalQ, op.maxBlocks); err != nil {
		return nil, err
	}
	return G.ApplyOp(op, q, k, cuQ, cuK)
}

// topKOp selects q2k_indices from block scores.
type topKOp struct {
	opBase
	cfg                    TopKConfig
	topK                   int
	hkv, totalQ, maxBlocks int
	blk                    int       // blk_kv of the BlockScores node scored (0: not known)
	scored                 scoredKey // causality of that BlockScores node
	host                   hostStage // the CUDA path's host side (graph_nodes_host.go)
}

// blockSizer is implemented by the ops whose int32 block ids or float32
// block scores count blocks of a known number of keys: a node reading them
// as blocks of another blk_kv would attend to the wrong keys.
type blockSizer interface {
	blockKV() (blk int, producer string)
}

func (op *blockScoresOp) blockKV() (int, string) { return op.cfg.BlkKV, "BlockScores" }

func (op *topKOp) blockKV() (int, string) { return op.blk, "BlockScores node before TopKBlocks" }

// scoredKey records whether the block ids a node holds were selected from
// causal BlockScores (known false: not selected by a BlockScores node of
// this graph, e.g. fed as an input).
type scoredKey struct{ known, causal bool }

// scoreSource is implemented by the ops whose value descends from a
// BlockScores node: the causality it scored with, which the attention must
// share (checkScoredCausal).
type scoreSource interface{ scoredCausal() scoredKey }

func (op *blockScoresOp) scoredCausal() scoredKey { return scoredKey{true, op.cfg.Causal} }
func (op *topKOp) scoredCausal() scoredKey        { return op.scored }

// scoredBy returns the causality of the BlockScores node n descends from.
func scoredBy(n *G.Node) scoredKey {
	if s, ok := n.Op().(scoreSource); ok {
		return s.scoredCausal()
	}
	return scoredKey{}
}

// checkScoredCausal rejects an attention whose causality differs from that
// of the BlockScores node that selected its blocks: without Causal() a
// query would also attend to the later keys of the blocks causal scores
// chose; with Causal() after non-causal scores, blocks entirely after a
// query are selected and then masked, silently spending its topK.
func checkScoredCausal(fn string, csr *G.Node, causal bool) error {
	sk := scoredBy(csr)
	if !sk.known || sk.causal == causal {
		return nil
	}
	if sk.causal {
		return validate.ArgErr(fn, "Causal", fmt.Sprintf("Causal() on %s as on the BlockScores node that selected the blocks of %s (causal scores; without it each query also attends to the later keys of its blocks)", fn, nodeDesc(csr)),
			"no Causal()")
	}
	return validate.ArgErr(fn, "Causal", fmt.Sprintf("Causal() on the BlockScores node that selected the blocks of %s as well, or on neither (non-causal scores select blocks after a query, which causal attention masks entirely)", nodeDesc(csr)),
		"Causal() on "+fn+" only")
}

// checkProducerBlk rejects a node whose input n holds block ids or scores
// of blocks of another size than blk, naming blk_kv and both values.
func checkProducerBlk(fn string, n *G.Node, blk int) error {
	b, ok := n.Op().(blockSizer)
	if !ok {
		return nil
	}
	pb, producer := b.blockKV()
	if pb == 0 || pb == blk {
		return nil
	}
	return validate.ArgErr(fn, "blk_kv", fmt.Sprintf("blk_kv = %d, the blk_kv of the %s that produced %s (its block ids count blocks of %d keys)", pb, producer, nodeDesc(n), pb),
		fmt.Sprintf("blk_kv = %d", blk))
}

func (op *topKOp) Arity() int { return 1 }
func (op *topKOp) Type() hm.Type {
	return fnType(tt(3, tensor.Float32), tt(3, tensor.Int32))
}
func (op *topKOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.hkv, op.totalQ, op.topK}, nil
}
func (op *topKOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.TopKBlocks%+v/%d/%d/%d/%d/%d/%+v", op.cfg, op.topK, op.hkv, op.totalQ, op.maxBlocks, op.blk, op.scored)
}
func (op *topKOp) Hashcode() uint32 { return hashOf(op) }
func (op *topKOp) String() string {
	return fmt.Sprintf("TopKBlocks{topK=%d, first=%v, last=%v}", op.topK, op.cfg.KeepFirst, op.cfg.KeepLast)
}

func (op *topKOp) Do(vals ...G.Value) (G.Value, error) {
	const fn = "TopKBlocks"
	if len(vals) != 1 {
		return nil, validate.ArgErr(fn, "inputs", "1 value", len(vals))
	}
	return op.run(new(hostStage), tv(vals[0]))
}

// run checks the scores and selects into st's storage: fresh for the CPU
// Do, kept by the node on the CUDA path (a warm run allocates nothing).
func (op *topKOp) run(st *hostStage, scores tensor.Tensor) (*tensor.Dense, error) {
	const fn = "TopKBlocks"
	sd, err := validateTopK(fn, scores, op.topK)
	if err != nil {
		return nil, err
	}
	if s := sd.Shape(); s[0] != op.hkv || s[1] != op.totalQ || s[2] != op.maxBlocks {
		return nil, validate.ArgErr(fn, "scores", fmt.Sprintf("shape [%d, %d, %d] as at graph construction", op.hkv, op.totalQ, op.maxBlocks), validate.ShapeStr(sd))
	}
	out := st.out.view(tensor.Int32, tensor.Shape{op.hkv, op.totalQ, op.topK})
	selection.TopKInto(validate.Int32s(out), validate.Backing[float32](sd), op.hkv*op.totalQ, op.maxBlocks, op.topK, op.cfg.KeepFirst, op.cfg.KeepLast)
	return out, nil
}

// TopKBlocks adds block selection (see TopKBlocksFunc) after a scores node
// float32 [Hkv, total_q, max_blocks], usually made by BlockScores. The
// node's value is q2k_indices int32 [Hkv, total_q, topK] (1 <= topK <= 64),
// ascending, -1 padded, ties to the lower block id, ready for K2QCSR.
// Options: TopK (required), KeepFirst and KeepLast (TopKConfig's rules).
func TopKBlocks(scores *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "TopKBlocks"
	o, err := applyOptions(fn, opts, optTopK, optKeepFirst, optKeepLast)
	if err != nil {
		return nil, err
	}
	if err := o.required(fn, optTopK, "the blocks each query selects"); err != nil {
		return nil, err
	}
	topK, cfg := o.topK, TopKConfig{KeepFirst: o.keepFirst, KeepLast: o.keepLast}
	if err := nodeCheck(fn, "scores", scores, 3, tensor.Float32); err != nil {
		return nil, err
	}
	if topK < 1 || topK > validate.MaxTopK {
		return nil, validate.ArgErr(fn, "topK", fmt.Sprintf("1 <= topK <= %d", validate.MaxTopK), topK)
	}
	s := scores.Shape()
	if s[0] < 1 {
		return nil, validate.ArgErr(fn, "scores", "Hkv >= 1", s)
	}
	op := &topKOp{cfg: cfg, topK: topK, hkv: s[0], totalQ: s[1], maxBlocks: s[2]}
	if b, ok := scores.Op().(blockSizer); ok {
		op.blk, _ = b.blockKV()
	}
	op.scored = scoredBy(scores)
	return G.ApplyOp(op, scores)
}

// castOp converts between float32 and BFloat16 element by element, split
// over up to GOMAXPROCS pooled goroutines for large tensors. Its output storage is kept
// across runs (graph_outbuf.go: a value is valid until the node's next
// run).
type castOp struct {
	opBase
	from, to tensor.Dtype
	shape    tensor.Shape
	out      castBufs
	work     castWork  // the conversion's goroutines (cast_convert.go)
	host     hostStage // the CUDA path's host side (graph_nodes_host.go)
}

func (op *castOp) Arity() int { return 1 }
func (op *castOp) Type() hm.Type {
	return fnType(tt(op.shape.Dims(), op.from), tt(op.shape.Dims(), op.to))
}
func (op *castOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op *castOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.Cast/%v/%v/%v", op.from, op.to, []int(op.shape))
}
func (op *castOp) Hashcode() uint32 { return hashOf(op) }
func (op *castOp) String() string {
	return fmt.Sprintf("Cast{%s->%s}", validate.DtypeName(op.from), validate.DtypeName(op.to))
}

// fn names the cast's constructor (for errors).
func (op *castOp) fn() string {
	if op.to == tensor.Float32 {
		return "CastFromBF16"
	}
	return "CastToBF16"
}

func (op *castOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, validate.ArgErr(op.fn(), "inputs", "1 value", len(vals))
	}
	x, err := op.check(tv(vals[0]))
	if err != nil {
		return nil, err
	}
	var out *tensor.Dense
	if op.to == BFloat16 {
		out = op.out.bf16.dense(op.shape...)
	} else {
		out = op.out.f32.dense(op.shape...)
	}
	op.convert(out, x)
	return out, nil
}

// check is the cast's check of its input (the CPU Do's and the CUDA
// path's): a dense tensor of the node's dtype and shape.
func (op *castOp) check(xT tensor.Tensor) (*tensor.Dense, error) {
	c := validate.Checker{Fn: op.fn()}
	x := c.Dense(xT, "x")
	c.Dtype(x, "x", op.from)
	if c.Err != nil {
		return nil, c.Err
	}
	if !x.Shape().Eq(op.shape) {
		return nil, validate.ArgErr(c.Fn, "x", fmt.Sprintf("shape %v as at graph construction", op.shape), validate.ShapeStr(x))
	}
	return x, nil
}

func castNode(fn string, x *G.Node, from, to tensor.Dtype) (*G.Node, error) {
	if err := nodeCheck(fn, "x", x, 0, from); err != nil {
		return nil, err
	}
	if x.Shape().Dims() < 1 {
		return nil, validate.ArgErr(fn, "x", "a tensor of rank >= 1 (custom dtypes have no scalars)", x.Shape())
	}
	return G.ApplyOp(&castOp{from: from, to: to, shape: x.Shape().Clone()}, x)
}

// CastToBF16 rounds a float32 node of rank >= 1 to BFloat16 (round to
// nearest even, NaN stays NaN): the bridge from Gorgonia's float32
// arithmetic (G.Mul projections) to the attention ops' operands. The
// node keeps its output storage across runs: its value is valid until the
// node runs again, which rewrites it in place (tensor.Clone it to keep it).
func CastToBF16(x *G.Node) (*G.Node, error) {
	return castNode("CastToBF16", x, tensor.Float32, BFloat16)
}

// CastFromBF16 widens a BFloat16 node of rank >= 1 (e.g. an attention
// output) to float32, exactly, so Gorgonia's built-in ops can use it. Its
// value, like CastToBF16's, is rewritten in place by the node's next run.
func CastFromBF16(x *G.Node) (*G.Node, error) {
	return castNode("CastFromBF16", x, BFloat16, tensor.Float32)
}

// writePagedKVOp appends a decode step's keys or values to a paged cache.
type writePagedKVOp struct {
	opBase
	seqlenQ    int
	dt         tensor.Dtype
	cacheShape tensor.Shape
	layout     PagedLayout
	host       writeKVHost // the CUDA path's host side (graph_nodes_host.go)
}

func (op *writePagedKVOp) Arity() int { return 4 }
func (op *writePagedKVOp) Type() hm.Type {
	return fnType(tt(4, op.dt), tt(3, op.dt), tt(2, tensor.Int32), tt(1, tensor.Int32), tt(4, op.dt))
}
func (op *writePagedKVOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.cacheShape.Clone(), nil
}
func (op *writePagedKVOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.WritePagedKV/%d/%v/%v/%v", op.seqlenQ, op.dt, []int(op.cacheShape), op.layout)
}
func (op *writePagedKVOp) Hashcode() uint32 { return hashOf(op) }
func (op *writePagedKVOp) String() string {
	return fmt.Sprintf("WritePagedKV{seqlen_q=%d}", op.seqlenQ)
}

func (op *writePagedKVOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 4 {
		return nil, validate.ArgErr("WritePagedKV", "inputs", "4 values", len(vals))
	}
	var rows []int
	cache, nw, dst, err := op.check(&rows, tv(vals[0]), tv(vals[1]), tv(vals[2]), tv(vals[3]))
	if err != nil {
		return nil, err
	}
	// In place: the cache value the machine holds (the tensor given to
	// G.Let) is updated at O(new tokens) and returned as the node's value.
	// A view was materialised by c.dense into a private copy: the write
	// lands in that copy, which is returned.
	hkv, ps := op.layout.dims(op.cacheShape)
	scatterKV(cache, nw, 0, dst, op.layout, hkv, ps, op.cacheShape[3])
	return cache, nil
}

// check is the cache write's check of its inputs (the CPU Do's, and the
// CUDA path's, whose cache is in device memory: only its dtype and shape
// are read): it returns the cache, the new rows and, in *rows (grown as
// needed), the cache row of head 0 of each new row.
func (op *writePagedKVOp) check(rows *[]int, cacheT, nwT, ptT, suT tensor.Tensor) (cache, nw *tensor.Dense, dst []int, err error) {
	const fn = "WritePagedKV"
	c := validate.Checker{Fn: fn}
	cache, nw = c.Dense(cacheT, "cache"), c.Dense(nwT, "new")
	pt, su := c.Dense(ptT, "page_table"), c.Dense(suT, "seqused_k")
	c.Dtype(cache, "cache", op.dt)
	c.Dtype(nw, "new", op.dt)
	c.Dtype(pt, "page_table", tensor.Int32)
	c.Dtype(su, "seqused_k", tensor.Int32)
	c.Rank(pt, "page_table", "[B, max_num_pages_per_seq]", 2)
	c.Rank(su, "seqused_k", "[B]", 1)
	if c.Err != nil {
		return nil, nil, nil, c.Err
	}
	cs := op.cacheShape
	numPages, d := cs[0], cs[3]
	hkv, ps := op.layout.dims(cs)
	batch, cols := pt.Shape()[0], pt.Shape()[1]
	if !cache.Shape().Eq(cs) {
		c.Fail("cache", fmt.Sprintf("shape %v as at graph construction", cs), validate.ShapeStr(cache))
	}
	if su.Shape()[0] != batch {
		c.Fail("seqused_k", fmt.Sprintf("shape [B] = [%d]", batch), validate.ShapeStr(su))
	}
	if !nw.Shape().Eq(tensor.Shape{batch * op.seqlenQ, hkv, d}) {
		c.Fail("new", fmt.Sprintf("shape [B * seqlen_q, Hkv, D] = [%d, %d, %d]", batch*op.seqlenQ, hkv, d), validate.ShapeStr(nw))
	}
	if c.Err != nil {
		return nil, nil, nil, c.Err
	}
	ptv, used := validate.Int32s(pt), validate.Int32s(su)
	if n := batch * op.seqlenQ; cap(*rows) < n {
		*rows = make([]int, n)
	}
	dst = (*rows)[:batch*op.seqlenQ]
	if !writeRows(dst, ptv, used, op.seqlenQ, cols, ps, hkv, numPages, op.layout) {
		return nil, nil, nil, writeRowsErr(fn, ptv, used, op.seqlenQ, cols, ps, numPages)
	}
	return cache, nw, dst, nil
}

// writeRowsErr is the error of the first position or page writeRows
// refuses.
func writeRowsErr(fn string, ptv, used []int32, seqlenQ, cols, ps, numPages int) error {
	for b := range used {
		for i := 0; i < seqlenQ; i++ {
			pos := int(used[b]) - seqlenQ + i
			if pos < 0 || pos >= cols*ps {
				return validate.ArgErr(fn, fmt.Sprintf("seqused_k[%d]", b),
					fmt.Sprintf("seqlen_q = %d <= seqused_k <= max_num_pages_per_seq * page_size = %d", seqlenQ, cols*ps), used[b])
			}
			if page := int(ptv[b*cols+pos/ps]); page < 0 || page >= numPages {
				return validate.ArgErr(fn, fmt.Sprintf("page_table[%d, %d]", b, pos/ps), fmt.Sprintf("a page in [0, %d)", numPages), page)
			}
		}
	}
	return nil
}

// ReturnsPtr reports that the value is the cache input's tensor.
func (op *writePagedKVOp) ReturnsPtr() bool { return true }

// OverwritesInput reports that input 0 (the cache) is updated in place.
func (op *writePagedKVOp) OverwritesInput() int { return 0 }

// WritePagedKV appends one decode step's keys (or values) to a paged cache
// inside a graph: cache [num_pages, Hkv, page_size, D] and newKV
// [B*seqlen_q, Hkv, D] (both BFloat16 or both Float8E4M3FN), page_table
// int32 [B, pages], seqused_k int32 [B] already counting the new tokens.
// Row b*seqlen_q+i lands at position seqused_k[b] - seqlen_q + i of request
// b. The write is in place, at O(new tokens) per step: the node's value is
// the cache input's own tensor (the one given to G.Let), updated, so the
// cache persists across machine runs without copying and without a G.Let
// of the result; feed the node to DecodeAttention. Do not read the cache
// input node anywhere else in the same graph (it would see the cache before
// or after the write depending on the execution order). For a prompt of
// ragged length, use the eager WritePagedKVFunc before the first decode step.
// Options: SeqlenQ (absent: newKV.shape[0] / B) and KVLayout (the cache's
// layout: HND [num_pages, Hkv, page_size, D], the default, or NHD
// [num_pages, page_size, Hkv, D]).
func WritePagedKV(cache, newKV, pageTable, seqUsedK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "WritePagedKV"
	o, err := applyOptions(fn, opts, optSeqlenQ, optKVLayout)
	if err != nil {
		return nil, err
	}
	lc := &validate.Checker{Fn: fn}
	if checkLayout(lc, o.layout, true); lc.Err != nil {
		return nil, lc.Err
	}
	if err := nodeCheck(fn, "cache", cache, 4, BFloat16, Float8E4M3FN); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "new", newKV, 3, cache.Dtype()); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "page_table", pageTable, 2, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "seqused_k", seqUsedK, 1, tensor.Int32); err != nil {
		return nil, err
	}
	cs, ns := cache.Shape(), newKV.Shape()
	b := pageTable.Shape()[0]
	seqlenQ := o.seqlenQ
	if !o.has(optSeqlenQ) && b > 0 {
		seqlenQ = ns[0] / b
	}
	if seqlenQ < 1 {
		return nil, validate.ArgErr(fn, "seqlen_q", ">= 1", seqlenQ)
	}
	hkv, _ := o.layout.dims(cs)
	if ns[0] != b*seqlenQ || ns[1] != hkv || ns[2] != cs[3] || seqUsedK.Shape()[0] != b {
		return nil, validate.ArgErr(fn, "new", fmt.Sprintf("shape [B * seqlen_q, Hkv, D] = [%d, %d, %d] (cache %v, %v layout)", b*seqlenQ, hkv, cs[3], cs, o.layout), ns)
	}
	return G.ApplyOp(&writePagedKVOp{seqlenQ: seqlenQ, dt: cache.Dtype(), cacheShape: cs.Clone(), layout: o.layout}, cache, newKV, pageTable, seqUsedK)
}
