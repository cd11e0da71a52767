package op

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/decode"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// DecodeWrapper is the plan/run helper of paged decode attention (the
// reference's SparseDecodePagedAttentionWrapper). Plan validates the
// metadata, copies it and builds the schedule, the worker pool and every
// workspace once; Run reuses them for every layer whose shapes match and,
// with low-precision q, k, v, allocates nothing in the steady state
// (RunInto with caller-owned outputs; RunInto says what float32 takes).
//
// Plan snapshots page_table, seqused_k and q2k_indices. Run compares the
// page_table and seqused_k tensors given to Plan with the snapshot (O(B *
// max_num_pages_per_seq), no allocation) and refuses to run a stale plan:
// after WritePagedKVFunc or WritePagedKV added tokens to those tensors, or a
// page was assigned, Run returns a *StalePlanError instead of attending
// over the planned lengths. (A view given to Plan is copied there and
// cannot be watched.) For the next decode step call Plan again with the
// new metadata; it reuses the schedule, pool and
// workspace buffers when they are large enough (with EnableCUDAGraph they
// are sized for the worst case once, so re-planning never reallocates
// them). Run refuses inputs that do not match the plan (other shapes, batch,
// page size, head counts) and page-table entries outside k's pages.
//
// A DecodeWrapper is not safe for concurrent use: a call made while another
// call on the same wrapper is in progress returns an error instead of
// racing. Close releases its goroutines; Run after Close is an error until
// the next Plan.
type DecodeWrapper struct {
	pageSize int
	busy     atomic.Bool
	args     PlanArgs
	m        *decode.Meta
	sched    *plan.DecodeSchedule
	pool     *attn.Pool
	ws       *attn.Workspace
	snap     decode.Snapshot
	// src holds the page_table and seqused_k storage given to Plan, which
	// Run compares with the snapshot to detect a stale plan.
	src struct{ pt, seqused []int32 }
	p   attn.Decode
	out attn.Output
	c   validate.Checker
	// f32 is the float32 path's state, prepared by the first float32 Run
	// after each Plan (f32Planned) and reused by the Runs after it.
	f32        decode.F32
	f32Planned bool
}

// acquire takes busy, the in-progress flag of a DecodeWrapper,
// PagedPrefillWrapper or PagedKVCache, for the call fn, or returns
// errBusy(fn) when another call holds it; the caller releases it with
// busy.Store(false).
func acquire(busy *atomic.Bool, fn string) error {
	if !busy.CompareAndSwap(false, true) {
		return errBusy(fn)
	}
	return nil
}

// errBusy is returned by a call that overlaps another call on one
// DecodeWrapper, PagedPrefillWrapper or PagedKVCache; fn is
// "Type.Method". The argument it names is the cache or the wrapper.
func errBusy(fn string) error {
	typ, _, _ := strings.Cut(fn, ".")
	arg := "wrapper"
	if typ == "PagedKVCache" {
		arg = "cache"
	}
	return validate.ArgErr(fn, arg, "no concurrent call on the same "+typ+" (it is not safe for concurrent use)",
		"a call already in progress")
}

// NewDecodeWrapper returns an unplanned wrapper for K/V pages of pageSize
// tokens (any page size in [1, 2^31-1] is accepted). pageSize is the
// reference constructor's blk_kv (SparseDecodePagedAttentionWrapper(blk_kv=...)),
// which there is both the page size and the sparse block size; here the
// sparse-decode block size is the separate BlkKV of the plan's arguments
// (0: the page size). The reference constructor's causal is the
// NonCausal field of the plan's arguments (causal only, as there).
func NewDecodeWrapper(pageSize int) (*DecodeWrapper, error) {
	if pageSize < 1 || pageSize > validate.MaxInt32 {
		return nil, validate.ArgErr("NewDecodeWrapper", "page_size", fmt.Sprintf("a page size in [1, %d]", validate.MaxInt32), pageSize)
	}
	return &DecodeWrapper{pageSize: pageSize}, nil
}

// Plan validates the decode metadata, copies it and prepares the schedule
// and workspaces (the reference's plan). args.NumQOHeads, NumKVHeads and
// HeadDim are required; q2kIndices nil (or a nil *tensor.Dense) plans dense
// decode.
func (w *DecodeWrapper) Plan(args PlanArgs, q2kIndices tensor.Tensor) error {
	const fn = "DecodeWrapper.Plan"
	if err := acquire(&w.busy, fn); err != nil {
		return err
	}
	defer w.busy.Store(false)
	c := &validate.Checker{Fn: fn}
	c.Need(args.NumQOHeads > 0 && args.NumKVHeads > 0 && args.HeadDim > 0, "num_qo_heads/num_kv_heads/head_dim",
		"positive values (decode plan requires num_qo_heads, num_kv_heads, and head_dim)",
		fmt.Sprintf("%d/%d/%d", args.NumQOHeads, args.NumKVHeads, args.HeadDim))
	if c.Err != nil {
		return c.Err
	}
	c.Need(slices.Contains(supportedHeadDims, args.HeadDim), "head_dim", fmt.Sprintf("one of %v", supportedHeadDims), args.HeadDim)
	c.Need(args.NumQOHeads%args.NumKVHeads == 0, "num_qo_heads", fmt.Sprintf("divisible by num_kv_heads = %d", args.NumKVHeads), args.NumQOHeads)
	if c.Err == nil && !slices.Contains(supportedQheadPerKV, args.NumQOHeads/args.NumKVHeads) {
		return &NotImplementedError{Func: fn, What: fmt.Sprintf("qhead_per_kv must be in {1, 2, 4, 8, 16}, got %d", args.NumQOHeads/args.NumKVHeads)}
	}
	if c.Err != nil {
		return c.Err
	}
	m := validateDecodeMeta(c, &args.DecodeArgs, args.EnableCUDAGraph, q2kIndices, -1, args.NumQOHeads, args.NumKVHeads, args.HeadDim, w.pageSize, -1)
	if c.Err != nil {
		return c.Err
	}
	s, err := plan.BuildDecodeSchedule(w.sched, m.SeqUsed, m.Params)
	if err != nil {
		w.m = nil // w.sched's contents are unspecified after an error
		return validate.WrapArg(fn, "schedule", err)
	}
	if w.pool == nil || w.pool.Workers() != m.Params.Workers {
		w.closePool()
		w.pool = attn.NewPool(m.Params.Workers)
	}
	if w.ws == nil || w.m == nil || w.m.D != m.D {
		w.ws = attn.NewWorkspace(w.pool.Workers(), m.D)
	}
	w.ws.Reserve(m.D, s.PartialRows*m.HQ, max(s.MaxSplits, 1))
	w.src.pt, w.src.seqused = m.PT, m.SeqUsed
	w.snap.Take(m)
	w.args, w.m, w.sched = args, m, s
	w.f32Planned = false
	return nil
}

// DecodePlanInfo describes the schedule of a DecodeWrapper's current plan.
type DecodePlanInfo struct {
	// WorkItems is the number of valid work items; Capacity the number of
	// work-item slots (with EnableCUDAGraph, fixed for the worst case, so
	// re-planning never changes it).
	WorkItems, Capacity int
	// ChunkPages is the KV chunk of a work item in pages; SplitKV whether
	// a request's keys are split over several work items whose partial
	// results are combined.
	ChunkPages int
	SplitKV    bool
	// SplitCounts is the number of KV chunks of each request ([B], a
	// copy); MaxSplits the largest.
	SplitCounts []int32
	MaxSplits   int
}

// Schedule describes the current plan's schedule (the zero value before
// the first Plan).
func (w *DecodeWrapper) Schedule() DecodePlanInfo {
	s := w.sched
	if s == nil || w.m == nil {
		return DecodePlanInfo{}
	}
	return DecodePlanInfo{WorkItems: s.WorkCount, Capacity: s.Capacity, ChunkPages: s.ChunkPages, SplitKV: s.SplitKV,
		SplitCounts: slices.Clone(s.SplitCounts[:w.m.Batch]), MaxSplits: s.MaxSplits}
}

// Run computes decode attention for q [B*seqlen_q, Hq, D] against paged k,
// v using the plan. softmaxScale 0 means the planned scale. It allocates
// the outputs: Out and the natural-log LSE (always set; the reference's
// return_softmax_lse has no Go counterpart). RunInto reuses caller-owned ones.
// q, k and v take the dtypes of DecodeAttentionFunc, float32 included (Out
// is then float32).
func (w *DecodeWrapper) Run(q, k, v tensor.Tensor, softmaxScale float64) (*Result, error) {
	const fn = "DecodeWrapper.Run"
	if err := acquire(&w.busy, fn); err != nil {
		return nil, err
	}
	defer w.busy.Store(false)
	if err := w.usable(fn); err != nil {
		return nil, err
	}
	// The outputs are sized by q, once q matches the plan: a plan's sizes
	// alone (seqlen_q is a scalar of Plan) must not decide an allocation
	// before the inputs are checked.
	qd, kd, vd, err := w.inputs(fn, q, k, v)
	if err != nil {
		return nil, err
	}
	qs := qd.Shape()
	out, lse := newDecodeOutputs(isFloat32(qd), qs[0], qs[1], qs[2])
	if err := w.runChecked(qd, kd, vd, softmaxScale, out, lse); err != nil {
		return nil, err
	}
	return &Result{Out: out, LSE: lse}, nil
}

// usable reports an unplanned or closed wrapper; the caller holds the busy
// flag, which every method that reads or writes the plan and the pool
// takes first (Close included), so that a call overlapping another is an
// error and never a data race.
func (w *DecodeWrapper) usable(fn string) error {
	if w.m == nil {
		return validate.ArgErr(fn, "wrapper", "a planned wrapper (call Plan before Run)", "unplanned")
	}
	if w.pool == nil {
		return validate.ArgErr(fn, "wrapper", "an open wrapper (call Plan again after Close)", "closed")
	}
	return nil
}

// RunInto is Run writing into out (BFloat16 [B*seqlen_q, Hq, D]; float32
// with float32 q, k, v) and, when
// non-nil, lse (float32 [B*seqlen_q, Hq]). Both must be contiguous tensors
// of exactly that shape (not views into a larger tensor) that share no
// storage with each other or with q, k or v. With low-precision q, k, v it
// does not allocate once the wrapper has run one call of the same shapes.
// With float32 q, k, v the first Run after a Plan derives the float32
// forward's block lists and k2q CSR from the plan (reusing the previous
// plan's buffers when they are large enough) and the Runs after it reuse
// them; the allocations left per Run are those of the float32 forward's
// own per-call set-up in package grad (a fixed number of allocations,
// their sizes proportional to the query rows and key blocks).
func (w *DecodeWrapper) RunInto(q, k, v tensor.Tensor, softmaxScale float64, out, lse *tensor.Dense) error {
	const fn = "DecodeWrapper.Run"
	if err := acquire(&w.busy, fn); err != nil {
		return err
	}
	defer w.busy.Store(false)
	if err := w.usable(fn); err != nil {
		return err
	}
	return w.runInto(fn, q, k, v, softmaxScale, out, lse)
}

// runInto is RunInto for a caller that holds the busy flag and has checked
// that the wrapper is usable.
func (w *DecodeWrapper) runInto(fn string, q, k, v tensor.Tensor, softmaxScale float64, out, lse *tensor.Dense) error {
	qd, kd, vd, err := w.inputs(fn, q, k, v)
	if err != nil {
		return err
	}
	return w.runChecked(qd, kd, vd, softmaxScale, out, lse)
}

// inputs checks q, k and v against the plan (and the planned metadata
// against the caller's, StaleMeta) and returns them as dense tensors; it
// starts the checker runChecked goes on with.
func (w *DecodeWrapper) inputs(fn string, q, k, v tensor.Tensor) (qd, kd, vd *tensor.Dense, err error) {
	w.c = validate.Checker{Fn: fn}
	c := &w.c
	m := w.m
	if err := decode.StaleMeta(fn, w.src.seqused, m.SeqUsed, w.src.pt, m.PT, m.Cols); err != nil {
		return nil, nil, nil, err
	}
	qd, kd, vd = decodeQKVLayout(c, q, k, v, w.args.KVLayout, true)
	if c.Err != nil {
		return nil, nil, nil, c.Err
	}
	qs, ks := qd.Shape(), kd.Shape()
	if hkv, ps := w.args.KVLayout.dims(ks); qs[0] != m.Batch*m.SeqlenQ || qs[1] != m.HQ || qs[2] != m.D || hkv != m.Hkv || ps != m.PageSize {
		c.Fail("q/k", fmt.Sprintf("the planned shapes q [%d, %d, %d], k %s with Hkv = %d, page_size = %d, D = %d (%v layout)",
			m.Batch*m.SeqlenQ, m.HQ, m.D, w.args.KVLayout.shape("D"), m.Hkv, m.PageSize, m.D, w.args.KVLayout), "q "+validate.ShapeStr(qd)+", k "+validate.ShapeStr(kd))
		return nil, nil, nil, c.Err
	}
	return qd, kd, vd, nil
}

// runChecked is runInto after inputs accepted qd, kd and vd.
func (w *DecodeWrapper) runChecked(qd, kd, vd *tensor.Dense, softmaxScale float64, out, lse *tensor.Dense) error {
	c := &w.c
	fn := c.Fn
	m := w.m
	qs, ks := qd.Shape(), kd.Shape()
	f32 := isFloat32(qd)
	outDtype := BFloat16
	if f32 {
		outDtype = tensor.Float32
	}
	validate.OutputArg(c, out, "out", outDtype, qs[0], qs[1], qs[2])
	if lse != nil {
		validate.OutputArg(c, lse, "lse", tensor.Float32, qs[0], qs[1])
	}
	checkDisjoint(c, []namedTensor{{"out", out}, {"lse", lse}}, []namedTensor{{"q", qd}, {"k", kd}, {"v", vd}})
	validate.CheckPages(c, m.PT, m.Cols, m.PageSize, m.SeqUsed, ks[0])
	if c.Err != nil {
		return c.Err
	}
	scale := m.Scale
	if softmaxScale != 0 {
		scale = validate.ResolveScale(c, softmaxScale, m.D)
		if c.Err != nil {
			return c.Err
		}
	}
	if f32 {
		return w.runF32(fn, qd, kd, vd, scale, out, lse)
	}
	w.p = decodeRun(m, qd, kd, vd, w.sched)
	w.p.Scale = float32(scale)
	w.out = attn.Output{O: validate.Backing[lowp.BFloat16](out), LSE: validate.Backing[float32](lse)}
	attn.RunDecode(&w.p, w.ws, w.pool, &w.out)
	w.out = attn.Output{}
	return nil
}

// runF32 is runInto's float32 path: it prepares the float32 forward once
// per plan and then reuses it (and its buffers) for every Run.
func (w *DecodeWrapper) runF32(fn string, qd, kd, vd *tensor.Dense, scale float64, out, lse *tensor.Dense) error {
	m := w.m
	if !w.f32Planned {
		if err := w.f32.Prepare(fn, m, w.pool); err != nil {
			return err
		}
		w.f32Planned = true
	}
	var l []float32
	if lse != nil {
		l = validate.Backing[float32](lse)
	} else {
		l = w.f32.ScratchLSE(m.Batch * m.SeqlenQ * m.HQ)
	}
	return w.f32.Run(fn, m, qd, kd, vd, scale, validate.Backing[float32](out), l)
}

// Close releases the wrapper's goroutines; it waits for a call in progress
// on another goroutine to finish. The wrapper can be planned again.
func (w *DecodeWrapper) Close() {
	for !w.busy.CompareAndSwap(false, true) {
		runtime.Gosched()
	}
	defer w.busy.Store(false)
	w.closePool()
}

func (w *DecodeWrapper) closePool() {
	if w.pool != nil {
		w.pool.Close()
		w.pool = nil
	}
}
