package op

import (
	"fmt"
	"slices"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Schedule is a prebuilt forward schedule (the reference's
// SparseAttentionSchedule): work items, per-query split counts and the
// deterministic slot of every CSR entry. It may be reused across calls with
// the same CSR; every use validates it first, so the accessors return
// tensors that share the schedule's storage. The zero Schedule is empty
// (its accessors return tensors with no elements; using it is an error).
type Schedule struct {
	s   plan.FwdSchedule
	hkv int
}

// int32Tensor returns v as an int32 tensor (sharing its storage) of the given shape,
// or a [0] tensor when shape has no elements (the tensor package does not
// build empty shaped tensors).
func int32Tensor(v []int32, shape ...int) *tensor.Dense {
	n := 1
	for _, x := range shape {
		n *= x
	}
	if n <= 0 || len(v) < n {
		return tensor.New(tensor.WithShape(0), tensor.Of(tensor.Int32))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v[:n]))
}

// SchedulerMetadata returns the work items [capacity, 6] int32:
// (head_kv, row, q_begin, q_count, batch, kv_block).
func (s *Schedule) SchedulerMetadata() *tensor.Dense {
	return int32Tensor(s.s.Metadata, s.s.Capacity, 6)
}

// WorkCount returns the number of valid work items as a [1] int32 tensor.
func (s *Schedule) WorkCount() *tensor.Dense {
	return tensor.New(tensor.WithShape(1), tensor.WithBacking([]int32{s.s.WorkCount}))
}

// QSplitIndices returns q_idx | slot<<24 per CSR entry, [Hkv, stride]
// shaped like k2q_q_indices.
func (s *Schedule) QSplitIndices() *tensor.Dense {
	if s.hkv < 1 {
		return int32Tensor(nil, 0)
	}
	return int32Tensor(s.s.QSplit, s.hkv, len(s.s.QSplit)/s.hkv)
}

// SplitCounts returns the number of selected blocks per (query, KV head),
// [total_q, Hkv] int32.
func (s *Schedule) SplitCounts() *tensor.Dense {
	if s.hkv < 1 {
		return int32Tensor(nil, 0)
	}
	return int32Tensor(s.s.SplitCounts, len(s.s.SplitCounts)/s.hkv, s.hkv)
}

// Capacity returns the number of work-item slots.
func (s *Schedule) Capacity() int { return s.s.Capacity }

func (s *Schedule) validate(fn string, csr *plan.CSR, rows *plan.Rows, cuQ []int32, p plan.FwdParams) error {
	return validateSchedule(fn, nil, &s.s, csr, rows, cuQ, p)
}

// validateSchedule checks a given forward schedule s against the CSR, its
// row numbering and cu_seqlens_q, with the scratch x (nil: a fresh one; a
// caller that keeps x across runs allocates nothing).
func validateSchedule(fn string, x *plan.FwdScheduleScratch, s *plan.FwdSchedule, csr *plan.CSR, rows *plan.Rows, cuQ []int32, p plan.FwdParams) error {
	if err := plan.ValidateFwdScheduleInto(x, s, csr, rows, cuQ, p); err != nil {
		return validate.WrapArg(fn, "schedule", err)
	}
	return nil
}

// ScheduleArgs are the arguments of FwdScheduleFunc besides the CSR.
type ScheduleArgs struct {
	// CuSeqlensQ, CuSeqlensK: int32 [B+1].
	CuSeqlensQ, CuSeqlensK tensor.Tensor
	// TotalQ is the number of query rows (q.shape[0]).
	TotalQ int
	// TopK is the number of selected blocks per query.
	TopK int
	// QheadPerKV is Hq / Hkv.
	QheadPerKV int
	// BlkKV is the block size; 0 means 128.
	BlkKV int
	// Workers plays usable_SM_count; <= 0 uses runtime.GOMAXPROCS(0).
	Workers int
}

// FwdScheduleFunc builds a forward schedule for a k2q CSR (the
// reference's prepare_sparse_fwd_schedule_and_split). Pass the result as
// SparseArgs.Schedule to reuse it across calls with the same metadata and
// the same Workers.
func FwdScheduleFunc(k2qRowPtr, k2qQIndices tensor.Tensor, args ScheduleArgs) (*Schedule, error) {
	const fn = "FwdScheduleFunc"
	c := &validate.Checker{Fn: fn}
	cuQ := validate.CuSeqlens(c, args.CuSeqlensQ, "cu_seqlens_q", args.TotalQ, "total_q")
	cuK := validate.CuSeqlens(c, args.CuSeqlensK, "cu_seqlens_k", -1, "")
	rp, qi := csrTensors(c, k2qRowPtr, k2qQIndices)
	if c.Err != nil {
		return nil, c.Err
	}
	c.Need(len(cuK) == len(cuQ), "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(cuQ)), len(cuK))
	c.Need(args.TotalQ >= 0, "TotalQ", ">= 0", args.TotalQ)
	c.Need(args.TopK >= 1 && args.TopK <= validate.MaxTopK, "topK", fmt.Sprintf("1 <= topK <= %d", validate.MaxTopK), args.TopK)
	c.Need(slices.Contains(supportedQheadPerKV, args.QheadPerKV), "qhead_per_kv", "one of 1, 2, 4, 8, 16", args.QheadPerKV)
	blk := args.BlkKV
	if blk == 0 {
		blk = 128
	}
	c.Need(blk >= 1 && blk <= 128, "blk_kv", "1 <= blk_kv <= 128", blk)
	hkv := 0
	if c.Err == nil {
		hkv = rp.Shape()[0]
		c.Need(qi.Shape()[0] == hkv && hkv >= 1, "k2q_q_indices", fmt.Sprintf("leading dimension Hkv = %d", hkv), validate.ShapeStr(qi))
		c.Need(qi.Shape()[1] >= args.TotalQ*args.TopK, "k2q_q_indices", fmt.Sprintf("shape[1] >= total_q * topK = %d", args.TotalQ*args.TopK), qi.Shape()[1])
	}
	if c.Err != nil {
		return nil, c.Err
	}
	rows := new(plan.Rows)
	if err := csrRows(fn, rows, rp.Shape()[1]-1, cuK, blk); err != nil {
		return nil, err
	}
	csr, err := csrView(fn, new(csrStore), csrPairOf(rp, qi), rows, args.TotalQ, args.TopK, cuQ)
	if err != nil {
		return nil, err
	}
	p := plan.FwdParams{TotalQ: args.TotalQ, Hkv: hkv, QheadPerKV: args.QheadPerKV, TopK: args.TopK, BlkKV: blk, Workers: validate.WorkerCount(args.Workers)}
	s, err := plan.BuildFwdSchedule(nil, &csr, rows, cuQ, p)
	if err != nil {
		return nil, validate.WrapArg(fn, "schedule", err)
	}
	return &Schedule{s: *s, hkv: hkv}, nil
}
