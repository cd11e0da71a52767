package op

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/op/internal/merge"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mergeOp is the merge node: inputs O_0..O_{K-1}, then LSE_0..LSE_{K-1};
// its value is the merged O, its LSE is kept for LSE(node).
type mergeOp struct {
	opBase
	k     int
	dt    tensor.Dtype
	shape tensor.Shape
	st    *attnState
	sc    merge.Scratch
}

// mergeNode is an op whose value is a merged O and whose merged LSE LSE(node)
// returns: MergeStates, ContextParallelMerge and ContextParallelPrefill.
type mergeNode interface {
	mergedLSE() *attnState
}

func (op *mergeOp) mergedLSE() *attnState { return op.st }

func (op *mergeOp) Arity() int { return 2 * op.k }
func (op *mergeOp) Type() hm.Type {
	n := op.shape.Dims()
	ts := make([]hm.Type, 0, 2*op.k+1)
	for i := 0; i < op.k; i++ {
		ts = append(ts, tt(n, op.dt))
	}
	for i := 0; i < op.k; i++ {
		ts = append(ts, tt(n-1, tensor.Float32))
	}
	return fnType(append(ts, tt(n, op.dt))...)
}
func (op *mergeOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op *mergeOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.MergeStates/%d/%v/%v/%p", op.k, op.dt, op.shape, op.st)
}
func (op *mergeOp) Hashcode() uint32 { return hashOf(op) }
func (op *mergeOp) String() string   { return fmt.Sprintf("MergeStates{k=%d}", op.k) }

func (op *mergeOp) Do(vals ...G.Value) (G.Value, error) {
	outs, lses := make([]tensor.Tensor, op.k), make([]tensor.Tensor, op.k)
	for i := 0; i < op.k; i++ {
		outs[i], lses[i] = tv(vals[i]), tv(vals[op.k+i])
	}
	c := &validate.Checker{Fn: "MergeStates"}
	os, ls := mergeInputs(c, outs, lses)
	if c.Err != nil {
		return nil, c.Err
	}
	out := tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.Of(op.dt))
	lse := tensor.New(tensor.WithShape(op.shape[:op.shape.Dims()-1].Clone()...), tensor.Of(tensor.Float32))
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	mergeDense(out, lse, os, ls, &op.sc)
	op.st.lse = lse
	return out, nil
}

// MergeStates adds a node merging K >= 1 partial attention results of the
// same queries (outs[i] BFloat16 or float32 [total_q, Hq, D], lses[i]
// float32 [total_q, Hq], typically the value and the LSE(...) of attention
// nodes over disjoint parts of the keys): the graph form of
// MergeStatesFunc, with its arithmetic, order and masking rules. Its value
// is the merged O; LSE(node) returns the merged natural-log LSE of the same
// run. The node is forward-only.
func MergeStates(outs, lses []*G.Node) (*G.Node, error) {
	const fn = "MergeStates"
	if len(outs) < 1 {
		return nil, validate.ArgErr(fn, "outs", "at least one partial output node", len(outs))
	}
	if len(lses) != len(outs) {
		return nil, validate.ArgErr(fn, "lses", fmt.Sprintf("one LSE node per partial output (%d)", len(outs)), len(lses))
	}
	if err := nodeCheck(fn, "outs[0]", outs[0], 0, BFloat16, tensor.Float32); err != nil {
		return nil, err
	}
	dt, s := outs[0].Dtype(), outs[0].Shape()
	if s.Dims() != 3 || s[2] < 1 {
		return nil, validate.ArgErr(fn, "outs[0]", "shape [total_q, Hq, D] with D >= 1", s)
	}
	for i, o := range outs {
		arg := fmt.Sprintf("outs[%d]", i)
		if err := nodeCheck(fn, arg, o, s.Dims(), dt); err != nil {
			return nil, err
		}
		if !o.Shape().Eq(s) {
			return nil, validate.ArgErr(fn, arg, fmt.Sprintf("shape %v (that of outs[0])", s), o.Shape())
		}
	}
	for i, l := range lses {
		arg := fmt.Sprintf("lses[%d]", i)
		if err := nodeCheck(fn, arg, l, s.Dims()-1, tensor.Float32); err != nil {
			return nil, err
		}
		if !l.Shape().Eq(s[:s.Dims()-1]) {
			return nil, validate.ArgErr(fn, arg, fmt.Sprintf("shape %v (outs' shape without D)", []int(s[:s.Dims()-1])), l.Shape())
		}
	}
	op := &mergeOp{k: len(outs), dt: dt, shape: s.Clone(), st: &attnState{}}
	return G.ApplyOp(op, append(append([]*G.Node{}, outs...), lses...)...)
}
