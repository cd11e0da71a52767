package op

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/op/internal/gradimpl"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// This file holds the float32 path of SparseAttentionFunc and of the
// SparseAttention graph op: Q, K and V stay float32 (no BF16 rounding),
// the forward and backward run on package grad's kernels.

// isFloat32 reports whether t is a non-nil float32 dense tensor.
func isFloat32(t tensor.Tensor) bool {
	d, ok := t.(*tensor.Dense)
	return ok && d != nil && d.Dtype() == tensor.Float32
}

// validateSparseF32 validates a float32 sparse attention call (the eager
// and graph forward and backward): its own dtype and scalar rules (q, k
// and v float32 with any head dimension D >= 1, no qk_dtype/pv_dtype,
// partial_dtype unset or float32: the float32 path keeps every
// intermediate in float32; HND paged layout only), then the rules every
// sparse entry point shares (checkSparseKV) with any GQA ratio. A given
// schedule is checked though the float32 kernels split the work
// themselves, so that a wrong one is an error on every path.
func validateSparseF32(fn string, q, k, v, rowPtr, qIdx tensor.Tensor, topK int, args *SparseArgs) (*gradimpl.Call, error) {
	c := &validate.Checker{Fn: fn}
	qd, kd, vd := c.Dense(q, "q"), c.Dense(k, "k"), c.Dense(v, "v")
	c.Dtype(qd, "q", tensor.Float32)
	if c.Err == nil && kd != nil && vd != nil && (kd.Dtype() != tensor.Float32 || vd.Dtype() != tensor.Float32) {
		c.Fail("q", "float32 k and v with float32 q (float32 is not mixed with other dtypes)",
			"q float32, k "+validate.DtypeName(kd.Dtype())+", v "+validate.DtypeName(vd.Dtype()))
	}
	c.Rank(qd, "q", "[total_q, Hq, D]", 3)
	if c.Err != nil {
		return nil, c.Err
	}
	totalQ, hq, d := qd.Shape()[0], qd.Shape()[1], qd.Shape()[2]
	c.Need(d >= 1, "q", "[total_q, Hq, D] with head dimension D >= 1", validate.ShapeStr(qd))
	c.Need(args.QKDtype == (tensor.Dtype{}) && args.PVDtype == (tensor.Dtype{}), "qk_dtype/pv_dtype",
		"unset with float32 q, k, v (the float32 path has no low-precision MMA)", validate.DtypeName(args.QKDtype)+"/"+validate.DtypeName(args.PVDtype))
	c.Need(args.PartialDtype == (tensor.Dtype{}) || args.PartialDtype == tensor.Float32, "partial_dtype",
		"unset or float32 with float32 q, k, v (partials stay float32)", validate.DtypeName(args.PartialDtype))
	c.Need(args.Out == nil && args.OutLSE == nil, "out/lse",
		"unset with float32 q, k, v (the float32 path and the backward allocate their outputs)", "set")
	scale := validate.ResolveScale(c, args.SoftmaxScale, d)
	temp := validate.ResolveTemperature(c, args.Temperature)
	c.Need(validate.Present(args.CuSeqlensQ) && validate.Present(args.CuSeqlensK), "cu_seqlens_q/cu_seqlens_k",
		"CSR varlen metadata: pass cu_seqlens_q and cu_seqlens_k", "nil")
	if c.Err != nil {
		return nil, c.Err
	}
	paged := validate.Present(args.PageTable)
	if args.KVLayout != HND {
		return nil, &NotImplementedError{Func: fn, What: fmt.Sprintf("the %v paged K/V layout with float32 q, k, v (the float32 path and its gradients take HND [num_pages, Hkv, page_size, D])", args.KVLayout)}
	}
	in := newSparseInputs(qd, kd, vd, args)
	if err := in.checkSparseKV(c, rowPtr, qIdx, topK, args, sparseRules{last: "D", lastK: d, headsArg: "q/k", anyRatio: true}); err != nil {
		return nil, err
	}
	fc := &gradimpl.Call{Q: validate.Backing[float32](qd), K: validate.Backing[float32](kd), V: validate.Backing[float32](vd), Workers: in.workers}
	fc.Problem = grad.Problem{TotalQ: totalQ, HQ: hq, Hkv: in.hkv, D: d, CuQ: in.cuQ, CuK: in.cuK, BlkKV: in.blk, TopK: topK,
		Causal: args.Causal, Scale: scale, CSR: &in.csr}
	if paged {
		fc.Problem.Paged, fc.Problem.PageTable, fc.Problem.PTCols, fc.Problem.PageSize, fc.Problem.NumPages = true, in.pt, in.cols, in.ps, in.numPages
		fc.Problem.SeqUsedK = in.used
	} else {
		fc.Problem.TotalK = kd.Shape()[0]
	}
	fc.RetTLSE = args.ReturnTemperatureLSE
	if fc.RetTLSE && math.Abs(temp-1) > temperatureFastPathTol {
		fc.InvT = 1 / temp
	}
	return fc, nil
}

// forwardF32 runs fc's float32 forward (ws may be nil) and returns its
// outputs as tensors.
func forwardF32(fn string, fc *gradimpl.Call, ws *grad.Workspace) (*Result, error) {
	o, lse, tlse, err := fc.Forward(fn, ws)
	if err != nil {
		return nil, err
	}
	p := &fc.Problem
	res := &Result{
		Out: tensor.New(tensor.WithShape(p.TotalQ, p.HQ, p.D), tensor.WithBacking(o)),
		LSE: tensor.New(tensor.WithShape(p.TotalQ, p.HQ), tensor.WithBacking(lse)),
	}
	if tlse != nil {
		res.TemperatureLSE = tensor.New(tensor.WithShape(p.TotalQ, p.HQ), tensor.WithBacking(tlse))
	}
	return res, nil
}

// sparseAttenF32 is SparseAttentionFunc for float32 q, k, v.
func sparseAttenF32(fn string, q, k, v, rowPtr, qIdx tensor.Tensor, topK int, args SparseArgs) (*Result, error) {
	fc, err := validateSparseF32(fn, q, k, v, rowPtr, qIdx, topK, &args)
	if err != nil {
		return nil, err
	}
	res, err := forwardF32(fn, fc, nil)
	if err != nil {
		return nil, err
	}
	return res, nil
}
