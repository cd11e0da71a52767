package op

import (
	"fmt"
	"hash"
	"slices"
	"sync"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/decode"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// decodeLayout describes the packed decode schedule value (1-D int32):
//
//	[0] chunk_pages  [1] split_kv  [2] work_count  [3] max_splits
//	then request, q_tile, kv_tile, kv_head, valid   (Capacity each)
//	then split_counts [B], pages [B]
//
// Capacity, partial rows and o_indptr are fixed by the parameters (the
// fixed-capacity mode), so the value's length is known at graph build time.
type decodeLayout struct {
	p    plan.DecodeParams
	base plan.DecodeSchedule // built for seqused = 0: the fixed fields
}

func newDecodeLayout(p plan.DecodeParams) (decodeLayout, error) {
	p.FixedCapacity = true
	s, err := plan.BuildDecodeSchedule(nil, make([]int32, p.Batch), p)
	if err != nil {
		return decodeLayout{}, err
	}
	return decodeLayout{p: p, base: *s}, nil
}

func (l decodeLayout) len() int { return 4 + 5*l.base.Capacity + 2*l.p.Batch }

// packInto writes the schedule s as the packed value v (of l.len()
// elements): the header, then the schedule's arrays.
func (l decodeLayout) packInto(v []int32, s *plan.DecodeSchedule) {
	v = v[:0]
	split := int32(0)
	if s.SplitKV {
		split = 1
	}
	v = append(v, int32(s.ChunkPages), split, int32(s.WorkCount), int32(s.MaxSplits))
	for _, a := range [][]int32{s.Request, s.QTileIdx, s.KVTile, s.KVHead, s.Valid, s.SplitCounts, s.Pages} {
		v = append(v, a...)
	}
}

// unpack views a packed value as a schedule (slices alias v).
func (l decodeLayout) unpack(v []int32) *plan.DecodeSchedule {
	s := new(plan.DecodeSchedule)
	l.unpackInto(s, v)
	return s
}

// unpackInto is unpack writing into s (storage kept across runs).
func (l decodeLayout) unpackInto(s *plan.DecodeSchedule, v []int32) {
	*s = l.base
	c, b := l.base.Capacity, l.p.Batch
	s.ChunkPages, s.SplitKV, s.WorkCount, s.MaxSplits = int(v[0]), v[1] != 0, int(v[2]), int(v[3])
	o := 4
	next := func(n int) []int32 { r := v[o : o+n]; o += n; return r }
	s.Request, s.QTileIdx, s.KVTile, s.KVHead, s.Valid = next(c), next(c), next(c), next(c), next(c)
	s.SplitCounts, s.Pages = next(b), next(b)
}

// decodeSchedOp builds the decode schedule from seqused_k.
type decodeSchedOp struct {
	opBase
	l decodeLayout

	// lastValue and lastSeqUsed are copies of the node's last value and of
	// the seqused_k it was built from. A decode node given exactly these needs no
	// ValidateDecodeSchedule: BuildDecodeSchedule made the one from the
	// other with the same parameters, so that check (which allocates) runs
	// once per step in the plan, not in each layer's run.
	lastMu                 sync.Mutex
	lastValue, lastSeqUsed []int32
	host                   decodeSchedHost // the CUDA path's host side (graph_nodes_host.go)
}

// remember records v as the value built from seqused.
func (op *decodeSchedOp) remember(v, seqused []int32) {
	op.lastMu.Lock()
	defer op.lastMu.Unlock()
	op.lastValue = append(op.lastValue[:0], v...)
	op.lastSeqUsed = append(op.lastSeqUsed[:0], seqused...)
}

// built reports whether v is the value the node's last run built from
// seqused.
func (op *decodeSchedOp) built(v, seqused []int32) bool {
	op.lastMu.Lock()
	defer op.lastMu.Unlock()
	return op.lastValue != nil && slices.Equal(op.lastValue, v) && slices.Equal(op.lastSeqUsed, seqused)
}

func (op *decodeSchedOp) Arity() int { return 2 }
func (op *decodeSchedOp) Type() hm.Type {
	return fnType(tt(2, tensor.Int32), tt(1, tensor.Int32), tt(1, tensor.Int32))
}
func (op *decodeSchedOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.l.len()}, nil
}
func (op *decodeSchedOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "msa.DecodeSchedule%+v", op.l.p) }
func (op *decodeSchedOp) Hashcode() uint32      { return hashOf(op) }
func (op *decodeSchedOp) String() string {
	return fmt.Sprintf("DecodeSchedule{capacity=%d}", op.l.base.Capacity)
}

func (op *decodeSchedOp) Do(vals ...G.Value) (G.Value, error) {
	return op.build(new(decodeSchedHost), tv(vals[1]))
}

// build checks seqused_k and builds the packed schedule into h's storage:
// fresh for the CPU Do, kept by the node on the CUDA path (a warm run
// allocates nothing).
func (op *decodeSchedOp) build(h *decodeSchedHost, suT tensor.Tensor) (*tensor.Dense, error) {
	const fn = "DecodeSchedule"
	c := validate.Checker{Fn: fn}
	su := c.Dense(suT, "seqused_k")
	c.Dtype(su, "seqused_k", tensor.Int32)
	if c.Err != nil {
		return nil, c.Err
	}
	used := validate.Int32s(su)
	s, err := plan.BuildDecodeSchedule(&h.sched, used, op.l.p)
	if err != nil {
		return nil, validate.WrapArg(fn, "seqused_k", err)
	}
	out := h.out.view(tensor.Int32, tensor.Shape{op.l.len()})
	v := validate.Int32s(out)
	op.l.packInto(v, s)
	op.remember(v, used)
	return out, nil
}

// DecodeSchedule adds the split-KV decode schedule (docs/contract.md section 7) for a
// page table [B, pages] and seqused_k [B]. It always uses the fixed-capacity
// mode: its value has the same length for every seqused_k, so it can be
// recomputed each step (after gorgonia.Let updates) without reallocating the
// decode node's buffers. All decode attention nodes of the step (one per
// layer) can share it. Options: Heads(num_qo_heads, num_kv_heads) and
// PageSize (required), SeqlenQ (absent: 1), Workers (numSM; absent or <= 0:
// runtime.GOMAXPROCS(0); the decode attention node runs on as many
// goroutines), FixedSplitSize, DisableSplitKV and PlanForCUDA (plan for the
// CUDA path of a GPU with that many SMs; the schedule then runs only there).
func DecodeSchedule(pageTable, seqUsedK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "DecodeSchedule"
	cfg, err := applyOptions(fn, opts, optHeads, optPageSize, optSeqlenQ, optWorkers, optFixedSplitSize, optDisableSplitKV, optPlanForCUDA)
	if err != nil {
		return nil, err
	}
	if err := cfg.required(fn, optHeads, "Hq and Hkv of the decode attention"); err != nil {
		return nil, err
	}
	if err := cfg.required(fn, optPageSize, "tokens per K/V page"); err != nil {
		return nil, err
	}
	if !cfg.has(optSeqlenQ) {
		cfg.seqlenQ = 1
	}
	if cfg.has(optPlanForCUDA) && cfg.has(optWorkers) {
		return nil, validate.ArgErr(fn, "PlanForCUDA/Workers", "at most one of PlanForCUDA(sms) (the GPU's SM count) and Workers(n) (the CPU path's goroutines)",
			fmt.Sprintf("PlanForCUDA(%d) and Workers(%d)", cfg.cudaSMs, cfg.workers))
	}
	if cfg.has(optPlanForCUDA) && cfg.cudaSMs < 1 {
		return nil, validate.ArgErr(fn, "PlanForCUDA", "the GPU's streaming-multiprocessor count, >= 1", cfg.cudaSMs)
	}
	if cfg.fixedSplit > 0 && cfg.disableSplit {
		return nil, validate.ArgErr(fn, "FixedSplitSize/DisableSplitKV", "at most one of FixedSplitSize(n > 0) (a fixed KV split) and DisableSplitKV() (no split)",
			fmt.Sprintf("FixedSplitSize(%d) and DisableSplitKV()", cfg.fixedSplit))
	}
	if err := nodeCheck(fn, "page_table", pageTable, 2, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "seqused_k", seqUsedK, 1, tensor.Int32); err != nil {
		return nil, err
	}
	pt := pageTable.Shape()
	if seqUsedK.Shape()[0] != pt[0] {
		return nil, validate.ArgErr(fn, "seqused_k", fmt.Sprintf("shape [B] = [%d]", pt[0]), seqUsedK.Shape())
	}
	if cfg.hkv < 1 || cfg.hq%cfg.hkv != 0 || !slices.Contains(supportedQheadPerKV, cfg.hq/cfg.hkv) {
		return nil, validate.ArgErr(fn, "num_qo_heads/num_kv_heads", "a ratio in {1, 2, 4, 8, 16}", fmt.Sprintf("%d/%d", cfg.hq, cfg.hkv))
	}
	c := &validate.Checker{Fn: fn}
	c.Need(cfg.seqlenQ >= 1, "seqlen_q", ">= 1", cfg.seqlenQ)
	c.Need(cfg.pageSize >= 1 && cfg.pageSize <= validate.MaxInt32, "page_size", fmt.Sprintf("1 <= page_size <= %d", validate.MaxInt32), cfg.pageSize)
	c.Need(cfg.fixedSplit >= 0 && cfg.fixedSplit <= validate.MaxInt32, "fixed_split_size",
		fmt.Sprintf("0 (automatic) <= fixed_split_size <= %d", validate.MaxInt32), cfg.fixedSplit)
	c.Need(pt[1] >= 1, "page_table", "at least one column", fmt.Sprint(pt))
	validate.PageCapacity(c, pt[1], cfg.pageSize)
	decode.CheckRows(c, pt[0], cfg.seqlenQ, cfg.hq)
	p := plan.DecodeParams{Batch: pt[0], SeqlenQ: cfg.seqlenQ, HQ: cfg.hq, Hkv: cfg.hkv,
		PageSize: cfg.pageSize, Workers: validate.WorkerCount(cfg.workers), FixedSplitPages: cfg.fixedSplit,
		DisableSplit: cfg.disableSplit, MaxPagesPerSeq: pt[1]}
	if cfg.has(optPlanForCUDA) {
		p.Workers, p.Executor = cfg.cudaSMs, plan.CUDAExecutor
	}
	decode.CheckSize(c, p)
	if c.Err != nil {
		return nil, c.Err
	}
	l, err := newDecodeLayout(p)
	if err != nil {
		return nil, validate.WrapArg(fn, "config", err)
	}
	return G.ApplyOp(&decodeSchedOp{l: l}, pageTable, seqUsedK)
}

// decodeAttnOp is the paged decode attention node.
type decodeAttnOp struct {
	opBase
	l        decodeLayout
	sparse   bool
	scale    float64
	blk      int
	layout   PagedLayout
	maxWS    int64 // MaxWorkspaceBytes (0: the default)
	inDtypes []tensor.Dtype
	outShape tensor.Shape
	st       *attnState
	f32      decode.F32 // the float32 path's buffers, guarded by st.mu
	so       *decodeSchedOp
	host     decodeHost // the CUDA path's host side, guarded by st.mu
}

func (op *decodeAttnOp) Arity() int { return len(op.inDtypes) }
func (op *decodeAttnOp) Type() hm.Type {
	dims := []int{3, 4, 4, 2, 1, 1, 3}
	ts := make([]hm.Type, 0, len(op.inDtypes)+1)
	for i, dt := range op.inDtypes {
		ts = append(ts, tt(dims[i], dt))
	}
	return fnType(append(ts, tt(3, op.outDtype()))...)
}

// outDtype is the dtype of the node's value: float32 with float32 q, k, v,
// else BFloat16.
func (op *decodeAttnOp) outDtype() tensor.Dtype {
	if op.inDtypes[0] == tensor.Float32 {
		return tensor.Float32
	}
	return BFloat16
}
func (op *decodeAttnOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.outShape.Clone(), nil
}
func (op *decodeAttnOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "msa.DecodeAttention%+v/%v/%v/%d/%v/%p", op.l.p, op.sparse, op.scale, op.blk, op.layout, op.st)
}
func (op *decodeAttnOp) Hashcode() uint32 { return hashOf(op) }
func (op *decodeAttnOp) String() string   { return fmt.Sprintf("DecodeAttention{sparse=%v}", op.sparse) }

func (op *decodeAttnOp) Do(vals ...G.Value) (G.Value, error) {
	if err := op.executorCheck(plan.CPUExecutor); err != nil {
		return nil, err
	}
	return op.cpu(vals)
}

// executorCheck refuses a schedule planned for another path than run (a
// CUDA-planned split on the CPU path or the reverse), naming both.
func (op *decodeAttnOp) executorCheck(run plan.DecodeExecutor) error {
	planned := op.l.p.Executor
	if planned == run {
		return nil
	}
	how := map[plan.DecodeExecutor]string{plan.CPUExecutor: "DecodeSchedule without PlanForCUDA", plan.CUDAExecutor: "DecodeSchedule with PlanForCUDA(sms)"}
	return validate.ArgErr("DecodeAttention", "schedule", fmt.Sprintf("a schedule planned for the %v path it runs on (%s)", run, how[run]),
		fmt.Sprintf("one planned for the %v path (%s, %d workers)", planned, how[planned], op.l.p.Workers))
}

// cpu runs the node on the CPU path with any valid schedule (the CUDA
// path's host fallback uses it with a CUDA-planned split).
func (op *decodeAttnOp) cpu(vals []G.Value) (G.Value, error) {
	const fn = "DecodeAttention"
	c := &validate.Checker{Fn: fn}
	qd, kd, vd := decodeQKVLayout(c, tv(vals[0]), tv(vals[1]), tv(vals[2]), op.layout, true)
	if c.Err != nil {
		return nil, c.Err
	}
	var q2k tensor.Tensor
	if op.sparse {
		q2k = tv(vals[6])
	}
	m, s, err := op.prepare(c, qd, kd, tv(vals[3]), tv(vals[4]), c.Dense(tv(vals[5]), "schedule"), q2k)
	if err != nil {
		return nil, err
	}
	if isFloat32(qd) != (op.outDtype() == tensor.Float32) {
		// The node's value type follows the dtype it was built with.
		return nil, validate.ArgErr(fn, "q", "a value of the dtype the node was built with, "+validate.DtypeName(op.inDtypes[0]), validate.DtypeName(qd.Dtype()))
	}
	p := op.l.p
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	pool := attn.AcquirePool(p.Workers)
	defer attn.ReleasePool(pool)
	if isFloat32(qd) {
		out, lse := newDecodeOutputs(true, m.Batch*m.SeqlenQ, m.HQ, m.D)
		if err := op.f32.Prepare(fn, m, pool); err != nil {
			return nil, err
		}
		if err := op.f32.Run(fn, m, qd, kd, vd, m.Scale, validate.Backing[float32](out), validate.Backing[float32](lse)); err != nil {
			return nil, err
		}
		op.st.lse = lse
		return out, nil
	}
	if op.st.ws == nil {
		op.st.ws = attn.NewWorkspace(pool.Workers(), m.D)
	}
	run := decodeRun(m, qd, kd, vd, s)
	res := runDecode(&run, op.st.ws, pool, nil, nil)
	op.st.lse = res.LSE
	return res.Out, nil
}

// prepare validates the metadata inputs of a decode attention node
// (already on the host) and unpacks the schedule; CPU and GPU paths share it.
func (op *decodeAttnOp) prepare(c *validate.Checker, qd, kd *tensor.Dense, pt, su tensor.Tensor, sv *tensor.Dense, q2k tensor.Tensor) (*decode.Meta, *plan.DecodeSchedule, error) {
	m, s := new(decode.Meta), new(plan.DecodeSchedule)
	if err := op.prepareInto(c, m, s, qd, kd, pt, su, sv, q2k); err != nil {
		return nil, nil, err
	}
	return m, s, nil
}

// prepareInto is prepare writing the metadata and schedule into m and s
// (storage the caller keeps across runs). The schedule is checked against
// seqused_k unless the schedule node built exactly this value from exactly
// this seqused_k in its last run (decodeSchedOp.built).
func (op *decodeAttnOp) prepareInto(c *validate.Checker, m *decode.Meta, s *plan.DecodeSchedule, qd, kd *tensor.Dense, pt, su tensor.Tensor, sv *tensor.Dense, q2k tensor.Tensor) error {
	const fn = "DecodeAttention"
	p := op.l.p
	args := DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: p.SeqlenQ, MaxSeqlenK: p.MaxPagesPerSeq * p.PageSize,
		BlkKV: op.blk, SoftmaxScale: op.scale, Workers: p.Workers, KVLayout: op.layout, MaxWorkspaceBytes: op.maxWS}
	hkv, ps := op.layout.dims(kd.Shape())
	validateDecodeMetaInto(c, m, &args, false, q2k, qd.Shape()[0], qd.Shape()[1], hkv, qd.Shape()[2], ps, kd.Shape()[0])
	if c.Err != nil {
		return c.Err
	}
	m.Params = p
	c.Dtype(sv, "schedule", tensor.Int32)
	if c.Err != nil {
		return c.Err
	}
	if sv.DataSize() != op.l.len() {
		return validate.ArgErr(fn, "schedule", fmt.Sprintf("a DecodeSchedule value of %d elements", op.l.len()), sv.DataSize())
	}
	v := validate.Int32s(sv)
	op.l.unpackInto(s, v)
	if op.so != nil && op.so.built(v, m.SeqUsed) {
		return nil
	}
	if err := plan.ValidateDecodeSchedule(s, m.SeqUsed, p); err != nil {
		return validate.WrapArg(fn, "schedule", err)
	}
	return nil
}

// DecodeAttention adds paged decode attention: q [B*seqlen_q, Hq, D], k, v
// [num_pages, Hkv, page_size, D] (float8_e4m3fn or bfloat16, or bf16 q
// with fp8 k/v; or all float32, whose value is then float32, computed on
// the float32 prefill's kernels as DecodeAttentionFunc does), the page
// table and seqused_k nodes the schedule was built from, and the schedule
// node. q2k (nil for dense decode) is int32 [Hkv, B*seqlen_q, topK] of
// blocks of blk_kv tokens. Options: BlkKV (absent or 0: the page size),
// SoftmaxScale (absent or 0: DefaultSoftmaxScale(D)), KVLayout (HND, the default, or
// NHD [num_pages, page_size, Hkv, D]), SharedKV (k and v must be
// distinct nodes unless it is given) and MaxWorkspaceBytes (the node's
// partials for the longest sequences its page table allows, checked here;
// absent: DefaultMaxWorkspaceBytes). LSE(node) returns the natural-log LSE
// of the same run.
func DecodeAttention(q, k, v, pageTable, seqUsedK, sched, q2k *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "DecodeAttention"
	cfg, err := applyOptions(fn, opts, optBlkKV, optSoftmaxScale, optSharedKV, optKVLayout, optMaxWorkspaceBytes)
	if err != nil {
		return nil, err
	}
	lc := &validate.Checker{Fn: fn}
	if checkLayout(lc, cfg.layout, true); lc.Err != nil {
		return nil, lc.Err
	}
	blkKV, softmaxScale := cfg.blkKV, cfg.scale
	if err := sameKVErr(fn, k, v, &cfg); err != nil {
		return nil, err
	}
	if sched == nil {
		return nil, validate.ArgErr(fn, "sched", "a DecodeSchedule node", "nil")
	}
	so, ok := sched.Op().(*decodeSchedOp)
	if !ok {
		return nil, validate.ArgErr(fn, "sched", "a node made by DecodeSchedule", nodeDesc(sched))
	}
	if err := nodeCheck(fn, "q", q, 3, BFloat16, Float8E4M3FN, tensor.Float32); err != nil {
		return nil, err
	}
	if err := headDimCheck(fn, q); err != nil {
		return nil, err
	}
	kvDtypes := []tensor.Dtype{BFloat16, Float8E4M3FN}
	if q.Dtype() == tensor.Float32 {
		kvDtypes = []tensor.Dtype{tensor.Float32} // float32 is not mixed with other dtypes
	}
	for _, x := range []struct {
		n    *G.Node
		name string
	}{{k, "k"}, {v, "v"}} {
		if err := nodeCheck(fn, x.name, x.n, 4, kvDtypes...); err != nil {
			return nil, err
		}
	}
	if blkKV < 0 || blkKV > validate.MaxInt32 {
		return nil, validate.ArgErr(fn, "blk_kv", fmt.Sprintf("0 (the page size) <= blk_kv <= %d", validate.MaxInt32), blkKV)
	}
	if err := validate.CheckScalars(fn, softmaxScale, 0, q.Shape()[2]); err != nil {
		return nil, err
	}
	l := so.l
	qs, ks := q.Shape(), k.Shape()
	if hkv, ps := cfg.layout.dims(ks); qs[0] != l.p.Batch*l.p.SeqlenQ || qs[1] != l.p.HQ || hkv != l.p.Hkv || ps != l.p.PageSize {
		return nil, validate.ArgErr(fn, "q/k", fmt.Sprintf("q [%d, %d, D], k %s with Hkv = %d, page_size = %d as planned (%v layout)",
			l.p.Batch*l.p.SeqlenQ, l.p.HQ, cfg.layout.shape("D"), l.p.Hkv, l.p.PageSize, cfg.layout), fmt.Sprintf("q %v, k %v", qs, ks))
	}
	wc := &validate.Checker{Fn: fn}
	if decode.CheckWorkspace(wc, l.p, nil, qs[2], decode.WorkspaceLimit(wc, cfg.maxWorkspace)); wc.Err != nil {
		return nil, wc.Err
	}
	inputs := []*G.Node{q, k, v, pageTable, seqUsedK, sched}
	if q2k != nil {
		if err := nodeCheck(fn, "q2k_indices", q2k, 3, tensor.Int32); err != nil {
			return nil, err
		}
		blk := blkKV
		if blk == 0 {
			blk = l.p.PageSize
		}
		if err := checkProducerBlk(fn, q2k, blk); err != nil {
			return nil, err
		}
		inputs = append(inputs, q2k)
	}
	op := &decodeAttnOp{l: l, sparse: q2k != nil, scale: softmaxScale, blk: blkKV, layout: cfg.layout, maxWS: cfg.maxWorkspace,
		outShape: tensor.Shape{qs[0], qs[1], qs[2]}, st: &attnState{}, so: so}
	for _, n := range inputs {
		if n == nil {
			return nil, validate.ArgErr(fn, "input", "a node", "nil")
		}
		op.inDtypes = append(op.inDtypes, n.Dtype())
	}
	return G.ApplyOp(op, inputs...)
}
