package op

import (
	"fmt"
	"hash"
	"slices"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// schedLayout describes the packed forward-schedule value of the graph
// ops, a 1-D int32 tensor:
//
//	[0]                         work_count
//	[1, 1+6*Capacity)           scheduler_metadata [Capacity][6]
//	then Hkv*Stride             qsplit_indices (layout of k2q_q_indices)
//	then TotalQ*Hkv             split_counts [TotalQ][Hkv]
//
// Capacity follows from the input shapes (plan.FwdCapacity over the CSR's
// row capacity), so the length is known when the graph is built.
type schedLayout struct {
	csr      csrLayout
	qpk      int
	workers  int
	capacity int
}

func newSchedLayout(l csrLayout, qpk, workers int) schedLayout {
	p := plan.FwdParams{TotalQ: l.TotalQ, Hkv: l.Hkv, QheadPerKV: qpk, TopK: l.TopK, BlkKV: l.BlkKV, Workers: workers}
	return schedLayout{csr: l, qpk: qpk, workers: workers, capacity: plan.FwdCapacity(l.RowCap, p)}
}

func (s schedLayout) len() int {
	return 1 + 6*s.capacity + s.csr.Hkv*s.csr.Stride + s.csr.TotalQ*s.csr.Hkv
}

// unpack views a packed schedule value as a plan.FwdSchedule (no copy).
func (s schedLayout) unpack(v []int32) *plan.FwdSchedule {
	dst := new(plan.FwdSchedule)
	s.unpackInto(dst, v)
	return dst
}

// unpackInto is unpack into dst.
func (s schedLayout) unpackInto(dst *plan.FwdSchedule, v []int32) {
	m := 1 + 6*s.capacity
	qs := m + s.csr.Hkv*s.csr.Stride
	*dst = plan.FwdSchedule{
		Capacity: s.capacity, WorkCount: v[0], Metadata: v[1:m],
		QSplit: v[m:qs], SplitCounts: v[qs:],
	}
}

func (s schedLayout) params() plan.FwdParams {
	return plan.FwdParams{TotalQ: s.csr.TotalQ, Hkv: s.csr.Hkv, QheadPerKV: s.qpk, TopK: s.csr.TopK, BlkKV: s.csr.BlkKV, Workers: s.workers}
}

// schedOp builds the forward schedule (docs/contract.md section 3) from a packed CSR.
type schedOp struct {
	opBase
	s    schedLayout
	host schedHost // the CUDA path's host side (graph_nodes_host.go)
}

func (op *schedOp) Arity() int { return 3 }
func (op *schedOp) Type() hm.Type {
	return fnType(tt(2, tensor.Int32), tt(1, tensor.Int32), tt(1, tensor.Int32), tt(1, tensor.Int32))
}
func (op *schedOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.s.len()}, nil
}
func (op *schedOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.FwdSchedule%+v/%d/%d", op.s.csr, op.s.qpk, op.s.workers)
}
func (op *schedOp) Hashcode() uint32 { return hashOf(op) }
func (op *schedOp) String() string {
	return fmt.Sprintf("FwdSchedule{workers=%d, capacity=%d}", op.s.workers, op.s.capacity)
}

func (op *schedOp) Do(vals ...G.Value) (G.Value, error) {
	return op.build(new(schedHost), tv(vals[0]), tv(vals[1]), tv(vals[2]))
}

// build checks the node's inputs and builds the packed schedule into h's
// storage: fresh for the CPU Do, kept by the node on the CUDA path (a warm
// run allocates nothing).
func (op *schedOp) build(h *schedHost, packedT, cuQT, cuKT tensor.Tensor) (*tensor.Dense, error) {
	const fn = "FwdSchedule"
	c := validate.Checker{Fn: fn}
	l := op.s.csr
	packed := c.Dense(packedT, "csr")
	if c.Dtype(packed, "csr", tensor.Int32) && packed.DataSize() != l.Hkv*l.width() {
		c.Fail("csr", fmt.Sprintf("an int32 CSR value of %d elements", l.Hkv*l.width()), packed.DataSize())
	}
	cuQ := validate.CuSeqlens(&c, cuQT, "cu_seqlens_q", l.TotalQ, "total_q")
	cuK := validate.CuSeqlens(&c, cuKT, "cu_seqlens_k", -1, "")
	if c.Err != nil {
		return nil, c.Err
	}
	total, err := plan.CountRows(cuK, l.BlkKV)
	if err != nil {
		return nil, validate.WrapArg(fn, "cu_seqlens_k", err)
	}
	if total > l.RowCap {
		return nil, validate.ArgErr(fn, "cu_seqlens_k", fmt.Sprintf("at most %d CSR rows", l.RowCap), total)
	}
	if err := h.rows.Reset(cuK, l.BlkKV); err != nil {
		return nil, validate.WrapArg(fn, "cu_seqlens_k", err)
	}
	p := h.csr.pair(l, validate.Int32s(packed))
	rpc, err := compactRowPtr(fn, &h.csr.rpc, p.rp, l.Hkv, l.RowCap, h.rows.Total, l.BlkKV)
	if err != nil {
		return nil, err
	}
	csr := plan.CSR{Hkv: l.Hkv, TotalRows: h.rows.Total, Stride: l.Stride, RowPtr: rpc, QIdx: p.qi}
	built, err := plan.BuildFwdScheduleInto(&h.scratch, &h.sched, &csr, &h.rows, cuQ, op.s.params())
	if err != nil {
		return nil, validate.WrapArg(fn, "csr", err)
	}
	out := h.out.view(tensor.Int32, tensor.Shape{op.s.len()})
	op.s.pack(validate.Int32s(out), built)
	return out, nil
}

// pack writes built as the packed value out (s.len() elements; the
// metadata past built's items is zero).
func (s schedLayout) pack(out []int32, built *plan.FwdSchedule) {
	clear(out)
	var dst plan.FwdSchedule
	s.unpackInto(&dst, out)
	out[0] = built.WorkCount
	copy(dst.Metadata, built.Metadata)
	copy(dst.QSplit, built.QSplit)
	copy(dst.SplitCounts, built.SplitCounts)
}

// FwdSchedule adds the forward schedule (the reference's "prepare
// scheduler") after a CSR node: work items, split counts and deterministic
// slots. Options: QheadPerKV (required: Hq/Hkv of the attention that
// follows) and Workers (usable_SM_count; absent or <= 0:
// runtime.GOMAXPROCS(0)); SparseAttention compares both with its own (q's
// heads / k's heads and its Workers option, which defaults to the
// schedule's) and names a mismatch. Its value can also be fed back as an input node to
// reuse a schedule; SparseAttention validates it either way.
func FwdSchedule(csr, cuQ, cuK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "FwdSchedule"
	cfg, err := applyOptions(fn, opts, optQheadPerKV, optWorkers)
	if err != nil {
		return nil, err
	}
	if err := cfg.required(fn, optQheadPerKV, "Hq / Hkv of the attention that follows"); err != nil {
		return nil, err
	}
	qheadPerKV, workerCount := cfg.qpk, cfg.workers
	l, err := csrOf(fn, csr)
	if err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_q", cuQ, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_k", cuK, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if !slices.Contains(supportedQheadPerKV, qheadPerKV) {
		return nil, validate.ArgErr(fn, "qhead_per_kv", "one of 1, 2, 4, 8, 16", fmt.Sprint(qheadPerKV))
	}
	sl := newSchedLayout(l, qheadPerKV, validate.WorkerCount(workerCount))
	if _, err := valueSize(fn, "csr", "a schedule value 1 + 6 * capacity + Hkv * stride + total_q * Hkv", sl.len()); err != nil {
		return nil, err
	}
	return G.ApplyOp(&schedOp{s: sl}, csr, cuQ, cuK)
}
