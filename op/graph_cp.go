package op

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/merge"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// cpMergeOp is the collective merge node of context-parallel attention.
type cpMergeOp struct {
	opBase
	c     comm.Comm
	dt    tensor.Dtype
	shape tensor.Shape
	st    *attnState
	// Guarded by st.mu: the all-gather buffers and their views.
	send, recv []byte
	sc         merge.Scratch
}

func (op *cpMergeOp) mergedLSE() *attnState { return op.st }

func (op *cpMergeOp) Arity() int { return 2 }
func (op *cpMergeOp) Type() hm.Type {
	return fnType(tt(3, op.dt), tt(2, tensor.Float32), tt(3, op.dt))
}
func (op *cpMergeOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op *cpMergeOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.ContextParallelMerge/%v/%v/%p", op.dt, op.shape, op.st)
}
func (op *cpMergeOp) Hashcode() uint32 { return hashOf(op) }
func (op *cpMergeOp) String() string {
	return fmt.Sprintf("ContextParallelMerge{rank=%d/%d}", op.c.Rank(), op.c.Size())
}

// Do all-gathers the rank's (O, LSE) and merges every rank's in rank
// order. An error aborts the group, so the other ranks do not wait.
func (op *cpMergeOp) Do(vals ...G.Value) (G.Value, error) {
	v, err := op.do(vals)
	if err != nil {
		op.c.Abort(err)
	}
	return v, err
}

func (op *cpMergeOp) do(vals []G.Value) (G.Value, error) {
	const fn = "ContextParallelMerge"
	c := &validate.Checker{Fn: fn}
	o, l := c.Dense(tv(vals[0]), "out"), c.Dense(tv(vals[1]), "lse")
	c.Dtype(o, "out", op.dt)
	c.Dtype(l, "lse", tensor.Float32)
	if c.Err != nil {
		return nil, c.Err
	}
	c.Need(o.Shape().Eq(op.shape), "out", fmt.Sprintf("shape %v", op.shape), o.Shape())
	c.Need(l.Shape().Eq(op.shape[:2]), "lse", fmt.Sprintf("shape %v", []int(op.shape[:2])), l.Shape())
	if c.Err != nil {
		return nil, c.Err
	}
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	nl, no := len(l.Header.Raw), len(o.Header.Raw)
	p := op.c.Size()
	if len(op.send) != nl+no {
		op.send, op.recv = make([]byte, nl+no), make([]byte, p*(nl+no))
	}
	copy(op.send, l.Header.Raw)
	copy(op.send[nl:], o.Header.Raw)
	if err := op.c.AllGather(op.send, op.recv); err != nil {
		return nil, &CommError{fn, err}
	}
	out := tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.Of(op.dt))
	lse := tensor.New(tensor.WithShape(op.shape[:2].Clone()...), tensor.Of(tensor.Float32))
	lses := make([][]float32, p)
	seg := func(r int) []byte { return op.recv[r*(nl+no) : (r+1)*(nl+no)] }
	for r := range lses {
		lses[r] = viewAs[float32](seg(r)[:nl])
	}
	d := op.shape[2]
	if op.dt == BFloat16 {
		srcs := make([][]lowp.BFloat16, p)
		for r := range srcs {
			srcs[r] = viewAs[lowp.BFloat16](seg(r)[nl:])
		}
		merge.Into(validate.Backing[lowp.BFloat16](out), validate.Backing[float32](lse), srcs, lses, d, &op.sc)
	} else {
		srcs := make([][]float32, p)
		for r := range srcs {
			srcs[r] = viewAs[float32](seg(r)[nl:])
		}
		merge.Into(validate.Backing[float32](out), validate.Backing[float32](lse), srcs, lses, d, &op.sc)
	}
	op.st.lse = lse
	return out, nil
}

// ContextParallelMerge adds the collective merge of context-parallel
// attention: out is this rank's attention over its part of the keys
// (BFloat16 or float32 [total_q, Hq, D], e.g. a DecodeAttention node over
// the rank's pages) and lse its LSE(out) node; every rank of c builds the
// same graph and runs it in step. The node all-gathers the ranks' (O, LSE)
// pairs, Size()*total_q*Hq*(D*elem + 4) bytes, and merges them in rank
// order with MergeStatesFunc's arithmetic: its value is the attention over
// all ranks' keys, the same bits on every rank, and LSE(node) its LSE. A
// failing node aborts the group (comm.Comm.Abort), so no rank waits on
// another that has stopped. The node is forward-only.
func ContextParallelMerge(out, lse *G.Node, c comm.Comm) (*G.Node, error) {
	const fn = "ContextParallelMerge"
	if c == nil {
		return nil, validate.ArgErr(fn, "comm", "a comm.Comm", "nil")
	}
	if err := nodeCheck(fn, "out", out, 3, BFloat16, tensor.Float32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "lse", lse, 2, tensor.Float32); err != nil {
		return nil, err
	}
	s := out.Shape()
	if !lse.Shape().Eq(s[:2]) {
		return nil, validate.ArgErr(fn, "lse", fmt.Sprintf("shape %v (out's [total_q, Hq])", []int(s[:2])), lse.Shape())
	}
	op := &cpMergeOp{c: c, dt: out.Dtype(), shape: s.Clone(), st: &attnState{}}
	return G.ApplyOp(op, out, lse)
}
