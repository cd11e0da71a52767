package op

import (
	"fmt"

	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Gradients holds the gradients of a loss with respect to the inputs of a
// float32 sparse attention call.
type Gradients struct {
	// DQ has q's shape; DK and DV have k's and v's shape (dense token rows
	// or, with a page table, the page pool). All three are float32.
	DQ, DK, DV *tensor.Dense
}

// SparseAttentionBackwardFunc computes the gradients of SparseAttentionFunc with
// float32 q, k, v: given the forward's out and lse (natural-log LSE, as
// SparseAttentionFunc returns them in Result.Out and Result.LSE) and the gradients
// dOut ([total_q, Hq, D] float32) and dLSE ([total_q, Hq] float32, nil
// when the LSE is not used by the loss), it returns dQ, dK and dV. q, k,
// v, the CSR and args must be those of the forward call (the temperature
// LSE has no gradient and its options are ignored). Nothing is
// recomputed from the forward but the probabilities of each selected
// block. With a page table, dK and dV are the gradients with respect to
// the page pool: a page referenced by several sequences (or several times)
// receives the sum of their contributions; pages no query reaches are 0.
// See docs/semantics.md (Gradients) for the definitions.
func SparseAttentionBackwardFunc(q, k, v, out, lse, dOut, dLSE, k2qRowPtr, k2qQIndices tensor.Tensor, topK int, args SparseArgs) (*Gradients, error) {
	const fn = "SparseAttentionBackwardFunc"
	args.ReturnTemperatureLSE = false
	fc, err := validateSparseF32(fn, q, k, v, k2qRowPtr, k2qQIndices, topK, &args)
	if err != nil {
		return nil, err
	}
	c := &validate.Checker{Fn: fn}
	p := &fc.Problem
	qShape := fmt.Sprintf("[total_q, Hq, D] = [%d, %d, %d]", p.TotalQ, p.HQ, p.D)
	rowShape := fmt.Sprintf("[total_q, Hq] = [%d, %d]", p.TotalQ, p.HQ)
	o := f32Arg(c, out, "out", qShape, p.TotalQ, p.HQ, p.D)
	l := f32Arg(c, lse, "lse", rowShape, p.TotalQ, p.HQ)
	do := f32Arg(c, dOut, "dOut", qShape, p.TotalQ, p.HQ, p.D)
	var dl []float32
	if validate.Present(dLSE) {
		dl = f32Arg(c, dLSE, "dLSE", rowShape, p.TotalQ, p.HQ)
	}
	if c.Err != nil {
		return nil, c.Err
	}
	dq, dk, dv, err := fc.Backward(fn, nil, o, l, do, dl)
	if err != nil {
		return nil, err
	}
	return &Gradients{
		DQ: tensor.New(tensor.WithShape(q.Shape().Clone()...), tensor.WithBacking(dq)),
		DK: tensor.New(tensor.WithShape(k.Shape().Clone()...), tensor.WithBacking(dk)),
		DV: tensor.New(tensor.WithShape(v.Shape().Clone()...), tensor.WithBacking(dv)),
	}, nil
}

// f32Arg checks that t is a float32 tensor of the given shape and returns
// its backing.
func f32Arg(c *validate.Checker, t tensor.Tensor, arg, desc string, shape ...int) []float32 {
	d := c.Dense(t, arg)
	if !c.Dtype(d, arg, tensor.Float32) {
		return nil
	}
	c.Need(validate.ShapeIs(d, shape...), arg, "shape "+desc, validate.ShapeStr(d))
	if c.Err != nil {
		return nil
	}
	return validate.Backing[float32](d)
}
