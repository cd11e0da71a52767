package op

import (
	"fmt"
	"hash"
	"sync"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/gradimpl"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file makes the SparseAttention graph op trainable: float32 q, k, v
// (forward on package grad's kernels) and Gorgonia's SDOp (DiffWRT,
// SymDiff for G.Grad and TapeMachines, DoDiff for LispMachines) with
// respect to q, k and v.
//
// Symbolically, the gradient is one SparseAttentionBackward node that takes
// the forward's inputs, its output O, its LSE (an LSE accessor node: the
// value the forward stored, nothing is recomputed), dO and, when the loss
// also depends on the node's LSE accessors, dLSE (grad_lse.go), and whose
// value is dQ; two accessor nodes return the dK and dV that the same run
// computed. The metadata inputs (CSR, schedule, cu_seqlens, page table,
// seqused_k) are not differentiable. With BFloat16 q, k, v the gradients
// are computed in float32 from the decoded values and rounded to BFloat16;
// float8 and NVFP4 inputs are forward-only.

// gradState is the float32 state of a SparseAttention node (a field of
// attnState, guarded by its mutex).
type gradState struct {
	ws   *grad.Workspace
	prep grad.Prepared // the forward's and the backward's prepared problem, buffers kept between runs
}

// workspace returns the node's grad workspace, creating it on first use.
func (g *gradState) workspace() *grad.Workspace {
	if g.ws == nil {
		g.ws = grad.NewWorkspace(nil)
	}
	return g.ws
}

// outDtype is the dtype of the node's output: float32 for float32 q, k, v,
// else BFloat16.
func (op *sparseAttnOp) outDtype() tensor.Dtype {
	if len(op.inDtypes) > 0 && op.inDtypes[0] == tensor.Float32 {
		return tensor.Float32
	}
	return BFloat16
}

// gradCall validates the node's input values as a float32 call. With widen
// set, BFloat16 q, k and v are decoded to float32 first (the backward of a
// BFloat16 node).
func (op *sparseAttnOp) gradCall(fn string, vals []G.Value, widen bool) (*gradimpl.Call, error) {
	if len(vals) < op.Arity() {
		return nil, validate.ArgErr(fn, "inputs", fmt.Sprintf("%d values", op.Arity()), len(vals))
	}
	var ts [7]*tensor.Dense
	for i, arg := range []string{"q", "k", "v", "csr", "schedule", "cu_seqlens_q", "cu_seqlens_k"} {
		d, err := denseOf(fn, arg, vals[i])
		if err != nil {
			return nil, err
		}
		ts[i] = d
	}
	l := op.sched.csr
	if ts[3].Dtype() != tensor.Int32 || ts[3].DataSize() != l.Hkv*l.width() {
		return nil, validate.ArgErr(fn, "csr", fmt.Sprintf("an int32 CSR value of %d elements", l.Hkv*l.width()), ts[3].DataSize())
	}
	if ts[4].Dtype() != tensor.Int32 || ts[4].DataSize() != op.sched.len() {
		return nil, validate.ArgErr(fn, "schedule", fmt.Sprintf("an int32 schedule value of %d elements", op.sched.len()), ts[4].DataSize())
	}
	rp, qi := l.split(validate.Int32s(ts[3]))
	args := SparseArgs{
		CuSeqlensQ: ts[5], CuSeqlensK: ts[6], BlkKV: l.BlkKV, Causal: op.cfg.causal,
		SoftmaxScale: op.cfg.scale, Temperature: op.cfg.temperature,
		ReturnTemperatureLSE: op.st.needT, PartialDtype: op.cfg.partial,
		Schedule: &Schedule{s: *op.sched.unpack(validate.Int32s(ts[4])), hkv: l.Hkv}, Workers: op.cfg.workers,
		QKDtype: op.cfg.qk, PVDtype: op.cfg.pv,
	}
	sl := op.slots()
	if sl.pageTable >= 0 {
		d, err := denseOf(fn, "page_table", vals[sl.pageTable])
		if err != nil {
			return nil, err
		}
		args.PageTable = d
	}
	if sl.seqused >= 0 {
		d, err := denseOf(fn, "seqused_k", vals[sl.seqused])
		if err != nil {
			return nil, err
		}
		args.SeqUsedK = d
	}
	q, k, v := ts[0], ts[1], ts[2]
	if widen {
		var err error
		if q, err = widenBF16(fn, "q", q); err != nil {
			return nil, err
		}
		if k, err = widenBF16(fn, "k", k); err != nil {
			return nil, err
		}
		if v, err = widenBF16(fn, "v", v); err != nil {
			return nil, err
		}
	}
	rowPtr := tensor.New(tensor.WithShape(l.Hkv, l.RowCap+1), tensor.WithBacking(rp))
	qIdx := tensor.New(tensor.WithShape(l.Hkv, l.Stride), tensor.WithBacking(qi))
	return validateSparseF32(fn, q, k, v, rowPtr, qIdx, l.TopK, &args)
}

// widenBF16 decodes a BFloat16 tensor to a new float32 tensor.
func widenBF16(fn, arg string, t *tensor.Dense) (*tensor.Dense, error) {
	if t.Dtype() != BFloat16 {
		return nil, validate.ArgErr(fn, arg, "dtype bfloat16", validate.DtypeName(t.Dtype()))
	}
	src := validate.Backing[lowp.BFloat16](t)
	dst := make([]float32, len(src))
	lowp.DecodeBF16(dst, src)
	return tensor.New(tensor.WithShape(t.Shape().Clone()...), tensor.WithBacking(dst)), nil
}

// f32Values returns the values of a float32 or (decoded) BFloat16 tensor
// of the given shape.
func f32Values(fn, arg string, v G.Value, shape tensor.Shape) ([]float32, error) {
	d, err := denseOf(fn, arg, v)
	if err != nil {
		return nil, err
	}
	if !d.Shape().Eq(shape) {
		return nil, validate.ArgErr(fn, arg, fmt.Sprintf("shape %v", shape), validate.ShapeStr(d))
	}
	switch d.Dtype() {
	case tensor.Float32:
		return validate.Backing[float32](d), nil
	case BFloat16:
		w, err := widenBF16(fn, arg, d)
		if err != nil {
			return nil, err
		}
		return validate.Backing[float32](w), nil
	}
	return nil, validate.ArgErr(fn, arg, "dtype float32 or bfloat16", validate.DtypeName(d.Dtype()))
}

// asDtype wraps float32 data as a tensor of dtype dt (float32, or
// BFloat16 rounded to nearest even).
func asDtype(x []float32, dt tensor.Dtype, shape tensor.Shape) *tensor.Dense {
	if dt == BFloat16 {
		b := make([]lowp.BFloat16, len(x))
		lowp.EncodeBF16(b, x)
		return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(b))
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(x))
}

// doF32 is Do for float32 q, k, v: O float32, the LSE (and temperature
// LSE) stored for the accessor nodes and the backward.
func (op *sparseAttnOp) doF32(vals []G.Value) (G.Value, error) {
	const fn = "SparseAttention"
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	fc, err := op.gradCall(fn, vals, false)
	if err != nil {
		return nil, err
	}
	fc.Prep = &op.st.g.prep
	res, err := forwardF32(fn, fc, op.st.g.workspace())
	if err != nil {
		return nil, err
	}
	op.st.lse, op.st.tlse, op.st.dlse = res.LSE, res.TemperatureLSE, nil
	return res.Out, nil
}

// gradInputs is the number of differentiable inputs (q, k, v).
const gradInputs = 3

// gradSupported reports why the node has no gradient, if it has none.
func (op *sparseAttnOp) gradSupported(output *G.Node) error {
	name := fmt.Sprint(op)
	if output != nil && output.Op() != nil {
		name = fmt.Sprint(output.Op())
	}
	switch {
	case op.cfg.nvfp4:
		return &ForwardOnlyError{Op: name + " with NVFP4 K/V"}
	case op.inDtypes[0] == Float8E4M3FN || op.inDtypes[1] == Float8E4M3FN || op.inDtypes[2] == Float8E4M3FN:
		return &ForwardOnlyError{Op: name + " with float8_e4m3fn inputs"}
	}
	return nil
}

// DiffWRT reports q, k and v as differentiable and the metadata inputs
// (CSR, schedule, cu_seqlens_q/k, page_table, seqused_k, NVFP4 scales) as
// not differentiable: they are integer data (or scales of a forward-only
// format).
func (op *sparseAttnOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := 0; i < min(n, gradInputs); i++ {
		d[i] = true
	}
	return d
}

// SymDiff returns the gradient nodes of q, k and v (nil for the metadata
// inputs): a SparseAttentionBackward node (value dQ) and two accessor nodes
// (dK, dV) of the same run. With a page table, dK and dV are gradients
// with respect to the page pool. NVFP4 and float8 nodes fail with a
// *ForwardOnlyError naming the op.
func (op *sparseAttnOp) SymDiff(inputs G.Nodes, output, gradNode *G.Node) (G.Nodes, error) {
	if err := op.gradSupported(output); err != nil {
		return nil, err
	}
	if len(inputs) != op.Arity() || output == nil || gradNode == nil {
		return nil, validate.ArgErr("SparseAttention.SymDiff", "inputs", fmt.Sprintf("%d inputs, the output and its gradient", op.Arity()), len(inputs))
	}
	lse, err := LSE(output)
	if err != nil {
		return nil, err
	}
	dl, err := op.lseGradient(gradNode)
	if err != nil {
		return nil, err
	}
	bw := &attnBwdOp{fwd: op, st: &bwdState{}, qShape: inputs[0].Shape().Clone(), kvShape: inputs[1].Shape().Clone(), dlse: dl != nil}
	in := append(append(G.Nodes{}, inputs...), output, lse, gradNode)
	if dl != nil {
		in = append(in, dl)
	}
	dq, err := G.ApplyOp(bw, in...)
	if err != nil {
		return nil, err
	}
	grads := make(G.Nodes, len(inputs))
	grads[0] = dq
	for i, which := range []string{"dK", "dV"} {
		if grads[i+1], err = G.ApplyOp(&attnGradOp{bw: bw, which: which}, dq); err != nil {
			return nil, err
		}
	}
	return grads, nil
}

// DoDiff adds the gradients of q, k and v to their dual values (a
// LispMachine's backward), from the output's gradient, the LSE the forward
// stored and the LSE gradient its LSE accessors passed on (if any).
func (op *sparseAttnOp) DoDiff(_ G.ExecutionContext, inputs G.Nodes, output *G.Node) error {
	const fn = "SparseAttention.DoDiff"
	if err := op.gradSupported(output); err != nil {
		return err
	}
	if len(inputs) != op.Arity() || output == nil {
		return validate.ArgErr(fn, "inputs", fmt.Sprintf("%d inputs and the output", op.Arity()), len(inputs))
	}
	vals := make([]G.Value, len(inputs))
	for i, n := range inputs {
		vals[i] = n.Value()
	}
	dO, err := output.Grad()
	if err != nil {
		return err
	}
	op.st.mu.Lock()
	lse, dlse := op.st.lse, op.st.dlse
	op.st.dlse = nil
	op.st.mu.Unlock()
	if lse == nil {
		return validate.ArgErr(fn, "forward", "the forward to have run before the backward", "no LSE")
	}
	var dl G.Value
	if dlse != nil {
		dl = tensor.New(tensor.WithShape(lse.Shape().Clone()...), tensor.WithBacking(dlse))
	}
	dq, dk, dv, err := op.backward(fn, vals, output.Value(), lse, dO, dl)
	if err != nil {
		return err
	}
	for i, g := range [][]float32{dq, dk, dv} {
		d, err := inputs[i].Grad()
		if err != nil {
			return err
		}
		if err := addGrad(fn, inputs[i].Name(), d, g); err != nil {
			return err
		}
	}
	return nil
}

// backward validates the forward's input values and runs the float32
// backward with the forward's O and LSE, the output gradient dO and the
// LSE gradient dLSE (nil: the loss does not depend on the LSE).
func (op *sparseAttnOp) backward(fn string, vals []G.Value, o, lse, dO, dLSE G.Value) (dq, dk, dv []float32, err error) {
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	fc, err := op.gradCall(fn, vals, op.outDtype() == BFloat16)
	if err != nil {
		return nil, nil, nil, err
	}
	p := &fc.Problem
	qs, rs := tensor.Shape{p.TotalQ, p.HQ, p.D}, tensor.Shape{p.TotalQ, p.HQ}
	ov, err := f32Values(fn, "out", o, qs)
	if err != nil {
		return nil, nil, nil, err
	}
	lv, err := f32Values(fn, "lse", lse, rs)
	if err != nil {
		return nil, nil, nil, err
	}
	dv0, err := f32Values(fn, "dOut", dO, qs)
	if err != nil {
		return nil, nil, nil, err
	}
	var dl []float32
	if dLSE != nil {
		if dl, err = f32Values(fn, "dLSE", dLSE, rs); err != nil {
			return nil, nil, nil, err
		}
	}
	fc.Prep = &op.st.g.prep
	return fc.Backward(fn, op.st.g.workspace(), ov, lv, dv0, dl)
}

// addGrad adds g to the float32 or BFloat16 gradient value d in place.
func addGrad(fn, arg string, d G.Value, g []float32) error {
	t, err := denseOf(fn, arg+" gradient", d)
	if err != nil {
		return err
	}
	if t.DataSize() != len(g) {
		return validate.ArgErr(fn, arg+" gradient", fmt.Sprintf("%d elements", len(g)), t.DataSize())
	}
	switch t.Dtype() {
	case tensor.Float32:
		x := validate.Backing[float32](t)
		for i, v := range g {
			x[i] += v
		}
	case BFloat16:
		x := validate.Backing[lowp.BFloat16](t)
		w := make([]float32, len(x))
		lowp.DecodeBF16(w, x)
		for i, v := range g {
			w[i] += v
		}
		lowp.EncodeBF16(x, w)
	default:
		return validate.ArgErr(fn, arg+" gradient", "dtype float32 or bfloat16", validate.DtypeName(t.Dtype()))
	}
	return nil
}

// bwdState holds the dK and dV of a backward node's last run for its
// accessor nodes.
type bwdState struct {
	mu     sync.Mutex
	dk, dv *tensor.Dense
}

// attnBwdOp is the SparseAttentionBackward node: inputs are the forward's
// inputs, O, LSE, dO and (dlse) dLSE; the value is dQ, and dK and dV are
// kept for the accessor nodes.
type attnBwdOp struct {
	opBase
	fwd             *sparseAttnOp
	st              *bwdState
	qShape, kvShape tensor.Shape
	dlse            bool // a dLSE input follows dO
}

func (op *attnBwdOp) Arity() int {
	if op.dlse {
		return op.fwd.Arity() + 4
	}
	return op.fwd.Arity() + 3
}
func (op *attnBwdOp) Type() hm.Type {
	f := op.fwd
	ts := make([]hm.Type, 0, op.Arity()+1)
	for i, dt := range f.inDtypes {
		ts = append(ts, tt(f.inDims[i], dt))
	}
	ts = append(ts, tt(3, f.outDtype()), tt(2, tensor.Float32), tt(3, f.outDtype()))
	if op.dlse {
		ts = append(ts, tt(2, tensor.Float32))
	}
	ts = append(ts, tt(3, f.inDtypes[0]))
	return fnType(ts...)
}
func (op *attnBwdOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.qShape.Clone(), nil }
func (op *attnBwdOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.SparseAttentionBackward/%p/%p/%v", op.fwd.st, op.st, op.dlse)
}
func (op *attnBwdOp) Hashcode() uint32 { return hashOf(op) }
func (op *attnBwdOp) String() string {
	return fmt.Sprintf("SparseAttentionBackward{causal=%v, topK=%d}", op.fwd.cfg.causal, op.fwd.sched.csr.TopK)
}

func (op *attnBwdOp) Do(vals ...G.Value) (G.Value, error) {
	const fn = "SparseAttentionBackward"
	n := op.fwd.Arity()
	if len(vals) != op.Arity() {
		return nil, validate.ArgErr(fn, "inputs", fmt.Sprintf("%d values", op.Arity()), len(vals))
	}
	var dl G.Value
	if op.dlse {
		dl = vals[n+3]
	}
	dq, dk, dv, err := op.fwd.backward(fn, vals[:n], vals[n], vals[n+1], vals[n+2], dl)
	if err != nil {
		return nil, err
	}
	dt := op.fwd.outDtype()
	op.st.mu.Lock()
	op.st.dk, op.st.dv = asDtype(dk, dt, op.kvShape), asDtype(dv, dt, op.kvShape)
	op.st.mu.Unlock()
	return asDtype(dq, dt, op.qShape), nil
}

// attnGradOp returns the dK or dV computed by a SparseAttentionBackward
// node (its input).
type attnGradOp struct {
	opBase
	bw    *attnBwdOp
	which string // "dK" or "dV"
}

func (op *attnGradOp) Arity() int { return 1 }
func (op *attnGradOp) Type() hm.Type {
	dt := op.bw.fwd.outDtype()
	return fnType(tt(3, dt), tt(op.bw.kvShape.Dims(), dt))
}
func (op *attnGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.bw.kvShape.Clone(), nil
}
func (op *attnGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.SparseAttentionGrad/%s/%p", op.which, op.bw.st)
}
func (op *attnGradOp) Hashcode() uint32 { return hashOf(op) }
func (op *attnGradOp) String() string   { return "SparseAttentionGrad{" + op.which + "}" }

func (op *attnGradOp) Do(vals ...G.Value) (G.Value, error) {
	op.bw.st.mu.Lock()
	defer op.bw.st.mu.Unlock()
	t := op.bw.st.dk
	if op.which == "dV" {
		t = op.bw.st.dv
	}
	if t == nil {
		return nil, validate.ArgErr(op.String(), "backward", "a SparseAttentionBackward node that has run before this node", "no result")
	}
	return t, nil
}

// attnHeadDimCheck is the construction-time head dimension check of
// SparseAttention: float32 q accepts any D >= 1 (package grad's kernels
// have no head dimension limit), other dtypes the supported ones.
func attnHeadDimCheck(fn string, q *G.Node) error {
	if q.Dtype() == tensor.Float32 {
		if q.Shape()[2] < 1 {
			return validate.ArgErr(fn, "q", "[total_q, Hq, D] with head dimension D = q.shape[2] >= 1", fmt.Sprintf("shape %v", q.Shape()))
		}
		return nil
	}
	return headDimCheck(fn, q)
}
