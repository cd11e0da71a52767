package op

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// sparseInputs is the part of a sparse attention call that every entry
// point validates with the same rules (checkSparseKV): the K/V layout, the
// block size, the head counts, the CSR, the sequence lengths, the page
// table and the schedule. The low-precision forward (validateSparse) and
// the float32 forward and backward (validateSparseF32), eager and graph,
// check their dtypes and scalars first and then call checkSparseKV.
type sparseInputs struct {
	qd, kd, vd    *tensor.Dense
	totalQ, hq, d int
	paged         bool
	layout        PagedLayout

	// Set by checkSparseKV.
	hkv, qpk, blk, batch  int
	pt                    []int32 // page table (paged)
	cols, ps, numPages    int     // page-table columns, page size, pages of k (paged)
	used                  []int32 // seqused_k's values (nil when absent)
	seqK, cuQ, cuK        []int32 // effective key lengths and the prefix sums
	rows                  *plan.Rows
	csr                   plan.CSR
	workers               int
	fp                    plan.FwdParams
	sched                 *plan.FwdSchedule // the given or built schedule (nil: float32, none given)
	kShape, kvHeadsOfDesc string
}

// sparseRules are the rules in which the entry points differ.
type sparseRules struct {
	last       string // k's last dimension in letters: "D", or "D/2" for packed NVFP4
	lastK      int    // its value
	headsArg   string // the argument a head-count mismatch names
	anyRatio   bool   // any qhead_per_kv (float32) instead of supportedQheadPerKV
	layoutHint bool   // say how to select the other paged layout
	build      bool   // build a schedule when args.Schedule is nil
}

// newSparseInputs returns the inputs of a call whose q, k and v are dense
// tensors with q of rank 3.
func newSparseInputs(qd, kd, vd *tensor.Dense, args *SparseArgs) *sparseInputs {
	s := qd.Shape()
	return &sparseInputs{qd: qd, kd: kd, vd: vd, totalQ: s[0], hq: s[1], d: s[2],
		paged: validate.Present(args.PageTable), layout: args.KVLayout}
}

// checkSparseKV validates everything after the dtypes and scalars: k's and
// v's layout, blk_kv, the head counts, topK, the CSR and cu_seqlens, the
// page table and seqused_k, max_seqlen_q/k, and the schedule (validated
// when given, built when r.build). It returns c's error or the first
// planning error.
func (in *sparseInputs) checkSparseKV(c *validate.Checker, rowPtr, qIdx tensor.Tensor, topK int, args *SparseArgs, r sparseRules) error {
	fn, kd, vd := c.Fn, in.kd, in.vd
	wantK, kShape := 3, "[total_k, Hkv, "+r.last+"]"
	if in.paged {
		wantK, kShape = 4, in.layout.shape(r.last)
	}
	in.kShape = kShape
	c.Rank(kd, "k", kShape, wantK)
	c.Rank(vd, "v", kShape, wantK)
	if c.Err != nil {
		return c.Err
	}
	if !kd.Shape().Eq(vd.Shape()) {
		c.Fail("k, v", "the same shape", "k "+validate.ShapeStr(kd)+", v "+validate.ShapeStr(vd))
	}
	if kd.Shape()[wantK-1] != r.lastK {
		c.Fail("k", fmt.Sprintf("last dimension %s = %d in shape %s", r.last, r.lastK, kShape), validate.ShapeStr(kd))
	}
	in.blk = args.BlkKV
	if in.blk == 0 {
		in.blk = 128
	}
	if in.blk < 1 || in.blk > tile.BlockN {
		c.Fail("blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", tile.BlockN), in.blk)
	}
	in.hkv, in.kvHeadsOfDesc = kd.Shape()[1], "k.shape[1]"
	if in.paged {
		var ps int
		in.hkv, ps = in.layout.dims(kd.Shape())
		in.kvHeadsOfDesc = in.layout.hkvDim()
		hint := ""
		if r.layoutHint {
			hint = in.layout.other()
		}
		if ps != in.blk {
			c.Fail("k", fmt.Sprintf("the paged %v layout %s with page_size = blk_kv = %d%s", in.layout, kShape, in.blk, hint), validate.ShapeStr(kd))
		}
	}
	if c.Err != nil {
		return c.Err
	}
	in.qpk = checkHeads(c, r.headsArg, in.qd, kd, in.hkv, r.anyRatio, func() string {
		return fmt.Sprintf("the %slayout %s (Hkv = %s)", pagedWord(in.paged, in.layout), kShape, in.kvHeadsOfDesc)
	})
	if c.Err != nil {
		return c.Err
	}
	if topK < 1 || topK > validate.MaxTopK {
		c.Fail("topK", fmt.Sprintf("1 <= topK <= %d", validate.MaxTopK), topK)
	}
	totalKeys := -1
	if !in.paged {
		totalKeys = kd.Shape()[0]
	}
	rp, qi, cuQ, cuK, err := csrAndSeqlens(c, rowPtr, qIdx, args, in.hkv, in.totalQ, topK, totalKeys)
	if err != nil {
		return err
	}
	in.cuQ, in.cuK, in.batch = cuQ, cuK, len(cuQ)-1
	if err := in.checkKeyLengths(c, args); err != nil {
		return err
	}
	in.rows = new(plan.Rows)
	if err := csrRows(fn, in.rows, rp.Shape()[1]-1, cuK, in.blk); err != nil {
		return err
	}
	if in.csr, err = csrView(fn, new(csrStore), csrPairOf(rp, qi), in.rows, in.totalQ, topK, cuQ); err != nil {
		return err
	}
	in.workers = validate.WorkerCount(args.Workers)
	in.fp = plan.FwdParams{TotalQ: in.totalQ, Hkv: in.hkv, QheadPerKV: in.qpk, TopK: topK, BlkKV: in.blk, Workers: in.workers}
	switch {
	case args.Schedule != nil:
		if err := args.Schedule.validate(fn, &in.csr, in.rows, cuQ, in.fp); err != nil {
			return err
		}
		in.sched = &args.Schedule.s
	case r.build:
		if in.sched, err = plan.BuildFwdSchedule(nil, &in.csr, in.rows, cuQ, in.fp); err != nil {
			return validate.WrapArg(fn, "schedule", err)
		}
	}
	return nil
}

// checkKeyLengths sets the effective key length of every sequence: from
// cu_seqlens_k for dense K/V, from seqused_k or the page table's capacity
// for paged K/V (whose page table and pages it checks), and checks
// max_seqlen_q and max_seqlen_k against the lengths.
func (in *sparseInputs) checkKeyLengths(c *validate.Checker, args *SparseArgs) error {
	in.seqK = make([]int32, in.batch)
	if !in.paged {
		if validate.Present(args.SeqUsedK) {
			c.Fail("seqused_k", "nil without page_table (seqused_k is only supported together with page_table)", "a tensor")
		}
		keyLengths(in.seqK, in.cuK)
	} else {
		pt := c.Dense(args.PageTable, "page_table")
		c.Dtype(pt, "page_table", tensor.Int32)
		c.Rank(pt, "page_table", "[B, max_num_pages_per_seq]", 2)
		if c.Err != nil {
			return c.Err
		}
		if pt.Shape()[0] != in.batch {
			c.Fail("page_table", fmt.Sprintf("shape [B = %d, max_num_pages_per_seq]", in.batch), validate.ShapeStr(pt))
		}
		_, in.ps = in.layout.dims(in.kd.Shape())
		in.cols = pt.Shape()[1]
		if !validate.PageCapacity(c, in.cols, in.ps) {
			return c.Err
		}
		in.pt, in.numPages = validate.Int32s(pt), in.kd.Shape()[0]
		var ok bool
		if in.used, ok = pagedSeqK(c, args.SeqUsedK, in.cuK, in.seqK, in.cols*in.ps); !ok {
			return c.Err
		}
		validate.CheckPages(c, in.pt, in.cols, in.ps, in.seqK, in.numPages)
	}
	validate.MaxSeq(c, "max_seqlen_q", args.MaxSeqlenQ, in.cuQ)
	validate.MaxSeqK(c, "max_seqlen_k", args.MaxSeqlenK, in.seqK)
	return c.Err
}
