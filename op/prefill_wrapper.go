package op

import (
	"fmt"
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/blocks"
	"github.com/sparseattn/msa/op/internal/decode"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// PrefillPlanArgs are the arguments of PagedPrefillWrapper.Plan.
type PrefillPlanArgs struct {
	// CuSeqlensQ: int32 [B+1], the prefix sums of each request's new query
	// tokens (the chunk being prefilled).
	CuSeqlensQ tensor.Tensor
	// PageTable: int32 [B, max_num_pages_per_seq]; SeqUsedK: int32 [B],
	// each request's key count already including the chunk's tokens (as
	// WritePagedKVFunc and PagedKVCache leave them).
	PageTable, SeqUsedK tensor.Tensor
	// KVLayout is the cache's layout, HND (the zero value) or NHD.
	KVLayout PagedLayout
	// NumQOHeads, NumKVHeads, HeadDim: Hq, Hkv and D of the q and k that
	// Run will get (required).
	NumQOHeads, NumKVHeads, HeadDim int
	// Causal masks, bottom-right aligned, the keys after each query's
	// position: query i of a chunk of n sits at position seqused_k - n + i.
	Causal bool
	// SoftmaxScale: 0 means DefaultSoftmaxScale(HeadDim).
	SoftmaxScale float64
	// PartialDtype is the dtype of the per-block partial results, as in
	// SparseArgs (zero value: BFloat16).
	PartialDtype tensor.Dtype
	// Workers caps the goroutines; <= 0 uses runtime.GOMAXPROCS(0).
	Workers int
}

// PagedPrefillWrapper is the plan/run helper of batch prefill over a paged
// K/V cache (chunked prefill onto an existing cache, FlashInfer's
// BatchPrefillWithPagedKVCacheWrapper): the new query tokens of each
// request attend to every key of that request in the cache (its earlier
// tokens and the chunk, appended before Plan), or, with q2k_indices, to
// the blocks those select. Plan validates and copies the metadata and
// builds the block lists, the k2q CSR and the schedule once; Run reuses
// them for every layer with the same metadata.
//
// It runs on the sparse kernels: a block is a page (blk_kv = page size, at
// most 128), and dense prefill selects every page of a request, so a
// request may hold at most 64 pages. Like DecodeWrapper, Run refuses a
// plan made stale by a later change of the page table or seqused_k given to
// Plan (a *StalePlanError). It is not safe for concurrent use: a call made
// while another call on the same wrapper is in progress returns an error
// instead of racing.
type PagedPrefillWrapper struct {
	pageSize int
	busy     atomic.Bool
	planned  bool
	args     SparseArgs
	topK     int
	rp, qi   *tensor.Dense
	pt, su   []int32 // the snapshot Run uses
	src      struct{ pt, su []int32 }
	cols     int
	hq, d    int
}

// NewPagedPrefillWrapper returns an unplanned wrapper for K/V pages of
// pageSize tokens (1 to 128: the sparse kernels' key block).
func NewPagedPrefillWrapper(pageSize int) (*PagedPrefillWrapper, error) {
	if pageSize < 1 || pageSize > tile.BlockN {
		return nil, validate.ArgErr("NewPagedPrefillWrapper", "page_size", fmt.Sprintf("1 <= page_size <= %d (a page is a key block of the sparse kernels)", tile.BlockN), pageSize)
	}
	return &PagedPrefillWrapper{pageSize: pageSize}, nil
}

// Plan validates the metadata, copies the page table and seqused_k, and
// builds the block lists (every page a query can see when q2kIndices is
// nil, else q2kIndices [Hkv, total_q, topK] of page-sized blocks), the
// k2q CSR and the schedule.
func (w *PagedPrefillWrapper) Plan(args PrefillPlanArgs, q2kIndices tensor.Tensor) error {
	const fn = "PagedPrefillWrapper.Plan"
	if err := acquire(&w.busy, fn); err != nil {
		return err
	}
	defer w.busy.Store(false)
	w.planned = false
	c := &validate.Checker{Fn: fn}
	c.Need(args.NumQOHeads > 0 && args.NumKVHeads > 0 && args.HeadDim > 0 && args.NumQOHeads%args.NumKVHeads == 0,
		"num_qo_heads/num_kv_heads/head_dim", "positive values with num_qo_heads divisible by num_kv_heads",
		fmt.Sprintf("%d/%d/%d", args.NumQOHeads, args.NumKVHeads, args.HeadDim))
	checkLayout(c, args.KVLayout, true)
	cuQ := validate.CuSeqlens(c, args.CuSeqlensQ, "cu_seqlens_q", -1, "")
	pt, su := decode.PageTableArgs(c, args.PageTable, args.SeqUsedK)
	if c.Err != nil {
		return c.Err
	}
	batch, cols := len(cuQ)-1, pt.Shape()[1]
	c.Need(pt.Shape()[0] == batch, "page_table", fmt.Sprintf("shape [B = %d, max_num_pages_per_seq]", batch), validate.ShapeStr(pt))
	c.Need(su.Shape()[0] == batch, "seqused_k", fmt.Sprintf("shape [B] = [%d]", batch), validate.ShapeStr(su))
	if !validate.PageCapacity(c, cols, w.pageSize) {
		return c.Err
	}
	used := validate.Int32s(su)
	cuK := make([]int32, batch+1)
	maxK := 0
	for b, n := range used {
		if n < 0 || int(n) > cols*w.pageSize {
			c.Fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("0 <= seqused_k <= max_num_pages_per_seq * page_size = %d", cols*w.pageSize), n)
			return c.Err
		}
		cuK[b+1] = cuK[b] + n
		maxK = max(maxK, int(n))
	}
	cuKT := tensor.New(tensor.WithShape(batch+1), tensor.WithBacking(cuK))
	q2k, topK, err := w.blockLists(fn, q2kIndices, cuQ, used, maxK, args)
	if err != nil {
		return err
	}
	rp, qi, err := K2QCSRFunc(q2k, args.CuSeqlensQ, cuKT, w.pageSize)
	if err != nil {
		return inStage(fn, err)
	}
	sched, err := FwdScheduleFunc(rp, qi, ScheduleArgs{CuSeqlensQ: args.CuSeqlensQ, CuSeqlensK: cuKT,
		TotalQ: int(cuQ[batch]), TopK: topK, QheadPerKV: args.NumQOHeads / args.NumKVHeads, BlkKV: w.pageSize, Workers: args.Workers})
	if err != nil {
		return inStage(fn, err)
	}
	w.pt, w.su = append(w.pt[:0], validate.Int32s(pt)...), append(w.su[:0], used...)
	w.src.pt, w.src.su, w.cols = validate.Int32s(pt), used, cols
	w.args = SparseArgs{CuSeqlensQ: args.CuSeqlensQ, CuSeqlensK: cuKT, BlkKV: w.pageSize, Causal: args.Causal,
		SoftmaxScale: args.SoftmaxScale, PartialDtype: args.PartialDtype, PageTable: tensor.New(tensor.WithShape(batch, cols), tensor.WithBacking(w.pt)),
		SeqUsedK: tensor.New(tensor.WithShape(batch), tensor.WithBacking(w.su)), KVLayout: args.KVLayout,
		Schedule: sched, Workers: args.Workers}
	w.topK, w.rp, w.qi, w.hq, w.d = topK, rp, qi, args.NumQOHeads, args.HeadDim
	w.planned = true
	return nil
}

// blockLists returns the q2k_indices of the plan: every page each query
// can see (q2kIndices nil) or q2kIndices itself, and its topK.
func (w *PagedPrefillWrapper) blockLists(fn string, q2kIndices tensor.Tensor, cuQ, used []int32, maxK int, args PrefillPlanArgs) (tensor.Tensor, int, error) {
	if validate.Present(q2kIndices) {
		c := &validate.Checker{Fn: fn}
		qd := c.Dense(q2kIndices, "q2k_indices")
		c.Rank(qd, "q2k_indices", "[Hkv, total_q, topK]", 3)
		if c.Err == nil {
			want := fmt.Sprintf("[Hkv = num_kv_heads = %d, total_q = %d, topK]", args.NumKVHeads, cuQ[len(cuQ)-1])
			c.Need(qd.Shape()[0] == args.NumKVHeads && qd.Shape()[1] == int(cuQ[len(cuQ)-1]), "q2k_indices", want, validate.ShapeStr(qd))
		}
		if c.Err != nil {
			return nil, 0, c.Err
		}
		return q2kIndices, qd.Shape()[2], nil
	}
	topK, err := denseTopK(fn, maxK, w.pageSize)
	if err != nil {
		return nil, 0, err
	}
	totalQ := int(cuQ[len(cuQ)-1])
	if _, err := valueSize(fn, "cu_seqlens_q", "q2k_indices Hkv * total_q * topK", args.NumKVHeads, totalQ, topK); err != nil {
		return nil, 0, err
	}
	q2k := make([]int32, args.NumKVHeads*totalQ*topK)
	blocks.All(q2k, cuQ, used, args.NumKVHeads, topK, w.pageSize, args.Causal)
	return tensor.New(tensor.WithShape(args.NumKVHeads, totalQ, topK), tensor.WithBacking(q2k)), topK, nil
}

// Run computes the planned prefill for q [total_q, Hq, D] against the
// paged k and v of the cache (the planned layout): SparseAttentionFunc's
// result over the plan's blocks. softmaxScale 0 means the planned scale.
func (w *PagedPrefillWrapper) Run(q, k, v tensor.Tensor, softmaxScale float64) (*Result, error) {
	const fn = "PagedPrefillWrapper.Run"
	if err := acquire(&w.busy, fn); err != nil {
		return nil, err
	}
	defer w.busy.Store(false)
	if !w.planned {
		return nil, validate.ArgErr(fn, "wrapper", "a planned wrapper (call Plan before Run)", "unplanned")
	}
	if err := decode.StaleMeta(fn, w.src.su, w.su, w.src.pt, w.pt, w.cols); err != nil {
		return nil, err
	}
	if validate.Present(q) {
		if qd, ok := q.(*tensor.Dense); ok && qd.Dims() == 3 && (qd.Shape()[1] != w.hq || qd.Shape()[2] != w.d) {
			return nil, validate.ArgErr(fn, "q", fmt.Sprintf("[total_q, Hq = %d, D = %d] as planned", w.hq, w.d), validate.ShapeStr(qd))
		}
	}
	args := w.args
	if softmaxScale != 0 {
		args.SoftmaxScale = softmaxScale
	}
	res, err := SparseAttentionFunc(q, k, v, w.rp, w.qi, w.topK, args)
	if err != nil {
		return nil, inStage(fn, err)
	}
	return res, nil
}
