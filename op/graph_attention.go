package op

import (
	"fmt"
	"hash"
	"sync"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// attnConfig holds the options of the graph constructors (graph_options.go)
// and the optional input nodes.
type attnConfig struct {
	causal      bool
	scale       float64
	temperature float64
	partial     tensor.Dtype
	qk, pv      tensor.Dtype
	workers     int
	pageTable   *G.Node
	seqused     *G.Node
	nvfp4       bool
	kScale      *G.Node
	vScale      *G.Node
	kGlobal     *G.Node
	vGlobal     *G.Node
	sharedKV    bool

	blkKV, maxSeqlenK, topK, totalQ, qpk   int
	seqlenQ, hq, hkv, pageSize, fixedSplit int
	disableSplit, keepFirst, keepLast      bool
	reduce                                 HeadReduce
	layout                                 PagedLayout
	maxWorkspace                           int64
	cudaSMs                                int    // PlanForCUDA: the GPU's SM count
	given                                  uint64 // bit optID: the option was given
}

// sameKVErr is the error of k and v being one node without SharedKV.
func sameKVErr(fn string, k, v *G.Node, cfg *attnConfig) error {
	if k == nil || k != v || cfg.sharedKV {
		return nil
	}
	return validate.ArgErr(fn, "v", "a node distinct from k (Gorgonia merges unnamed input nodes of equal type and shape: name them, e.g. G.WithName(\"v\")), or the SharedKV() option if k and v are meant to be one tensor", "the same node as k ("+nodeDesc(k)+")")
}

// attnState is shared by an attention node and its LSE accessor nodes: the
// attention's Do stores the side results, the accessors return them.
type attnState struct {
	mu        sync.Mutex
	needT     bool
	lse, tlse *tensor.Dense
	// dlse is the LSE gradient a LispMachine's backward passed through
	// the node's LSE accessors (summed), for the node's DoDiff; the
	// forward clears it.
	dlse []float32
	ws   *attn.Workspace
	g    gradState // float32 forward and backward (graph_grad.go)
	// o and lseBuf are a BFloat16 forward's O and LSE storage, kept
	// across runs (graph_outbuf.go).
	o      ownedBuf[lowp.BFloat16]
	lseBuf ownedBuf[float32]
}

// sparseAttnOp is the sparse prefill attention node.
type sparseAttnOp struct {
	opBase
	cfg      attnConfig
	sched    schedLayout
	inDtypes []tensor.Dtype
	inDims   []int
	outShape tensor.Shape
	st       *attnState
	host     sparseHost // the CUDA path's host side, guarded by st.mu
}

func (op *sparseAttnOp) Arity() int { return len(op.inDtypes) }
func (op *sparseAttnOp) Type() hm.Type {
	ts := make([]hm.Type, 0, len(op.inDtypes)+1)
	for i, dt := range op.inDtypes {
		ts = append(ts, tt(op.inDims[i], dt))
	}
	ts = append(ts, tt(3, op.outDtype()))
	return fnType(ts...)
}
func (op *sparseAttnOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.outShape.Clone(), nil
}
func (op *sparseAttnOp) WriteHash(h hash.Hash) {
	c := op.cfg
	fmt.Fprintf(h, "msa.SparseAttention/%v/%v/%v/%v/%v/%v/%v/%d/%v/%v/%p", c.causal, c.scale, c.temperature,
		c.partial, c.qk, c.pv, c.nvfp4, c.workers, c.layout, op.sched.csr, op.st)
}
func (op *sparseAttnOp) Hashcode() uint32 { return hashOf(op) }
func (op *sparseAttnOp) String() string {
	return fmt.Sprintf("SparseAttention{causal=%v, topK=%d}", op.cfg.causal, op.sched.csr.TopK)
}

// attnSlots are the input positions of a sparse attention node's optional
// inputs (-1 when the node has none); q, k, v, csr, schedule, cu_seqlens_q
// and cu_seqlens_k are always inputs 0-6.
type attnSlots struct {
	pageTable, seqused, kScale, vScale, kGlobal, vGlobal int
}

func (op *sparseAttnOp) slots() attnSlots {
	s := attnSlots{-1, -1, -1, -1, -1, -1}
	i := 7
	next := func(present bool) int {
		if !present {
			return -1
		}
		i++
		return i - 1
	}
	s.pageTable = next(op.cfg.pageTable != nil)
	s.seqused = next(op.cfg.pageTable != nil && op.cfg.seqused != nil)
	s.kScale = next(op.cfg.nvfp4)
	s.vScale = next(op.cfg.nvfp4)
	s.kGlobal = next(op.cfg.nvfp4 && op.cfg.kGlobal != nil)
	s.vGlobal = next(op.cfg.nvfp4 && op.cfg.vGlobal != nil)
	return s
}

// inputFunc returns input i of a node as a dense tensor; meta reports that
// the caller will read its values on the host (metadata), as opposed to
// tensors whose shape and dtype suffice (q, k, v, NVFP4 block scales).
type inputFunc func(i int, arg string, meta bool) (*tensor.Dense, error)

// call validates the node's inputs and prepares the attention call; the CPU
// Do and the GPU CUDADo differ only in how they fetch inputs. The caller
// holds op.st.mu.
func (op *sparseAttnOp) call(fn string, in inputFunc) (*sparseCall, attnSlots, error) {
	sl := op.slots()
	var ts [7]*tensor.Dense
	for i, x := range []struct {
		arg  string
		meta bool
	}{{"q", false}, {"k", false}, {"v", false}, {"csr", true}, {"schedule", true}, {"cu_seqlens_q", true}, {"cu_seqlens_k", true}} {
		t, err := in(i, x.arg, x.meta)
		if err != nil {
			return nil, sl, err
		}
		ts[i] = t
	}
	l := op.sched.csr
	if ts[3].Dtype() != tensor.Int32 || ts[3].DataSize() != l.Hkv*l.width() {
		return nil, sl, validate.ArgErr(fn, "csr", fmt.Sprintf("an int32 CSR value of %d elements", l.Hkv*l.width()), ts[3].DataSize())
	}
	if ts[4].Dtype() != tensor.Int32 || ts[4].DataSize() != op.sched.len() {
		return nil, sl, validate.ArgErr(fn, "schedule", fmt.Sprintf("an int32 schedule value of %d elements", op.sched.len()), ts[4].DataSize())
	}
	rp, qi := l.split(validate.Int32s(ts[3]))
	args := SparseArgs{
		CuSeqlensQ: ts[5], CuSeqlensK: ts[6], BlkKV: l.BlkKV, Causal: op.cfg.causal,
		SoftmaxScale: op.cfg.scale, Temperature: op.cfg.temperature,
		ReturnTemperatureLSE: op.st.needT, PartialDtype: op.cfg.partial,
		Schedule: &Schedule{s: *op.sched.unpack(validate.Int32s(ts[4])), hkv: l.Hkv}, Workers: op.cfg.workers,
		QKDtype: op.cfg.qk, PVDtype: op.cfg.pv, KVLayout: op.cfg.layout,
	}
	// Optional inputs: absent ones have slot -1 and leave their field a nil
	// interface (not a nil *tensor.Dense).
	var nv nvfp4Inputs
	for _, x := range []struct {
		dst  *tensor.Tensor
		idx  int
		arg  string
		meta bool
	}{
		{&args.PageTable, sl.pageTable, "page_table", true},
		{&args.SeqUsedK, sl.seqused, "seqused_k", true},
		{&nv.kScale, sl.kScale, "k_scale_128x4", false},
		{&nv.vScale, sl.vScale, "v_scale_128x4", false},
		{&nv.kGlobal, sl.kGlobal, "k_global_scale", true},
		{&nv.vGlobal, sl.vGlobal, "v_global_scale", true},
	} {
		if x.idx < 0 {
			continue
		}
		t, err := in(x.idx, x.arg, x.meta)
		if err != nil {
			return nil, sl, err
		}
		*x.dst = t
	}
	var nvp *nvfp4Inputs
	if op.cfg.nvfp4 {
		nvp = &nv
	}
	rowPtr := tensor.New(tensor.WithShape(l.Hkv, l.RowCap+1), tensor.WithBacking(rp))
	qIdx := tensor.New(tensor.WithShape(l.Hkv, l.Stride), tensor.WithBacking(qi))
	sc, err := validateSparse(fn, ts[0], ts[1], ts[2], rowPtr, qIdx, l.TopK, &args, nvp)
	return sc, sl, err
}

func (op *sparseAttnOp) Do(vals ...G.Value) (G.Value, error) {
	const fn = "SparseAttention"
	if len(vals) != op.Arity() {
		return nil, validate.ArgErr(fn, "inputs", fmt.Sprintf("%d values", op.Arity()), len(vals))
	}
	if op.outDtype() == tensor.Float32 {
		return op.doF32(vals)
	}
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	sc, _, err := op.call(fn, func(i int, arg string, _ bool) (*tensor.Dense, error) { return denseOf(fn, arg, vals[i]) })
	if err != nil {
		return nil, err
	}
	if op.st.ws == nil {
		op.st.ws = attn.NewWorkspace(sc.workers, sc.p.D)
	}
	p := &sc.p
	sc.out, sc.outLSE = op.st.o.dense(p.TotalQ, p.HQ, p.D), op.st.lseBuf.dense(p.TotalQ, p.HQ)
	res := sc.run(op.st.ws, nil)
	op.st.lse, op.st.tlse, op.st.dlse = res.LSE, res.TemperatureLSE, nil
	return res.Out, nil
}

// SparseAttention adds block-sparse attention after a CSR node (K2QCSR or
// PackK2QCSR) and its FwdSchedule node. q is [total_q, Hq, D] BFloat16 or
// Float8E4M3FN; k, v are [total_k, Hkv, D] (or paged / NVFP4 per the
// options); cuQ, cuK are int32 [B+1]. The node's value is O, BFloat16
// [total_q, Hq, D]; LSE(node) and TemperatureLSE(node) expose the side
// results computed by the same run. The BFloat16 node keeps O's and
// LSE's storage across runs: their values are valid until the node runs
// again, which rewrites them in place (tensor.Clone them to keep them).
// Options: Causal, SoftmaxScale,
// Temperature, PartialDtype, MMADtypes, Workers, Paged, KVLayout (with
// Paged), NVFP4KV, SharedKV. After a BlockScores -> TopKBlocks -> K2QCSR
// chain, Causal() must match the BlockScores node's.
// With float32 q, k and v (all three)
// the node runs without low-precision rounding, its value is float32, and
// it is differentiable with respect to q, k and v (graph_grad.go).
func SparseAttention(q, k, v, csr, sched, cuQ, cuK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "SparseAttention"
	cfg, err := applyOptions(fn, opts, optCausal, optSoftmaxScale, optTemperature, optPartialDtype,
		optMMADtypes, optWorkers, optPaged, optNVFP4KV, optSharedKV, optKVLayout)
	if err != nil {
		return nil, err
	}
	lc := &validate.Checker{Fn: fn}
	if checkLayout(lc, cfg.layout, cfg.pageTable != nil); lc.Err != nil {
		return nil, lc.Err
	}
	if cfg.layout == NHD && q != nil && q.Dtype() == tensor.Float32 {
		return nil, &NotImplementedError{Func: fn, What: "the NHD paged K/V layout with float32 q, k, v (the float32 path and its gradients take HND [num_pages, Hkv, page_size, D])"}
	}
	l, err := csrOf(fn, csr)
	if err != nil {
		return nil, err
	}
	if err := checkScoredCausal(fn, csr, cfg.causal); err != nil {
		return nil, err
	}
	if err := sameKVErr(fn, k, v, &cfg); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "q", q, 3, BFloat16, Float8E4M3FN, tensor.Float32); err != nil {
		return nil, err
	}
	if err := attnHeadDimCheck(fn, q); err != nil {
		return nil, err
	}
	if cfg.pageTable == nil && cfg.seqused != nil {
		return nil, validate.ArgErr(fn, "seqused_k", "no seqused_k without a page table (Paged(pageTable, seqUsedK) with pageTable != nil)", nodeDesc(cfg.seqused))
	}
	if err := checkAttnOptions(fn, &cfg); err != nil {
		return nil, err
	}
	if cfg.pageTable != nil {
		if err := nodeCheck(fn, "page_table", cfg.pageTable, 2, tensor.Int32); err != nil {
			return nil, err
		}
		if cfg.seqused != nil {
			if err := nodeCheck(fn, "seqused_k", cfg.seqused, 1, tensor.Int32); err != nil {
				return nil, err
			}
		}
	}
	if err := validate.CheckScalars(fn, cfg.scale, cfg.temperature, q.Shape()[2]); err != nil {
		return nil, err
	}
	kv := []tensor.Dtype{BFloat16, Float8E4M3FN}
	kvDims := 3
	if cfg.nvfp4 {
		kv = []tensor.Dtype{tensor.Uint8}
	} else if q.Dtype() == tensor.Float32 {
		kv = []tensor.Dtype{tensor.Float32} // float32 q, k, v: see graph_grad.go
	}
	if cfg.pageTable != nil {
		kvDims = 4
	}
	if err := nodeCheck(fn, "k", k, kvDims, kv...); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "v", v, kvDims, kv...); err != nil {
		return nil, err
	}
	qs, ks := q.Shape(), k.Shape()
	if cfg.pageTable != nil {
		if hkv, ps := cfg.layout.dims(ks); hkv != l.Hkv || ps != l.BlkKV {
			return nil, validate.ArgErr(fn, "k", fmt.Sprintf("the paged %v layout %s with Hkv = %d, page_size = blk_kv = %d%s", cfg.layout, cfg.layout.shape("D"), l.Hkv, l.BlkKV, cfg.layout.other()), fmt.Sprint(ks))
		}
	} else if ks[1] != l.Hkv {
		return nil, validate.ArgErr(fn, "k", fmt.Sprintf("Hkv = k.shape[1] = %d as in the CSR", l.Hkv), fmt.Sprint(ks))
	}
	if qs[0] != l.TotalQ || qs[1]%l.Hkv != 0 {
		return nil, validate.ArgErr(fn, "q", fmt.Sprintf("[total_q = %d, Hq divisible by Hkv = %d, D] consistent with the CSR", l.TotalQ, l.Hkv), fmt.Sprint(qs))
	}
	hkv := l.Hkv
	if err := nodeCheck(fn, "sched", sched, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if so, ok := sched.Op().(*schedOp); ok {
		// Values given to both FwdSchedule and SparseAttention: compare
		// them and name the mismatched one; an absent Workers option takes
		// the schedule's.
		if so.s.qpk != qs[1]/hkv {
			return nil, validate.ArgErr(fn, "QheadPerKV", fmt.Sprintf("FwdSchedule's QheadPerKV(%d) option equal to the attention's q.shape[1] / k.shape[1] = %d / %d = %d", so.s.qpk, qs[1], hkv, qs[1]/hkv), so.s.qpk)
		}
		if cfg.workers <= 0 {
			cfg.workers = so.s.workers
		} else if cfg.workers != so.s.workers {
			return nil, validate.ArgErr(fn, "Workers", fmt.Sprintf("the Workers option equal to FwdSchedule's workers = %d (or absent: it is then taken from the schedule)", so.s.workers), cfg.workers)
		}
	}
	ws := validate.WorkerCount(cfg.workers)
	sl := newSchedLayout(l, qs[1]/hkv, ws)
	if sched.Shape()[0] != sl.len() {
		return nil, validate.ArgErr(fn, "sched", fmt.Sprintf("a FwdSchedule value of %d elements for this CSR and qhead_per_kv", sl.len()), fmt.Sprint(sched.Shape()))
	}
	inputs := []*G.Node{q, k, v, csr, sched, cuQ, cuK}
	if cfg.pageTable != nil {
		inputs = append(inputs, cfg.pageTable)
		if cfg.seqused != nil {
			inputs = append(inputs, cfg.seqused)
		}
	}
	if cfg.nvfp4 {
		inputs = append(inputs, cfg.kScale, cfg.vScale)
		if cfg.kGlobal != nil {
			inputs = append(inputs, cfg.kGlobal)
		}
		if cfg.vGlobal != nil {
			inputs = append(inputs, cfg.vGlobal)
		}
	}
	op := &sparseAttnOp{cfg: cfg, sched: sl, outShape: tensor.Shape{qs[0], qs[1], qs[2]}, st: &attnState{}}
	for i, n := range inputs {
		if n == nil {
			return nil, validate.ArgErr(fn, fmt.Sprintf("input %d", i), "a node", "nil")
		}
		op.inDtypes = append(op.inDtypes, n.Dtype())
		op.inDims = append(op.inDims, n.Shape().Dims())
	}
	return G.ApplyOp(op, inputs...)
}

// lseOp returns a side result (LSE or temperature LSE) of an attention node.
type lseOp struct {
	opBase
	st    *attnState
	fwd   *sparseAttnOp // the SparseAttention node's op (nil for decode)
	temp  bool
	shape tensor.Shape
	outDt tensor.Dtype // dtype of the attention output (the input)
}

func (op *lseOp) Arity() int                                     { return 1 }
func (op *lseOp) Type() hm.Type                                  { return fnType(tt(3, op.outDt), tt(2, tensor.Float32)) }
func (op *lseOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op *lseOp) WriteHash(h hash.Hash)                          { fmt.Fprintf(h, "msa.LSE/%v/%p", op.temp, op.st) }
func (op *lseOp) Hashcode() uint32                               { return hashOf(op) }
func (op *lseOp) String() string {
	if op.temp {
		return "TemperatureLSE"
	}
	return "LSE"
}

func (op *lseOp) Do(vals ...G.Value) (G.Value, error) {
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	t := op.st.lse
	if op.temp {
		t = op.st.tlse
	}
	if t == nil {
		return nil, validate.ArgErr(op.String(), "attention", "an attention node that has run before this node", "no result")
	}
	return t, nil
}

// lseProducers names the nodes whose LSE the accessors read.
const lseProducers = "a SparseAttention, DecodeAttention, MergeStates, ContextParallelMerge or ContextParallelPrefill node"

// lseNode builds an accessor node.
func lseNode(fn string, out *G.Node, temp bool) (*G.Node, error) {
	if out == nil {
		return nil, validate.ArgErr(fn, "out", lseProducers, "nil")
	}
	var st *attnState
	var fwd *sparseAttnOp
	switch o := out.Op().(type) {
	case *sparseAttnOp:
		st, fwd = o.st, o
	case *decodeAttnOp:
		if temp {
			return nil, validate.ArgErr(fn, "out", "a SparseAttention node (decode has no temperature LSE)", o.String())
		}
		st = o.st
	case mergeNode:
		if temp {
			return nil, validate.ArgErr(fn, "out", "a SparseAttention node (a merge has no temperature LSE)", fmt.Sprint(o))
		}
		st = o.mergedLSE()
	default:
		return nil, validate.ArgErr(fn, "out", lseProducers, fmt.Sprint(out.Op()))
	}
	if temp {
		st.needT = true
	}
	s := out.Shape()
	return G.ApplyOp(&lseOp{st: st, fwd: fwd, temp: temp, shape: tensor.Shape{s[0], s[1]}, outDt: out.Dtype()}, out)
}

// LSE returns a node holding the natural-log LSE [total_q, Hq] float32
// computed by the attention node out (nothing is recomputed). The LSE of a
// SparseAttention node is differentiable: G.Grad and a LispMachine's
// backward pass its gradient to the node's backward as dLSE. The LSE of
// decode attention is forward-only.
func LSE(out *G.Node) (*G.Node, error) { return lseNode("LSE", out, false) }

// TemperatureLSE returns a node holding logsumexp(s/T) [total_q, Hq]
// float32 of the sparse attention node out (T from the Temperature option;
// equal to LSE when T = 1).
func TemperatureLSE(out *G.Node) (*G.Node, error) { return lseNode("TemperatureLSE", out, true) }

// checkAttnOptions rejects SparseAttention options that would run as
// something else than they say or fail only when the graph runs: Paged
// without a page table (it would run dense), a partial_dtype or an MMA
// dtype the kernels do not have.
func checkAttnOptions(fn string, cfg *attnConfig) error {
	if cfg.has(optPaged) && cfg.pageTable == nil {
		return validate.ArgErr(fn, "Paged", "a page_table node (Paged(pageTable, seqUsedK); only seqUsedK may be nil; leave Paged out for dense K/V)",
			"Paged(nil, nil)")
	}
	switch cfg.partial {
	case tensor.Dtype{}, tensor.Float32, BFloat16, Float16, Float8E4M3FN:
	default:
		return validate.ArgErr(fn, "partial_dtype", "PartialDtype of float32, bfloat16, float16 or float8_e4m3fn", validate.DtypeName(cfg.partial))
	}
	for _, m := range []struct {
		arg string
		dt  tensor.Dtype
	}{{"qk_dtype", cfg.qk}, {"pv_dtype", cfg.pv}} {
		if m.dt != (tensor.Dtype{}) && m.dt != BFloat16 && m.dt != Float8E4M3FN {
			return validate.ArgErr(fn, m.arg, "MMADtypes of bfloat16 or float8_e4m3fn (or the zero Dtype: the default)", validate.DtypeName(m.dt))
		}
	}
	return nil
}
