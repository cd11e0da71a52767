package op

import (
	"fmt"
	"slices"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/decode"
	"github.com/sparseattn/msa/op/internal/validate"
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

// validateDecodeMeta checks args.KVLayout and validates the rest of the
// decode metadata (decode.Validate).
func validateDecodeMeta(c *validate.Checker, args *DecodeArgs, fixedCap bool, q2k tensor.Tensor, totalQ, hq, hkv, d, pageSize, numPages int) *decode.Meta {
	return validateDecodeMetaInto(c, new(decode.Meta), args, fixedCap, q2k, totalQ, hq, hkv, d, pageSize, numPages)
}

// validateDecodeMetaInto is validateDecodeMeta writing into m (storage kept
// by the caller across runs: decode.ValidateInto).
func validateDecodeMetaInto(c *validate.Checker, m *decode.Meta, args *DecodeArgs, fixedCap bool, q2k tensor.Tensor, totalQ, hq, hkv, d, pageSize, numPages int) *decode.Meta {
	checkLayout(c, args.KVLayout, true)
	if c.Err != nil {
		return nil
	}
	in := decode.Input{PageTable: args.PageTable, SeqUsedK: args.SeqUsedK, NHD: args.KVLayout == NHD, SeqlenQ: args.SeqlenQ,
		MaxSeqlenK: args.MaxSeqlenK, BlkKV: args.BlkKV, NonCausal: args.NonCausal, SoftmaxScale: args.SoftmaxScale,
		Workers: args.Workers, FixedSplitSize: args.FixedSplitSize, DisableSplitKV: args.DisableSplitKV, MaxWorkspaceBytes: args.MaxWorkspaceBytes}
	return decode.ValidateInto(c, m, &in, fixedCap, q2k, totalQ, hq, hkv, d, pageSize, numPages)
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

// decodePV is the P rounding of a decode with q and v: e4m3 for an FP8 P.V
// (fp8 q and v), else bf16.
func decodePV(qd, vd *tensor.Dense) tile.Round {
	if vd.Dtype() == Float8E4M3FN && qd.Dtype() == Float8E4M3FN {
		return pvRound(Float8E4M3FN)
	}
	return pvRound(BFloat16)
}

// decodeRun binds validated tensors to an attn.Decode.
func decodeRun(m *decode.Meta, qd, kd, vd *tensor.Dense, s *plan.DecodeSchedule) attn.Decode {
	return attn.Decode{
		Q: operand(qd, m.D), K: operand(kd, m.D), V: operand(vd, m.D),
		KV:    attn.KVLayout{Hkv: m.Hkv, Paged: true, PageTable: m.PT, PTCols: m.Cols, PageSize: m.PageSize, NHD: m.NHD},
		Batch: m.Batch, SeqlenQ: m.SeqlenQ, HQ: m.HQ, Hkv: m.Hkv, D: m.D, SeqUsed: m.SeqUsed,
		Scale: float32(m.Scale), PV: decodePV(qd, vd), Sched: s, Q2K: m.Q2K, TopK: m.TopK, BlkKV: m.Blk,
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
		out, lse := newDecodeOutputs(true, m.Batch*m.SeqlenQ, m.HQ, m.D)
		if err := decode.F32Once(fn, m, qd, kd, vd, m.Scale, validate.Backing[float32](out), validate.Backing[float32](lse)); err != nil {
			return nil, err
		}
		return &Result{Out: out, LSE: lse}, nil
	}
	s, err := plan.BuildDecodeSchedule(nil, m.SeqUsed, m.Params)
	if err != nil {
		return nil, validate.WrapArg(fn, "schedule", err)
	}
	p := decodeRun(m, qd, kd, vd, s)
	pool := attn.AcquirePool(m.Params.Workers)
	defer attn.ReleasePool(pool)
	ws := attn.NewWorkspace(pool.Workers(), m.D)
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

// newDecodeOutputs allocates the outputs of a decode call: Out of q's
// precision class (float32 for float32 q, else BFloat16) and the float32
// LSE.
func newDecodeOutputs(f32 bool, rows, hq, d int) (out, lse *tensor.Dense) {
	lse = tensor.New(tensor.WithShape(rows, hq), tensor.WithBacking(make([]float32, rows*hq)))
	if f32 {
		return tensor.New(tensor.WithShape(rows, hq, d), tensor.WithBacking(make([]float32, rows*hq*d))), lse
	}
	return tensor.New(tensor.WithShape(rows, hq, d), tensor.WithBacking(make([]lowp.BFloat16, rows*hq*d))), lse
}
