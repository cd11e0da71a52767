package op

import (
	"fmt"
	"slices"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/merge"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// MergeArgs are the optional arguments of MergeStatesFunc.
type MergeArgs struct {
	// Out and OutLSE, when set, receive the merged O (the inputs' dtype and
	// shape) and LSE (float32, the LSE inputs' shape) instead of new
	// tensors: contiguous, not views, sharing no storage with each other or
	// with an input.
	Out, OutLSE *tensor.Dense
}

// MergeStatesFunc merges K >= 1 partial attention results (O_i, LSE_i) of
// the same queries, each computed over a disjoint part of the keys, into
// the result over all of them (FlashInfer's merge_states): with m the
// largest LSE_i and w_i = e^(LSE_i - m) / sum_j e^(LSE_j - m),
//
//	O = sum_i w_i O_i,  LSE = m + ln sum_i e^(LSE_i - m)
//
// per (query, head). LSEs are natural logarithms, as every op of this
// package returns them. A partial whose LSE is -inf (nothing visible)
// weighs exactly 0 and its O is not read; when every partial of a row is
// -inf the row is O = 0, LSE = -inf (an LSE of +inf or a NaN sum gives the
// same, as in the prefill combine; a NaN LSE weighs 0).
//
// outs[i] is BFloat16 or float32 of shape [..., D] (the ops' [total_q, Hq,
// D]), all of one dtype and shape; lses[i] is float32 of that shape
// without D. Weights and the LSE are computed in float64 and O is
// accumulated in float32 in the order of the slices, then rounded once to
// the inputs' dtype: the result is identical from run to run and across
// worker counts and ranks of one architecture. The merged O is within
// (K + 2) * 2^-24 * max|O_i| of the exact merge of the given partials
// before that rounding (merge_test.go derives this bound).
func MergeStatesFunc(outs, lses []tensor.Tensor, args MergeArgs) (*Result, error) {
	const fn = "MergeStatesFunc"
	c := &validate.Checker{Fn: fn}
	os, ls := mergeInputs(c, outs, lses)
	if c.Err != nil {
		return nil, c.Err
	}
	oshape := os[0].Shape()
	dt := os[0].Dtype()
	lshape := oshape[:len(oshape)-1]
	out, lse := args.Out, args.OutLSE
	if out != nil {
		validate.OutputArg(c, out, "out", dt, oshape...)
	}
	if lse != nil {
		validate.OutputArg(c, lse, "lse", tensor.Float32, lshape...)
	}
	ins := make([]namedTensor, 0, 2*len(os))
	for i := range os {
		ins = append(ins, namedTensor{fmt.Sprintf("outs[%d]", i), os[i]}, namedTensor{fmt.Sprintf("lses[%d]", i), ls[i]})
	}
	checkDisjoint(c, []namedTensor{{"out", out}, {"lse", lse}}, ins)
	if c.Err != nil {
		return nil, c.Err
	}
	if out == nil {
		out = tensor.New(tensor.WithShape(oshape.Clone()...), tensor.Of(dt))
	}
	if lse == nil {
		lse = tensor.New(tensor.WithShape(slices.Clone(lshape)...), tensor.Of(tensor.Float32))
	}
	var sc merge.Scratch
	mergeDense(out, lse, os, ls, &sc)
	return &Result{Out: out, LSE: lse}, nil
}

// mergeInputs checks the partials of a merge: at least one, as many LSEs
// as outputs, every output of one dtype (BFloat16 or float32) and shape of
// rank >= 2 with a head dimension of at least 1, every LSE float32 of the
// outputs' shape without the last dimension. Errors name the argument
// (outs[i], lses[i]).
func mergeInputs(c *validate.Checker, outs, lses []tensor.Tensor) (os, ls []*tensor.Dense) {
	c.Need(len(outs) >= 1, "outs", "at least one partial output", len(outs))
	c.Need(len(lses) == len(outs), "lses", fmt.Sprintf("one LSE per partial output (%d)", len(outs)), len(lses))
	if c.Err != nil {
		return nil, nil
	}
	os, ls = make([]*tensor.Dense, len(outs)), make([]*tensor.Dense, len(outs))
	for i := range outs {
		oa, la := fmt.Sprintf("outs[%d]", i), fmt.Sprintf("lses[%d]", i)
		os[i], ls[i] = c.Dense(outs[i], oa), c.Dense(lses[i], la)
		if c.Err != nil {
			return nil, nil
		}
		if i == 0 {
			c.Dtype(os[0], oa, BFloat16, tensor.Float32)
			s := os[0].Shape()
			c.Need(s.Dims() >= 2 && s[s.Dims()-1] >= 1, oa, "shape [..., D] of rank >= 2 with D >= 1 (e.g. [total_q, Hq, D])", fmt.Sprint(s))
		} else {
			c.Need(os[i].Dtype() == os[0].Dtype(), oa, "dtype "+validate.DtypeName(os[0].Dtype())+" (that of outs[0])", validate.DtypeName(os[i].Dtype()))
			c.Need(os[i].Shape().Eq(os[0].Shape()), oa, fmt.Sprintf("shape %v (that of outs[0])", os[0].Shape()), fmt.Sprint(os[i].Shape()))
		}
		c.Dtype(ls[i], la, tensor.Float32)
		if c.Err != nil {
			return nil, nil
		}
		s := os[0].Shape()
		c.Need(ls[i].Shape().Eq(s[:s.Dims()-1]), la, fmt.Sprintf("shape %v (outs' shape without D)", []int(s[:s.Dims()-1])), fmt.Sprint(ls[i].Shape()))
	}
	return os, ls
}

// mergeDense runs merge.Into on checked dense tensors.
func mergeDense(out, lse *tensor.Dense, os, ls []*tensor.Dense, sc *merge.Scratch) {
	s := os[0].Shape()
	d := s[s.Dims()-1]
	lv := make([][]float32, len(ls))
	for i := range ls {
		lv[i] = validate.Backing[float32](ls[i])
	}
	switch os[0].Dtype() {
	case BFloat16:
		merge.Into(validate.Backing[lowp.BFloat16](out), validate.Backing[float32](lse), denseSlices[lowp.BFloat16](os), lv, d, sc)
	default:
		merge.Into(validate.Backing[float32](out), validate.Backing[float32](lse), denseSlices[float32](os), lv, d, sc)
	}
}

// denseSlices returns the backings of ts.
func denseSlices[T any](ts []*tensor.Dense) [][]T {
	r := make([][]T, len(ts))
	for i, t := range ts {
		r[i] = validate.Backing[T](t)
	}
	return r
}
