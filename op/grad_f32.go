package op

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
	"gorgonia.org/tensor"
)

// This file holds the float32 path of SparseAttenFunc and of the
// SparseAttention graph op: Q, K and V stay float32 (no BF16 rounding),
// the forward and backward run on package grad's kernels.

// f32Call is a validated float32 sparse attention call.
type f32Call struct {
	p       grad.Problem
	q, k, v []float32
	workers int
	retTLSE bool
	invT    float64 // 1/T of the temperature LSE; 0 when it equals the LSE
}

// isFloat32 reports whether t is a non-nil float32 dense tensor.
func isFloat32(t tensor.Tensor) bool {
	d, ok := t.(*tensor.Dense)
	return ok && d != nil && d.Dtype() == tensor.Float32
}

// validateSparseF32 validates a float32 sparse attention call: the checks of
// validateSparse, except that q, k and v are float32 with any head
// dimension D >= 1 and any GQA ratio, qk_dtype/pv_dtype are not accepted
// and partial_dtype must be unset or float32 (the float32 path keeps every
// intermediate in float32).
func validateSparseF32(fn string, q, k, v, rowPtr, qIdx tensor.Tensor, topK int, args *SparseArgs) (*f32Call, error) {
	c := &checker{fn: fn}
	qd, kd, vd := c.dense(q, "q"), c.dense(k, "k"), c.dense(v, "v")
	c.dtype(qd, "q", tensor.Float32)
	if c.err == nil && kd != nil && vd != nil && (kd.Dtype() != tensor.Float32 || vd.Dtype() != tensor.Float32) {
		c.fail("q", "float32 k and v with float32 q (float32 is not mixed with other dtypes)",
			"q float32, k "+dtypeName(kd.Dtype())+", v "+dtypeName(vd.Dtype()))
	}
	c.rank(qd, "q", "[total_q, Hq, D]", 3)
	if c.err != nil {
		return nil, c.err
	}
	totalQ, hq, d := qd.Shape()[0], qd.Shape()[1], qd.Shape()[2]
	c.need(d >= 1, "q", "head dimension D >= 1", shapeStr(qd))
	c.need(args.QKDtype == (tensor.Dtype{}) && args.PVDtype == (tensor.Dtype{}), "qk_dtype/pv_dtype",
		"unset with float32 q, k, v (the float32 path has no low-precision MMA)", dtypeName(args.QKDtype)+"/"+dtypeName(args.PVDtype))
	c.need(args.PartialDtype == (tensor.Dtype{}) || args.PartialDtype == tensor.Float32, "partial_dtype",
		"unset or float32 with float32 q, k, v (partials stay float32)", dtypeName(args.PartialDtype))
	c.need(args.Out == nil && args.OutLSE == nil, "out/lse",
		"unset with float32 q, k, v (the float32 path and the backward allocate their outputs)", "set")
	scale := resolveScale(c, args.SoftmaxScale, d)
	temp := resolveTemperature(c, args.Temperature)
	c.need(present(args.CuSeqlensQ) && present(args.CuSeqlensK), "cu_seqlens_q/cu_seqlens_k",
		"CSR varlen metadata: pass cu_seqlens_q and cu_seqlens_k", "nil")
	if c.err != nil {
		return nil, c.err
	}
	paged := present(args.PageTable)
	if args.KVLayout != HND {
		return nil, &NotImplementedError{fn, fmt.Sprintf("the %v paged K/V layout with float32 q, k, v (the float32 path and its gradients take HND [num_pages, Hkv, page_size, D])", args.KVLayout)}
	}
	wantK, kShape := 3, "[total_k, Hkv, D]"
	if paged {
		wantK, kShape = 4, "[num_pages, Hkv, page_size, D]"
	}
	c.rank(kd, "k", kShape, wantK)
	c.rank(vd, "v", kShape, wantK)
	if c.err != nil {
		return nil, c.err
	}
	c.need(kd.Shape().Eq(vd.Shape()), "k, v", "the same shape", "k "+shapeStr(kd)+", v "+shapeStr(vd))
	c.need(kd.Shape()[wantK-1] == d, "k", fmt.Sprintf("last dimension D = %d in shape %s", d, kShape), shapeStr(kd))
	blk := args.BlkKV
	if blk == 0 {
		blk = 128
	}
	c.need(blk >= 1 && blk <= tile.BlockN, "blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", tile.BlockN), blk)
	if paged {
		c.need(kd.Shape()[2] == blk, "k", fmt.Sprintf("the paged HND layout %s with page_size = blk_kv = %d", kShape, blk), shapeStr(kd))
	}
	if c.err != nil {
		return nil, c.err
	}
	hkv := kd.Shape()[1]
	checkHeads(c, "q/k", qd, kd, hkv, true, func() string { return "the layout " + kShape + " (Hkv = k.shape[1])" })
	c.need(topK >= 1 && topK <= maxTopK, "topK", fmt.Sprintf("1 <= topK <= %d", maxTopK), topK)
	totalKeys := -1
	if !paged {
		totalKeys = kd.Shape()[0]
	}
	rp, qi, cuQ, cuK, err := csrAndSeqlens(c, rowPtr, qIdx, args, hkv, totalQ, topK, totalKeys)
	if err != nil {
		return nil, err
	}
	batch := len(cuQ) - 1
	fc := &f32Call{q: backing[float32](qd), k: backing[float32](kd), v: backing[float32](vd), workers: workers(args.Workers)}
	fc.p = grad.Problem{TotalQ: totalQ, HQ: hq, Hkv: hkv, D: d, CuQ: cuQ, CuK: cuK, BlkKV: blk, TopK: topK,
		Causal: args.Causal, Scale: scale}
	seqK := make([]int32, batch)
	if !paged {
		c.need(!present(args.SeqUsedK), "seqused_k", "nil without page_table (seqused_k is only supported together with page_table)", "a tensor")
		fc.p.TotalK = kd.Shape()[0]
		for b := range seqK {
			seqK[b] = cuK[b+1] - cuK[b]
		}
	} else {
		pt := c.dense(args.PageTable, "page_table")
		c.dtype(pt, "page_table", tensor.Int32)
		c.rank(pt, "page_table", "[B, max_num_pages_per_seq]", 2)
		if c.err != nil {
			return nil, c.err
		}
		c.need(pt.Shape()[0] == batch, "page_table", fmt.Sprintf("shape [B = %d, max_num_pages_per_seq]", batch), shapeStr(pt))
		ps, cols := kd.Shape()[2], pt.Shape()[1]
		if !pageCapacity(c, cols, ps) {
			return nil, c.err
		}
		fc.p.Paged, fc.p.PageTable, fc.p.PTCols, fc.p.PageSize, fc.p.NumPages = true, int32s(pt), cols, ps, kd.Shape()[0]
		su, ok := pagedSeqK(c, args.SeqUsedK, cuK, seqK, cols*ps)
		if !ok {
			return nil, c.err
		}
		fc.p.SeqUsedK = su
		checkPages(c, fc.p.PageTable, cols, ps, seqK, fc.p.NumPages)
	}
	maxSeq(c, "max_seqlen_q", args.MaxSeqlenQ, cuQ)
	maxSeqK(c, "max_seqlen_k", args.MaxSeqlenK, seqK)
	if c.err != nil {
		return nil, c.err
	}
	rows, err := plan.NewRows(cuK, blk)
	if err != nil {
		return nil, wrapArg(fn, "cu_seqlens_k", err)
	}
	csr, err := csrView(fn, rp, qi, rows, totalQ, topK, cuQ)
	if err != nil {
		return nil, err
	}
	fc.p.CSR = &csr
	if args.Schedule != nil {
		// The float32 kernels split the work themselves; a given schedule
		// is still checked so that a wrong one is an error on every path.
		fp := plan.FwdParams{TotalQ: totalQ, Hkv: hkv, QheadPerKV: hq / hkv, TopK: topK, BlkKV: blk, Workers: fc.workers}
		if err := args.Schedule.validate(fn, &csr, rows, cuQ, fp); err != nil {
			return nil, err
		}
	}
	fc.retTLSE = args.ReturnTemperatureLSE
	if fc.retTLSE && math.Abs(temp-1) > temperatureFastPathTol {
		fc.invT = 1 / temp
	}
	return fc, nil
}

// gradWorkspace returns ws (or a new workspace) running on a pool of the
// call's worker count (attn.AcquirePool); the caller releases the pool.
func (fc *f32Call) gradWorkspace(ws *grad.Workspace) (*grad.Workspace, *attn.Pool) {
	pool := attn.AcquirePool(fc.workers)
	if ws == nil {
		return grad.NewWorkspace(pool), pool
	}
	ws.SetPool(pool)
	return ws, pool
}

// forward runs the float32 forward: O float32 [total_q, Hq, D] and the LSE
// (always computed: the backward needs it); the temperature LSE when
// requested. ws may be nil.
func (fc *f32Call) forward(fn string, ws *grad.Workspace) (*Result, error) {
	ws, pool := fc.gradWorkspace(ws)
	defer attn.ReleasePool(pool)
	p := &fc.p
	o := make([]float32, p.TotalQ*p.HQ*p.D)
	lse := make([]float32, p.TotalQ*p.HQ)
	if err := ws.Forward(p, fc.q, fc.k, fc.v, o, lse); err != nil {
		return nil, &ArgError{Func: fn, Arg: "q, k, v", Expected: "a consistent float32 call", Got: err.Error()}
	}
	res := &Result{
		Out: tensor.New(tensor.WithShape(p.TotalQ, p.HQ, p.D), tensor.WithBacking(o)),
		LSE: tensor.New(tensor.WithShape(p.TotalQ, p.HQ), tensor.WithBacking(lse)),
	}
	if fc.retTLSE {
		t := make([]float32, len(lse))
		if fc.invT == 0 {
			copy(t, lse)
		} else if err := ws.TemperatureLSE(p, fc.q, fc.k, fc.invT, t); err != nil {
			return nil, &ArgError{Func: fn, Arg: "q, k", Expected: "a consistent float32 call", Got: err.Error()}
		}
		res.TemperatureLSE = tensor.New(tensor.WithShape(p.TotalQ, p.HQ), tensor.WithBacking(t))
	}
	return res, nil
}

// sparseAttenF32 is SparseAttenFunc for float32 q, k, v.
func sparseAttenF32(fn string, q, k, v, rowPtr, qIdx tensor.Tensor, topK int, args SparseArgs) (*Result, error) {
	fc, err := validateSparseF32(fn, q, k, v, rowPtr, qIdx, topK, &args)
	if err != nil {
		return nil, err
	}
	res, err := fc.forward(fn, nil)
	if err != nil {
		return nil, err
	}
	return res, nil
}
