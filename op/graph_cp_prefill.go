package op

import (
	"fmt"
	"hash"
	"slices"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// cpPrefillOp is the context-parallel sparse prefill node.
type cpPrefillOp struct {
	opBase
	c         comm.Comm
	args      CPPrefillArgs
	qdt, kvdt tensor.Dtype
	shape     tensor.Shape // [queries, Hq, D]
	st        *attnState
}

func (op *cpPrefillOp) mergedLSE() *attnState { return op.st }

func (op *cpPrefillOp) Arity() int { return 4 }
func (op *cpPrefillOp) Type() hm.Type {
	return fnType(tt(3, op.qdt), tt(3, op.kvdt), tt(3, op.kvdt), tt(3, tensor.Int32), tt(3, BFloat16))
}
func (op *cpPrefillOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op *cpPrefillOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.ContextParallelPrefill/%v/%v/%v/%p", op.qdt, op.kvdt, op.shape, op.st)
}
func (op *cpPrefillOp) Hashcode() uint32 { return hashOf(op) }
func (op *cpPrefillOp) String() string {
	return fmt.Sprintf("ContextParallelPrefill{rank=%d/%d, %v}", op.c.Rank(), op.c.Size(), op.args.Strategy)
}

// Do runs ContextParallelPrefillFunc on the node's inputs (which checks the
// metadata collectively and aborts the group on a later error).
func (op *cpPrefillOp) Do(vals ...G.Value) (G.Value, error) {
	res, _, err := ContextParallelPrefillFunc(op.c, tv(vals[0]), tv(vals[1]), tv(vals[2]), tv(vals[3]), op.args)
	if err != nil {
		return nil, err
	}
	op.st.mu.Lock()
	op.st.lse = res.LSE
	op.st.mu.Unlock()
	return res.Out, nil
}

// ContextParallelPrefill adds context-parallel block-sparse prefill to a
// graph: q, k, v and q2k are this rank's queries [queries, Hq, D], keys and
// values [keys, Hkv, D] (BF16 or FP8) and its queries' selection [Hkv,
// queries, topK] int32, as ContextParallelPrefillFunc takes them
// (CPPrefillShard says which rows a rank holds). Every rank of c builds the same graph and runs
// it in step. The node's value is the attention of the rank's queries
// over every rank's keys (BFloat16 [queries, Hq, D]) and LSE(node) its
// LSE; the exchanges and their checks are ContextParallelPrefillFunc's, run
// when the graph runs. The node is forward-only. The shapes are checked against
// the rank's shard here; a rank that fails here never joins the exchange,
// so the others' graphs return comm.ErrTimeout.
func ContextParallelPrefill(q, k, v, q2k *G.Node, c comm.Comm, args CPPrefillArgs) (*G.Node, error) {
	const fn = "ContextParallelPrefill"
	if c == nil {
		return nil, validate.ArgErr(fn, "comm", "a comm.Comm", "nil")
	}
	if err := nodeCheck(fn, "q", q, 3, BFloat16, Float8E4M3FN); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "k", k, 3, BFloat16, Float8E4M3FN); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "v", v, 3, k.Dtype()); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "q2k_indices", q2k, 3, tensor.Int32); err != nil {
		return nil, err
	}
	blk := args.BlkKV
	if blk == 0 {
		blk = 128
	}
	sh, err := CPPrefillShard(args.CuSeqlensQ, args.CuSeqlensK, blk, c.Size(), c.Rank())
	if err != nil {
		return nil, err
	}
	qs, ks := q.Shape(), k.Shape()
	switch {
	case qs[0] != sh.Queries():
		return nil, validate.ArgErr(fn, "q", fmt.Sprintf("[%d, Hq, D]: the queries rank %d holds (CPPrefillShard)", sh.Queries(), c.Rank()), qs)
	case ks[0] != sh.Keys():
		return nil, validate.ArgErr(fn, "k", fmt.Sprintf("[%d, Hkv, D]: the keys rank %d holds (CPPrefillShard)", sh.Keys(), c.Rank()), ks)
	case !v.Shape().Eq(ks):
		return nil, validate.ArgErr(fn, "v", fmt.Sprintf("shape %v (that of k)", ks), v.Shape())
	}
	args.CuSeqlensQ, args.CuSeqlensK = slices.Clone(args.CuSeqlensQ), slices.Clone(args.CuSeqlensK)
	op := &cpPrefillOp{c: c, args: args, qdt: q.Dtype(), kvdt: k.Dtype(), shape: qs.Clone(), st: &attnState{}}
	return G.ApplyOp(op, q, k, v, q2k)
}
