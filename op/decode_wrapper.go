package op

import (
	"fmt"
	"slices"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"gorgonia.org/tensor"
)

// DecodeWrapper is the plan/run helper of paged decode attention (the
// reference's SparseDecodePagedAttentionWrapper). Plan validates the
// metadata and builds the schedule, the worker pool and every workspace
// once; Run reuses them for every layer and step whose shapes match and
// allocates nothing in the steady state (RunInto with caller-owned outputs).
//
// Run reads the current contents of the page_table, seqused_k and
// q2k_indices tensors given to Plan, so a caller may update them in place
// between steps. Run refuses inputs that no longer match the plan: other
// shapes, batch, page size, head counts, a seqused_k that outgrows the
// planned pages (call Plan again), page-table entries out of range. With
// EnableCUDAGraph the buffers are sized for the worst case and Run re-derives
// the work items for the current seqused_k in place instead of refusing.
// A DecodeWrapper is not safe for concurrent use; Close releases its
// goroutines.
type DecodeWrapper struct {
	pageSize int
	args     DecodeArgs
	pt, su   *tensor.Dense
	q2k      *tensor.Dense
	m        *decodeMeta
	sched    *plan.DecodeSchedule
	pool     *attn.Pool
	ws       *attn.Workspace
	p        attn.Decode
	out      attn.Output
	c        checker
}

// NewDecodeWrapper returns an unplanned wrapper for K/V pages of pageSize
// tokens (the reference's blk_kv; any page size >= 1 is accepted).
func NewDecodeWrapper(pageSize int) (*DecodeWrapper, error) {
	if pageSize < 1 {
		return nil, argErr("NewDecodeWrapper", "blk_kv", "a page size >= 1", pageSize)
	}
	return &DecodeWrapper{pageSize: pageSize}, nil
}

// Plan validates the decode metadata and prepares the schedule and
// workspaces (the reference's plan). args.NumQOHeads, NumKVHeads and
// HeadDim are required; q2kIndices nil plans dense decode.
func (w *DecodeWrapper) Plan(args DecodeArgs, q2kIndices tensor.Tensor) error {
	const fn = "DecodeWrapper.Plan"
	c := &checker{fn: fn}
	c.need(args.NumQOHeads > 0 && args.NumKVHeads > 0 && args.HeadDim > 0, "num_qo_heads/num_kv_heads/head_dim",
		"positive values (decode plan requires num_qo_heads, num_kv_heads, and head_dim)",
		fmt.Sprintf("%d/%d/%d", args.NumQOHeads, args.NumKVHeads, args.HeadDim))
	if c.err != nil {
		return c.err
	}
	c.need(slices.Contains(supportedHeadDims, args.HeadDim), "head_dim", fmt.Sprintf("one of %v", supportedHeadDims), args.HeadDim)
	c.need(args.NumQOHeads%args.NumKVHeads == 0, "num_qo_heads", fmt.Sprintf("divisible by num_kv_heads = %d", args.NumKVHeads), args.NumQOHeads)
	if c.err == nil && !slices.Contains(supportedQheadPerKV, args.NumQOHeads/args.NumKVHeads) {
		return &NotImplementedError{fn, fmt.Sprintf("qhead_per_kv must be in {1, 2, 4, 8, 16}, got %d", args.NumQOHeads/args.NumKVHeads)}
	}
	if c.err != nil {
		return c.err
	}
	m := validateDecodeMeta(c, &args, q2kIndices, -1, args.NumQOHeads, args.NumKVHeads, args.HeadDim, w.pageSize, -1)
	if c.err != nil {
		return c.err
	}
	s, err := plan.BuildDecodeSchedule(w.sched, m.seqused, m.params)
	if err != nil {
		return wrapArg(fn, "schedule", err)
	}
	if w.pool == nil || w.pool.Workers() != m.params.Workers {
		w.Close()
		w.pool = attn.NewPool(m.params.Workers)
	}
	if w.ws == nil || w.m == nil || w.m.d != m.d {
		w.ws = attn.NewWorkspace(w.pool.Workers(), m.d)
	}
	w.ws.Reserve(m.d, s.PartialRows*m.hq, max(s.MaxSplits, 1))
	w.args, w.m, w.sched = args, m, s
	w.pt, w.su = args.PageTable.(*tensor.Dense), args.SequsedK.(*tensor.Dense)
	w.q2k, _ = q2kIndices.(*tensor.Dense)
	return nil
}

// Schedule returns the current decode schedule (read-only).
func (w *DecodeWrapper) Schedule() *plan.DecodeSchedule { return w.sched }

// Run computes decode attention for q [B*seqlen_q, Hq, D] against paged k,
// v using the plan. softmaxScale 0 means 1/sqrt(D). It allocates the
// outputs; RunInto reuses caller-owned ones.
func (w *DecodeWrapper) Run(q, k, v tensor.Tensor, softmaxScale float64, returnLSE bool) (*Result, error) {
	if w.m == nil {
		return nil, argErr("DecodeWrapper.Run", "wrapper", "a planned wrapper (call Plan before Run)", "unplanned")
	}
	rows := w.m.batch * w.m.seqlenQ
	out := tensor.New(tensor.WithShape(rows, w.m.hq, w.m.d), tensor.WithBacking(make([]lowp.BFloat16, rows*w.m.hq*w.m.d)))
	var lse *tensor.Dense
	if returnLSE {
		lse = tensor.New(tensor.WithShape(rows, w.m.hq), tensor.WithBacking(make([]float32, rows*w.m.hq)))
	}
	if err := w.RunInto(q, k, v, softmaxScale, out, lse); err != nil {
		return nil, err
	}
	return &Result{Out: out, LSE: lse}, nil
}

// RunInto is Run writing into out (BFloat16 [B*seqlen_q, Hq, D]) and, when
// non-nil, lse (float32 [B*seqlen_q, Hq]). It does not allocate once the
// wrapper has run one call of the same shapes.
func (w *DecodeWrapper) RunInto(q, k, v tensor.Tensor, softmaxScale float64, out, lse *tensor.Dense) error {
	const fn = "DecodeWrapper.Run"
	w.c = checker{fn: fn}
	c := &w.c
	m := w.m
	if m == nil {
		return argErr(fn, "wrapper", "a planned wrapper (call Plan before Run)", "unplanned")
	}
	qd, kd, vd := decodeQKV(c, q, k, v)
	if c.err != nil {
		return c.err
	}
	qs, ks := qd.Shape(), kd.Shape()
	if qs[0] != m.batch*m.seqlenQ || qs[1] != m.hq || qs[2] != m.d || ks[1] != m.hkv || ks[2] != m.pageSize {
		c.fail("q/k", fmt.Sprintf("the planned shapes q [%d, %d, %d], k [num_pages, %d, %d, %d]",
			m.batch*m.seqlenQ, m.hq, m.d, m.hkv, m.pageSize, m.d), "q "+shapeStr(qd)+", k "+shapeStr(kd))
		return c.err
	}
	if out == nil || out.Dtype() != BFloat16 || out.DataSize() != qs[0]*qs[1]*qs[2] {
		c.fail("out", fmt.Sprintf("a bfloat16 tensor of %d elements", qs[0]*qs[1]*qs[2]), out)
		return c.err
	}
	if lse != nil && (lse.Dtype() != tensor.Float32 || lse.DataSize() != qs[0]*qs[1]) {
		c.fail("lse", fmt.Sprintf("a float32 tensor of %d elements", qs[0]*qs[1]), lse)
		return c.err
	}
	if err := w.checkStale(c, ks[0]); err != nil {
		return err
	}
	scale := softmaxScale
	if scale == 0 {
		scale = m.scale
	}
	if !(scale > 0) || scale > 1e30 {
		c.fail("softmax_scale", "a finite value > 0", scale)
		return c.err
	}
	w.p = decodeRun(m, qd, kd, vd, w.sched)
	w.p.Scale = float32(scale)
	w.out = attn.Output{O: backing[lowp.BFloat16](out), LSE: backing[float32](lse)}
	attn.RunDecode(&w.p, w.ws, w.pool, &w.out)
	w.out = attn.Output{}
	return nil
}

// checkStale re-validates the metadata tensors' current contents against
// the plan (stale-plan detection) and, in CUDA-graph mode, re-derives the
// work items in place.
func (w *DecodeWrapper) checkStale(c *checker, numPages int) error {
	m := w.m
	if w.pt.Shape()[0] != m.batch || w.pt.Shape()[1] != m.cols || w.su.Shape()[0] != m.batch {
		c.fail("page_table/seqused_k", fmt.Sprintf("the planned shapes [%d, %d] and [%d]", m.batch, m.cols, m.batch),
			shapeStr(w.pt)+" and "+shapeStr(w.su))
		return c.err
	}
	m.pt, m.seqused = int32s(w.pt), int32s(w.su)
	s := w.sched
	for b, x := range m.seqused {
		if x < 0 || int(x) > m.cols*m.pageSize {
			c.fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("0 <= seqused_k <= %d (page-table capacity)", m.cols*m.pageSize), x)
			return c.err
		}
		pages := max(1, (int(x)+m.pageSize-1)/m.pageSize)
		if !m.params.FixedCapacity && pages > int(s.SplitCounts[b])*s.ChunkPages {
			c.fail(fmt.Sprintf("seqused_k[%d]", b),
				fmt.Sprintf("<= %d tokens covered by the plan (call Plan again)", int(s.SplitCounts[b])*s.ChunkPages*m.pageSize), x)
			return c.err
		}
	}
	if m.params.FixedCapacity {
		if _, err := plan.BuildDecodeSchedule(s, m.seqused, m.params); err != nil {
			return wrapArg(c.fn, "seqused_k", err)
		}
	}
	checkPages(c, m.pt, m.cols, m.pageSize, m.seqused, numPages)
	if w.q2k != nil && c.err == nil {
		m.q2k = int32s(w.q2k)
		checkDecodeQ2K(c, m)
	}
	return c.err
}

// Close releases the wrapper's goroutines. The wrapper can be planned again.
func (w *DecodeWrapper) Close() {
	if w.pool != nil {
		w.pool.Close()
		w.pool = nil
	}
}
