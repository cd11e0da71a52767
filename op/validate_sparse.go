package op

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Limits beyond the reference (docs/contract.md section 9): the reference accepts only
// D = 128 and topK in {4, 8, 16, 32}.
var (
	supportedHeadDims = []int{64, 128, 256}
	// supportedQheadPerKV are the GQA ratios Hq/Hkv (as in the reference).
	supportedQheadPerKV = []int{1, 2, 4, 8, 16}
)

// temperatureFastPathTol is the reference's
// _TEMPERATURE_LSE_FAST_PATH_ABS_TOL: |T - 1| within it returns the LSE.
const temperatureFastPathTol = 1e-12

// nvfp4Inputs are the extra inputs of the NVFP4 K/V entry point.
type nvfp4Inputs struct {
	kScale, vScale   tensor.Tensor
	kGlobal, vGlobal tensor.Tensor
}

// sparseCall is a validated sparse prefill request, ready to execute.
type sparseCall struct {
	p          attn.Prefill
	csr        plan.CSR
	rows       *plan.Rows
	sched      *plan.FwdSchedule
	fp         plan.FwdParams
	batch      int
	workers    int
	returnTLSE bool
	tempFast   bool
	// out and outLSE are SparseArgs.Out and OutLSE (nil: allocated by run).
	out, outLSE *tensor.Dense
}

// resolveScalars applies the reference's scalar checks shared by both
// sparse entry points.
func resolveScalars(c *validate.Checker, args *SparseArgs, d int) (scale, temp float64, pdt attn.PartialDtype) {
	scale = validate.ResolveScale(c, args.SoftmaxScale, d)
	temp = validate.ResolveTemperature(c, args.Temperature)
	switch args.PartialDtype {
	case tensor.Float32:
		pdt = attn.PartialF32
	case BFloat16, tensor.Dtype{}:
		pdt = attn.PartialBF16
	case Float16:
		pdt = attn.PartialF16
	case Float8E4M3FN:
		pdt = attn.PartialE4M3
	default:
		c.Fail("partial_dtype", "one of float32 / bfloat16 / float16 / float8_e4m3fn", validate.DtypeName(args.PartialDtype))
	}
	return
}

// resolveMMADtypes mirrors _resolve_forward_mma_dtypes.
func resolveMMADtypes(c *validate.Checker, q, k, v *tensor.Dense, qkDt, pvDt tensor.Dtype) (qk, pv tensor.Dtype) {
	if c.Err != nil {
		return
	}
	mma := func(arg string, dt tensor.Dtype) {
		if dt != BFloat16 && dt != Float8E4M3FN {
			c.Fail(arg, "bfloat16 or float8_e4m3fn", validate.DtypeName(dt))
		}
	}
	qk = qkDt
	if qk == (tensor.Dtype{}) {
		qk = q.Dtype()
	}
	mma("qk_dtype", qk)
	pv = pvDt
	if pv == (tensor.Dtype{}) {
		if q.Dtype() == BFloat16 && k.Dtype() == Float8E4M3FN && v.Dtype() == Float8E4M3FN {
			pv = BFloat16
		} else {
			pv = v.Dtype()
		}
	}
	mma("pv_dtype", pv)
	if c.Err != nil {
		return
	}
	if q.Dtype() != qk {
		c.Fail("qk_dtype", "the q storage dtype "+validate.DtypeName(q.Dtype())+" (Q fp8->bf16 staging is not supported)", validate.DtypeName(qk))
	}
	if !(k.Dtype() == qk || (k.Dtype() == Float8E4M3FN && qk == BFloat16)) {
		c.Fail("k", "a K storage/qk_dtype combination equal, or fp8 K with bf16 qk_dtype", validate.DtypeName(k.Dtype())+" with qk_dtype "+validate.DtypeName(qk))
	}
	if !(v.Dtype() == pv || (v.Dtype() == Float8E4M3FN && pv == BFloat16)) {
		c.Fail("v", "a V storage/pv_dtype combination equal, or fp8 V with bf16 pv_dtype", validate.DtypeName(v.Dtype())+" with pv_dtype "+validate.DtypeName(pv))
	}
	return
}

// operand wraps a validated BF16 or FP8 tensor as an attn.Operand of head dim d.
func operand(t *tensor.Dense, d int) attn.Operand {
	switch t.Dtype() {
	case BFloat16:
		return attn.Operand{Dtype: attn.BF16, D: d, BF16: validate.Backing[lowp.BFloat16](t), Global: 1}
	default:
		return attn.Operand{Dtype: attn.E4M3, D: d, E4M3: validate.Backing[lowp.Float8E4M3FN](t), Global: 1}
	}
}

// pvRound maps the P.V operand dtype to the P rounding of the kernels. P is
// rounded to e4m3 in the FP8 P.V path (docs/contract.md section 4); with
// BF16 P.V the kernels round P to bf16 where the call runs bf16 products
// (attn.BF16Products, docs/semantics.md) and keep it in float32 elsewhere.
func pvRound(pv tensor.Dtype) tile.Round {
	if pv == Float8E4M3FN {
		return tile.RoundE4M3
	}
	return tile.RoundNone
}

// validateSparse validates the inputs of a low-precision sparse prefill
// call (eager and graph) and prepares it: its dtype and scalar rules, then
// the rules every sparse entry point shares (checkSparseKV). nv is nil for
// the BF16/FP8 entry point.
func validateSparse(fn string, q, k, v, rowPtr, qIdx tensor.Tensor, topK int, args *SparseArgs, nv *nvfp4Inputs) (*sparseCall, error) {
	c := &validate.Checker{Fn: fn}
	qd := c.Dense(q, "q")
	kd := c.Dense(k, "k")
	vd := c.Dense(v, "v")
	if c.Err != nil {
		return nil, c.Err
	}
	c.Rank(qd, "q", "[total_q, Hq, D]", 3)
	if c.Err != nil {
		return nil, c.Err
	}
	totalQ, hq, d := qd.Shape()[0], qd.Shape()[1], qd.Shape()[2]
	if !slices.Contains(supportedHeadDims, d) {
		c.Fail("q", fmt.Sprintf("[total_q, Hq, D] with head dimension D in %v", supportedHeadDims), fmt.Sprintf("D = %d (shape %s)", d, validate.ShapeStr(qd)))
	}
	if c.Err != nil {
		return nil, c.Err
	}
	sc := &sparseCall{}
	scale, temp, pdt := resolveScalars(c, args, d)
	var qk, pv tensor.Dtype
	if nv == nil {
		c.Dtype(qd, "q", BFloat16, Float8E4M3FN)
		if c.Err != nil {
			return nil, c.Err
		}
		qk, pv = resolveMMADtypes(c, qd, kd, vd, args.QKDtype, args.PVDtype)
	} else {
		if !(args.QKDtype == (tensor.Dtype{}) && args.PVDtype == (tensor.Dtype{})) {
			c.Fail("qk_dtype/pv_dtype", "unset (the NVFP4 K/V entry point has no MMA dtype options)", validate.DtypeName(args.QKDtype)+"/"+validate.DtypeName(args.PVDtype))
		}
		c.Dtype(qd, "q", BFloat16, Float8E4M3FN)
		pv = qd.Dtype()
	}
	if !(validate.Present(args.CuSeqlensQ) && validate.Present(args.CuSeqlensK)) {
		c.Fail("cu_seqlens_q/cu_seqlens_k", "CSR varlen metadata: pass cu_seqlens_q and cu_seqlens_k", "nil")
	}
	if c.Err != nil {
		return nil, c.Err
	}

	// Q/K/V dtypes and shapes.
	paged := validate.Present(args.PageTable)
	kvl := args.KVLayout
	checkLayout(c, kvl, paged)
	if c.Err != nil {
		return nil, c.Err
	}
	if nv == nil {
		mixed := qd.Dtype() == BFloat16 && kd.Dtype() == Float8E4M3FN && vd.Dtype() == Float8E4M3FN
		if !(mixed || (qd.Dtype() == kd.Dtype() && qd.Dtype() == vd.Dtype())) {
			c.Fail("q, k, v", "the same dtype, except q=bf16 with fp8_e4m3 K/V cache", validate.DtypeName(qd.Dtype())+", "+validate.DtypeName(kd.Dtype())+", "+validate.DtypeName(vd.Dtype()))
		}
		if !(kd.Dims() >= 1 && vd.Dims() >= 1 && kd.Shape()[kd.Dims()-1] == d && vd.Shape()[vd.Dims()-1] == d) {
			c.Fail("k, v", fmt.Sprintf("the head dimension of q (%d)", d), "k "+validate.ShapeStr(kd)+", v "+validate.ShapeStr(vd))
		}
	} else {
		c.Dtype(kd, "k", tensor.Uint8)
		c.Dtype(vd, "v", tensor.Uint8)
		if !kd.Shape().Eq(vd.Shape()) {
			c.Fail("k, v", "the same shape", "k "+validate.ShapeStr(kd)+", v "+validate.ShapeStr(vd))
		}
	}
	if c.Err != nil {
		return nil, c.Err
	}
	in := newSparseInputs(qd, kd, vd, args)
	r := sparseRules{last: "D", lastK: d, headsArg: "k", layoutHint: true, build: true}
	if nv != nil {
		r.last, r.lastK = "D/2", d/2
	}
	if err := in.checkSparseKV(c, rowPtr, qIdx, topK, args, r); err != nil {
		return nil, err
	}
	sc.batch, sc.workers, sc.fp, sc.rows, sc.csr, sc.sched = in.batch, in.workers, in.fp, in.rows, in.csr, in.sched
	layout := attn.KVLayout{Hkv: in.hkv, Paged: paged, CuK: in.cuK}
	if paged {
		layout.PageTable, layout.PTCols, layout.PageSize, layout.NHD = in.pt, in.cols, in.ps, kvl == NHD
	}

	// NVFP4 operands or BF16/FP8 operands.
	var kop, vop attn.Operand
	outScale := float32(1)
	if nv == nil {
		kop, vop = operand(kd, d), operand(vd, d)
	} else {
		rowsKV := kd.Shape()[0] * kd.Shape()[1]
		if paged {
			rowsKV *= kd.Shape()[2] // num_pages * Hkv * page_size in either layout
		}
		var err error
		kop, vop, outScale, err = nvfp4Operands(c, nv, kd, vd, rowsKV, d)
		if err != nil {
			return nil, err
		}
	}

	sc.out, sc.outLSE = args.Out, args.OutLSE
	inputs := []namedTensor{{"q", q}, {"k", k}, {"v", v}, {"k2q_row_ptr", rowPtr}, {"k2q_q_indices", qIdx},
		{"cu_seqlens_q", args.CuSeqlensQ}, {"cu_seqlens_k", args.CuSeqlensK}, {"page_table", args.PageTable}, {"seqused_k", args.SeqUsedK}}
	if nv != nil {
		inputs = append(inputs, namedTensor{"k_scale", nv.kScale}, namedTensor{"v_scale", nv.vScale},
			namedTensor{"k_global_scale", nv.kGlobal}, namedTensor{"v_global_scale", nv.vGlobal})
	}
	checkOutputs(c, args, totalQ, hq, d, inputs)
	if c.Err != nil {
		return nil, c.Err
	}
	sc.returnTLSE = args.ReturnTemperatureLSE
	sc.tempFast = sc.returnTLSE && math.Abs(temp-1) <= temperatureFastPathTol
	invT := float32(0)
	if sc.returnTLSE && !sc.tempFast {
		invT = float32(1 / temp)
	}
	_ = qk
	sc.p = attn.Prefill{
		Q: operand(qd, d), K: kop, V: vop, KV: layout,
		TotalQ: totalQ, HQ: hq, Hkv: in.hkv, D: d,
		CuQ: in.cuQ, SeqK: in.seqK, BlkKV: in.blk, Causal: args.Causal,
		Scale: float32(scale), InvT: invT, PV: pvRound(pv), TopK: topK,
		CSR: &sc.csr, Sched: sc.sched, Partial: pdt, OutputScale: outScale,
	}
	return sc, nil
}

// csrAndSeqlens validates the k2q CSR tensors against Hkv, total_q and topK
// and the cu_seqlens pair (totalKeys < 0: paged, no total_k check), for
// every sparse prefill entry point; the error is c's or a topK mismatch.
func csrAndSeqlens(c *validate.Checker, rowPtr, qIdx tensor.Tensor, args *SparseArgs, hkv, totalQ, topK, totalKeys int) (rp, qi *tensor.Dense, cuQ, cuK []int32, err error) {
	rp, qi = csrTensors(c, rowPtr, qIdx)
	if c.Err != nil {
		return nil, nil, nil, nil, c.Err
	}
	if rp.Shape()[0] != hkv || qi.Shape()[0] != hkv {
		c.Fail("k2q_row_ptr/k2q_q_indices", fmt.Sprintf("leading dimension Hkv = %d", hkv), "k2q_row_ptr "+validate.ShapeStr(rp)+", k2q_q_indices "+validate.ShapeStr(qi))
	}
	if c.Err == nil && qi.Shape()[1] < totalQ*topK {
		return nil, nil, nil, nil, topKMismatch(c.Fn, qi.Shape()[1], totalQ, topK, "")
	}
	if rp.Shape()[1] < 1 {
		c.Fail("k2q_row_ptr", "at least one row pointer column", validate.ShapeStr(rp))
	}
	cuQ = validate.CuSeqlens(c, args.CuSeqlensQ, "cu_seqlens_q", totalQ, "total_q")
	cuK = validate.CuSeqlens(c, args.CuSeqlensK, "cu_seqlens_k", totalKeys, "total_k")
	if c.Err != nil {
		return nil, nil, nil, nil, c.Err
	}
	if len(cuK) != len(cuQ) {
		c.Fail("cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(cuQ)), len(cuK))
	}
	if c.Err != nil {
		return nil, nil, nil, nil, c.Err
	}
	return rp, qi, cuQ, cuK, nil
}

// pagedSeqK sets the effective key length of every sequence of a paged
// prefill: seqused_k[b] when given (checked to be [B] int32 within
// 0..capacity), else capacity = max_num_pages_per_seq * page_size; and
// checks that cu_seqlens_k, from which the CSR rows come, fits the page
// table. It returns seqused_k's values (nil when absent) and whether c is
// still free of errors; it is shared by every paged prefill entry point.
func pagedSeqK(c *validate.Checker, seqUsedK tensor.Tensor, cuK, seqK []int32, capacity int) ([]int32, bool) {
	var used []int32
	if validate.Present(seqUsedK) {
		su := c.Dense(seqUsedK, "seqused_k")
		c.Dtype(su, "seqused_k", tensor.Int32)
		c.Rank(su, "seqused_k", "[B]", 1)
		if c.Err != nil {
			return nil, false
		}
		if su.Shape()[0] != len(seqK) {
			c.Fail("seqused_k", fmt.Sprintf("shape [B] = [%d]", len(seqK)), validate.ShapeStr(su))
			return nil, false
		}
		used = validate.Int32s(su)
	}
	return used, pagedLengths(c, used, cuK, seqK, capacity)
}

// pagedLengths is pagedSeqK's rule on the values: seqK[b] = used[b] within
// 0..capacity (capacity when used is nil), and every cu_seqlens_k length
// <= capacity. It reports whether c is still free of errors and formats a
// message only on failure (the CUDA path's warm runs call it as it is).
func pagedLengths(c *validate.Checker, used, cuK, seqK []int32, capacity int) bool {
	for b := range seqK {
		seqK[b] = int32(capacity)
	}
	for b, x := range used {
		if x < 0 || int(x) > capacity {
			c.Fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("0 <= seqused_k <= max_num_pages_per_seq * page_size = %d", capacity), x)
			return false
		}
		seqK[b] = x
	}
	for b := 0; b < len(seqK) && c.Err == nil; b++ {
		if n := int(cuK[b+1] - cuK[b]); n > capacity {
			c.Fail(fmt.Sprintf("cu_seqlens_k (sequence %d)", b), fmt.Sprintf("length <= max_num_pages_per_seq * page_size = %d", capacity), n)
		}
	}
	return c.Err == nil
}

// keyLengths sets seqK[b], the key length of sequence b of dense K/V, from
// the prefix sums cuK.
func keyLengths(seqK, cuK []int32) {
	for b := range seqK {
		seqK[b] = cuK[b+1] - cuK[b]
	}
}

// namedTensor is a call's tensor argument and its name in errors.
type namedTensor struct {
	arg string
	t   tensor.Tensor
}

// checkOutputs validates SparseArgs.Out and OutLSE when set: contiguous
// tensors of exactly the output's dtype and shape, not views, and sharing
// no storage with each other or with the call's tensor inputs
// (checkDisjoint; nil inputs are skipped).
func checkOutputs(c *validate.Checker, args *SparseArgs, totalQ, hq, d int, inputs []namedTensor) {
	if args.Out != nil {
		validate.OutputArg(c, args.Out, "out", BFloat16, totalQ, hq, d)
	}
	if args.OutLSE != nil {
		validate.OutputArg(c, args.OutLSE, "lse", tensor.Float32, totalQ, hq)
	}
	checkDisjoint(c, []namedTensor{{"out", args.Out}, {"lse", args.OutLSE}}, inputs)
}

// checkDisjoint records an error unless the output tensors share no
// storage with each other or with the inputs (the kernels write the
// outputs while reading the inputs). Tensors other than non-nil
// *tensor.Dense are skipped: they hold no storage of ours.
func checkDisjoint(c *validate.Checker, outs, inputs []namedTensor) {
	if c.Err != nil {
		return
	}
	for i, o := range outs {
		od, _ := o.t.(*tensor.Dense)
		if od == nil {
			continue
		}
		for _, p := range outs[i+1:] {
			if pd, _ := p.t.(*tensor.Dense); pd != nil && overlaps(od.Header.Raw, pd.Header.Raw) {
				c.Fail(o.arg, "storage of its own (not shared with "+p.arg+")", "shared with "+p.arg)
				return
			}
		}
		for _, in := range inputs {
			if id, _ := in.t.(*tensor.Dense); id != nil && overlaps(od.Header.Raw, id.Header.Raw) {
				c.Fail(o.arg, "storage of its own (not shared with an input)", "shared with "+in.arg)
				return
			}
		}
	}
}

// overlaps reports whether two byte slices share any byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
