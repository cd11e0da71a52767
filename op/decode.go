package op

import (
	"fmt"
	"github.com/sparseattn/msa/op/internal/validate"
	"slices"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"gorgonia.org/tensor"
)

// DecodeArgs are the keyword arguments of DecodeAttentionFunc (the
// reference's names in each comment); every field is used. DecodeWrapper.Plan
// takes them inside PlanArgs, with the plan-only arguments.
type DecodeArgs struct {
	// PageTable (page_table): int32 [B, max_num_pages_per_seq].
	PageTable tensor.Tensor
	// KVLayout (FlashInfer's kv_layout) is the layout of k and v: HND
	// [num_pages, Hkv, page_size, D] (the zero value, the reference's) or
	// NHD [num_pages, page_size, Hkv, D].
	KVLayout PagedLayout
	// SeqUsedK (seqused_k): int32 [B] key lengths; query row b*seqlen_q+i
	// sits at position seqused_k[b] - seqlen_q + i.
	SeqUsedK tensor.Tensor
	// SeqlenQ (seqlen_q) >= 1: queries per request.
	SeqlenQ int
	// MaxSeqlenK (max_seqlen_k): 0 derives it from seqused_k (as in
	// prefill); a positive value smaller than a seqused_k entry is an
	// error.
	MaxSeqlenK int
	// BlkKV (blk_kv): tokens per q2k block in sparse decode; 0 means the
	// page size. Unlike the reference, it need not equal the page size.
	BlkKV int
	// NonCausal requests non-causal decode, which (as in the reference) is
	// not implemented.
	NonCausal bool
	// SoftmaxScale: 0 means DefaultSoftmaxScale(D) = 1/sqrt(D).
	SoftmaxScale float64
	// Workers plays the SM count of the split-KV rules; <= 0 uses
	// runtime.GOMAXPROCS(0).
	Workers int
	// FixedSplitSize (fixed_split_size) > 0 forces a KV chunk of that many
	// pages: the batch-invariant mode.
	FixedSplitSize int
	// DisableSplitKV (disable_split_kv) never splits a request's keys
	// (it overrides a FixedSplitSize).
	DisableSplitKV bool
	// MaxWorkspaceBytes caps the bytes of the split-KV partials and the
	// schedule (see DefaultMaxWorkspaceBytes, used when it is 0); a call or
	// plan that would need more is an *ArgError before anything is
	// allocated.
	MaxWorkspaceBytes int64
}

// PlanArgs are the keyword arguments of DecodeWrapper.Plan (the
// reference's SparseDecodePagedAttentionWrapper.plan): the run-time
// arguments shared with DecodeAttentionFunc plus those only a plan has,
// because it runs before q, k and v exist. Every field is used.
type PlanArgs struct {
	// DecodeArgs holds page_table, seqused_k, seqlen_q, max_seqlen_k and
	// the other arguments of DecodeAttentionFunc. Its SoftmaxScale is the
	// planned scale that Run uses when given 0.
	DecodeArgs
	// NumQOHeads, NumKVHeads, HeadDim (num_qo_heads, num_kv_heads,
	// head_dim): Hq, Hkv and D of the q and k that Run will get; required
	// (the reference's head_dim default of 128 is not assumed).
	NumQOHeads, NumKVHeads, HeadDim int
	// EnableCUDAGraph (enable_cuda_graph) sizes every buffer from the
	// shapes only, so they never change between steps.
	EnableCUDAGraph bool
}

// decodeMeta is validated decode metadata (everything but Q/K/V).
type decodeMeta struct {
	batch, seqlenQ, hkv, hq, d int
	pageSize, cols, numPages   int
	blk                        int
	layout                     PagedLayout
	pt, seqused, q2k           []int32
	topK                       int
	scale                      float64
	params                     plan.DecodeParams
}

// pageTableArgs checks that pageTable and seqUsedK are int32 tensors of
// ranks 2 ([B, max_num_pages_per_seq]) and 1 ([B]), both required.
func pageTableArgs(c *validate.Checker, pageTable, seqUsedK tensor.Tensor) (pt, su *tensor.Dense) {
	pt = c.Dense(pageTable, "page_table")
	c.Dtype(pt, "page_table", tensor.Int32)
	c.Rank(pt, "page_table", "[B, max_num_pages_per_seq]", 2)
	su = c.Dense(seqUsedK, "seqused_k")
	c.Dtype(su, "seqused_k", tensor.Int32)
	c.Rank(su, "seqused_k", "[B]", 1)
	return pt, su
}

// validateDecodeMeta mirrors _validate_sparse_decode_inputs for the
// metadata, with this package's extensions (any page size, any
// qhead_per_kv in {1,2,4,8,16}, index range checks).
// fixedCap is enable_cuda_graph (Plan only).
func validateDecodeMeta(c *validate.Checker, args *DecodeArgs, fixedCap bool, q2k tensor.Tensor, totalQ, hq, hkv, d, pageSize, numPages int) *decodeMeta {
	m := &decodeMeta{hq: hq, hkv: hkv, d: d, pageSize: pageSize, numPages: numPages, layout: args.KVLayout}
	checkLayout(c, args.KVLayout, true)
	if c.Err != nil {
		return nil
	}
	if args.NonCausal {
		c.Fail("causal", "true (decode attention currently supports only causal=True)", false)
		return nil
	}
	pt, su := pageTableArgs(c, args.PageTable, args.SeqUsedK)
	if c.Err != nil {
		return nil
	}
	m.batch, m.cols = pt.Shape()[0], pt.Shape()[1]
	c.Need(m.cols >= 1, "page_table", "at least one column", validate.ShapeStr(pt))
	pageCapacity(c, m.cols, pageSize)
	c.Need(su.Shape()[0] == m.batch, "seqused_k", fmt.Sprintf("shape [B] = [%d]", m.batch), validate.ShapeStr(su))
	c.Need(args.SeqlenQ > 0, "seqlen_q", "a positive value", args.SeqlenQ)
	c.Need(args.MaxSeqlenK >= 0, "max_seqlen_k", "0 (derived from seqused_k) or a positive value", args.MaxSeqlenK)
	if c.Err != nil {
		return nil
	}
	checkDecodeRows(c, m.batch, args.SeqlenQ, hq)
	if c.Err != nil {
		return nil
	}
	m.seqlenQ = args.SeqlenQ
	if totalQ >= 0 {
		c.Need(totalQ == m.batch*m.seqlenQ, "q", fmt.Sprintf("[B * seqlen_q, Hq, D] with B * seqlen_q = %d * %d = %d", m.batch, m.seqlenQ, m.batch*m.seqlenQ), fmt.Sprintf("q.shape[0] = %d", totalQ))
	}
	m.pt, m.seqused = validate.Int32s(pt), validate.Int32s(su)
	for b, x := range m.seqused {
		if x < 0 || int(x) > m.cols*pageSize {
			c.Fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("0 <= seqused_k <= max_num_pages_per_seq * page_size = %d", m.cols*pageSize), x)
			return nil
		}
		if args.MaxSeqlenK > 0 && int(x) > args.MaxSeqlenK {
			c.Fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("<= max_seqlen_k = %d", args.MaxSeqlenK), x)
			return nil
		}
	}
	if c.Err != nil {
		return nil
	}
	checkPages(c, m.pt, m.cols, pageSize, m.seqused, numPages)
	m.blk = args.BlkKV
	if m.blk == 0 {
		m.blk = pageSize
	}
	c.Need(m.blk >= 1 && m.blk <= validate.MaxInt32, "blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", validate.MaxInt32), m.blk)
	c.Need(args.FixedSplitSize >= 0 && args.FixedSplitSize <= validate.MaxInt32, "fixed_split_size",
		fmt.Sprintf("0 (automatic) <= fixed_split_size <= %d", validate.MaxInt32), args.FixedSplitSize)
	m.params = plan.DecodeParams{
		Batch: m.batch, SeqlenQ: m.seqlenQ, HQ: hq, Hkv: hkv, PageSize: pageSize,
		Workers: workers(args.Workers), FixedSplitPages: args.FixedSplitSize, DisableSplit: args.DisableSplitKV,
		MaxPagesPerSeq: m.cols, FixedCapacity: fixedCap,
	}
	checkDecodeSize(c, m.params)
	checkDecodeWorkspace(c, m.params, m.seqused, d, workspaceLimit(c, args.MaxWorkspaceBytes))
	if validate.Present(q2k) && c.Err == nil {
		qd := c.Dense(q2k, "q2k_indices")
		c.Dtype(qd, "q2k_indices", tensor.Int32)
		c.Rank(qd, "q2k_indices", "[Hkv, total_q, topK]", 3)
		if c.Err != nil {
			return nil
		}
		s := qd.Shape()
		c.Need(s[0] == hkv && s[1] == m.batch*m.seqlenQ && s[2] >= 1 && s[2] <= maxTopK, "q2k_indices",
			fmt.Sprintf("shape [Hkv = %d, total_q = %d, 1 <= topK <= %d]", hkv, m.batch*m.seqlenQ, maxTopK), validate.ShapeStr(qd))
		if c.Err != nil {
			return nil
		}
		m.q2k, m.topK = validate.Int32s(qd), s[2]
		checkDecodeQ2K(c, m)
	}
	m.scale = validate.ResolveScale(c, args.SoftmaxScale, d)
	return m
}

// checkDecodeQ2K rejects sparse-decode block ids outside the request's
// blocks and duplicates within one list.
func checkDecodeQ2K(c *validate.Checker, m *decodeMeta) {
	totalQ := m.batch * m.seqlenQ
	for h := 0; h < m.hkv && c.Err == nil; h++ {
		for gq := 0; gq < totalQ && c.Err == nil; gq++ {
			b := gq / m.seqlenQ
			nb := validate.CeilDiv(int(m.seqused[b]), m.blk)
			list := m.q2k[(h*totalQ+gq)*m.topK : (h*totalQ+gq+1)*m.topK]
			for k, j := range list {
				if j < -1 || int(j) >= nb {
					c.Fail(fmt.Sprintf("q2k_indices[%d, %d, %d]", h, gq, k),
						fmt.Sprintf("-1 or a block id in [0, %d) for request %d (ceil(seqused_k = %d / blk_kv = %d) blocks)", nb, b, m.seqused[b], m.blk), j)
					return
				}
				for _, x := range list[:k] {
					if j >= 0 && x == j {
						c.Fail(fmt.Sprintf("q2k_indices[%d, %d, %d]", h, gq, k), "no duplicate block ids in one list", j)
						return
					}
				}
			}
		}
	}
}

// The q dtypes of decode: the low-precision ones everywhere, float32 in the
// eager decode and the wrapper.
var (
	decodeQDtypes    = []tensor.Dtype{BFloat16, Float8E4M3FN}
	decodeQDtypesF32 = []tensor.Dtype{BFloat16, Float8E4M3FN, tensor.Float32}
)

// decodeQKV validates q, k, v of a decode call with HND pages and returns
// their shapes.
func decodeQKV(c *validate.Checker, q, k, v tensor.Tensor) (qd, kd, vd *tensor.Dense) {
	return decodeQKVLayout(c, q, k, v, HND, false)
}

// decodeQKVLayout validates q, k, v of a decode call with pages of layout l
// and returns their shapes. f32 accepts float32 q, k, v (all three) as well
// (every decode entry point of the CPU path; the CUDA kernels take the
// low-precision dtypes only).
func decodeQKVLayout(c *validate.Checker, q, k, v tensor.Tensor, l PagedLayout, f32 bool) (qd, kd, vd *tensor.Dense) {
	qd, kd, vd = c.Dense(q, "q"), c.Dense(k, "k"), c.Dense(v, "v")
	c.Rank(qd, "q", "[total_q, Hq, D]", 3)
	c.Rank(kd, "k", l.shape("D"), 4)
	c.Rank(vd, "v", l.shape("D"), 4)
	if c.Err == nil && f32 && isFloat32(qd) {
		if !isFloat32(kd) || !isFloat32(vd) {
			c.Fail("q, k, v", "float32 k and v with float32 q (float32 is not mixed with other dtypes)",
				"q float32, k "+validate.DtypeName(kd.Dtype())+", v "+validate.DtypeName(vd.Dtype()))
		}
	} else {
		dts := decodeQDtypes
		if f32 {
			dts = decodeQDtypesF32
		}
		c.Dtype(qd, "q", dts...)
		c.Dtype(kd, "k", BFloat16, Float8E4M3FN)
		c.Dtype(vd, "v", BFloat16, Float8E4M3FN)
	}
	if c.Err != nil {
		return
	}
	// Checks below format their messages only on failure: Run is a hot path.
	mixed := qd.Dtype() == BFloat16 && kd.Dtype() == Float8E4M3FN && vd.Dtype() == Float8E4M3FN
	if !mixed && (qd.Dtype() != kd.Dtype() || kd.Dtype() != vd.Dtype()) {
		c.Fail("q, k, v", "one dtype (float8_e4m3fn, bfloat16 or, eager, float32), or bf16 q with fp8 k/v", validate.DtypeName(qd.Dtype())+", "+validate.DtypeName(kd.Dtype())+", "+validate.DtypeName(vd.Dtype()))
		return
	}
	if !kd.Shape().Eq(vd.Shape()) {
		c.Fail("k, v", "the same shape", "k "+validate.ShapeStr(kd)+", v "+validate.ShapeStr(vd))
		return
	}
	d := qd.Shape()[2]
	if !slices.Contains(supportedHeadDims, d) || kd.Shape()[3] != d {
		c.Fail("q, k", fmt.Sprintf("the same head dimension D in %v", supportedHeadDims), fmt.Sprintf("q D = %d, k D = %d", d, kd.Shape()[3]))
		return
	}
	hkv, ps := l.dims(kd.Shape())
	if checkHeads(c, "k", qd, kd, hkv, false, func() string {
		return fmt.Sprintf("the paged %v layout %s (Hkv = %s%s)", l, l.shape("D"), l.hkvDim(), l.other())
	}); c.Err != nil {
		return
	}
	if ps < 1 {
		c.Fail("k", "page_size >= 1", validate.ShapeStr(kd))
	}
	return
}

// decodeRun binds validated tensors to an attn.Decode.
func decodeRun(m *decodeMeta, qd, kd, vd *tensor.Dense, s *plan.DecodeSchedule) attn.Decode {
	pv := BFloat16
	if vd.Dtype() == Float8E4M3FN && qd.Dtype() == Float8E4M3FN {
		pv = Float8E4M3FN
	}
	return attn.Decode{
		Q: operand(qd, m.d), K: operand(kd, m.d), V: operand(vd, m.d),
		KV:    attn.KVLayout{Hkv: m.hkv, Paged: true, PageTable: m.pt, PTCols: m.cols, PageSize: m.pageSize, NHD: m.layout == NHD},
		Batch: m.batch, SeqlenQ: m.seqlenQ, HQ: m.hq, Hkv: m.hkv, D: m.d, SeqUsed: m.seqused,
		Scale: float32(m.scale), PV: pvRound(pv), Sched: s, Q2K: m.q2k, TopK: m.topK, BlkKV: m.blk,
	}
}

// DecodeAttentionFunc runs paged decode attention (the reference's
// sparse_decode_atten_func): q [B*seqlen_q, Hq, D], k, v [num_pages, Hkv,
// page_size, D], all float8_e4m3fn or all bfloat16 (or bf16 q with fp8
// k/v), or all float32. q2kIndices nil selects dense decode; [Hkv,
// B*seqlen_q, topK] selects sparse decode over blocks of args.BlkKV tokens.
// Causal only. The result's Out is BFloat16 [B*seqlen_q, Hq, D] (float32
// with float32 q, k, v, computed without low-precision rounding on the
// float32 prefill's kernels, in both layouts) and LSE the natural-log LSE
// [B*seqlen_q, Hq] float32 (always set).
func DecodeAttentionFunc(q, k, v, q2kIndices tensor.Tensor, args DecodeArgs) (*Result, error) {
	const fn = "DecodeAttentionFunc"
	c := &validate.Checker{Fn: fn}
	checkLayout(c, args.KVLayout, true)
	if c.Err != nil {
		return nil, c.Err
	}
	qd, kd, vd := decodeQKVLayout(c, q, k, v, args.KVLayout, true)
	if c.Err != nil {
		return nil, c.Err
	}
	hkv, ps := args.KVLayout.dims(kd.Shape())
	m := validateDecodeMeta(c, &args, false, q2kIndices, qd.Shape()[0], qd.Shape()[1], hkv, qd.Shape()[2], ps, kd.Shape()[0])
	if c.Err != nil {
		return nil, c.Err
	}
	if isFloat32(qd) {
		out, lse := newDecodeOutputs(true, m.batch*m.seqlenQ, m.hq, m.d)
		if err := decodeF32(fn, m, qd, kd, vd, m.scale, validate.Backing[float32](out), validate.Backing[float32](lse)); err != nil {
			return nil, err
		}
		return &Result{Out: out, LSE: lse}, nil
	}
	s, err := plan.BuildDecodeSchedule(nil, m.seqused, m.params)
	if err != nil {
		return nil, validate.WrapArg(fn, "schedule", err)
	}
	p := decodeRun(m, qd, kd, vd, s)
	pool := attn.AcquirePool(m.params.Workers)
	defer attn.ReleasePool(pool)
	ws := attn.NewWorkspace(pool.Workers(), m.d)
	return runDecode(&p, ws, pool, nil, nil), nil
}

// runDecode executes a bound decode call into out/lse (allocated when nil).
func runDecode(p *attn.Decode, ws *attn.Workspace, pool *attn.Pool, out, lse *tensor.Dense) *Result {
	rows := p.Batch * p.SeqlenQ
	if out == nil {
		out = tensor.New(tensor.WithShape(rows, p.HQ, p.D), tensor.WithBacking(make([]lowp.BFloat16, rows*p.HQ*p.D)))
	}
	if lse == nil {
		lse = tensor.New(tensor.WithShape(rows, p.HQ), tensor.WithBacking(make([]float32, rows*p.HQ)))
	}
	o := attn.Output{O: validate.Backing[lowp.BFloat16](out), LSE: validate.Backing[float32](lse)}
	attn.RunDecode(p, ws, pool, &o)
	return &Result{Out: out, LSE: lse}
}
