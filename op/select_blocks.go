package op

import (
	"errors"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file holds the one-call forms of the common case: block selection
// (scores -> top-k -> k2q CSR -> forward schedule) and block-sparse
// attention with its own selection, as graph constructors (SelectBlocks,
// BlockSparseAttention) and eager functions (SelectBlocksFunc,
// BlockSparseAttentionFunc) taking the same options. The building blocks
// they chain (BlockScores, TopKBlocks, K2QCSR, FwdSchedule,
// SparseAttention and their eager forms) stay for the other cases: a
// caller-made q2k_indices, paged or NVFP4 K/V, a schedule reused across
// layers.

// Options of each stage of the one-call forms.
var (
	scoreOpts     = []optID{optMaxSeqlenK, optBlkKV, optCausal, optSoftmaxScale, optReduce, optWorkers}
	topKOpts      = []optID{optTopK, optKeepFirst, optKeepLast}
	csrOpts       = []optID{optBlkKV, optMaxSeqlenK}
	schedOpts     = []optID{optWorkers}
	selectOpts    = []optID{optTopK, optMaxSeqlenK, optBlkKV, optCausal, optSoftmaxScale, optReduce, optWorkers, optKeepFirst, optKeepLast}
	attnLayerOpts = []optID{optCausal, optSoftmaxScale, optTemperature, optPartialDtype, optMMADtypes, optWorkers, optSharedKV}
)

// need is a required option of a one-call form and why it is required.
type need struct {
	id  optID
	why string
}

// applyNeeding is applyOptions for fn followed by the check that every
// option of needs is given.
func applyNeeding(fn string, opts []Option, allowed []optID, needs ...need) (attnConfig, error) {
	cfg, err := applyOptions(fn, opts, allowed...)
	if err != nil {
		return cfg, err
	}
	for _, n := range needs {
		if err := cfg.required(fn, n.id, n.why); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// union returns the option kinds of a and then those of b not in a.
func union(a, b []optID) []optID {
	out := slices.Clone(a)
	for _, id := range b {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// pick returns the options of opts whose kind is in ids, in order.
func pick(opts []Option, ids []optID) []Option {
	var out []Option
	for _, o := range opts {
		if slices.Contains(ids, o.id) {
			out = append(out, o)
		}
	}
	return out
}

// inStage names the stage of a one-call form in an error of the building
// block it called: "SelectBlocks (K2QCSR)". Other errors pass unchanged.
func inStage(fn string, err error) error {
	var ae *ArgError
	if errors.As(err, &ae) {
		e := *ae
		e.Func = fn + " (" + ae.Func + ")"
		return &e
	}
	var ne *NotImplementedError
	if errors.As(err, &ne) {
		e := *ne
		e.Func = fn + " (" + ne.Func + ")"
		return &e
	}
	return err
}

// SelectBlocks adds the whole block selection of a block-sparse attention
// to the graph of q [total_q, Hq, D] and k [total_k, Hkv, D] (BFloat16,
// Float8E4M3FN or float32) with cuQ, cuK int32 [B+1]: BlockScores, then
// TopKBlocks, then K2QCSR, then FwdSchedule with QheadPerKV = Hq / Hkv. It
// returns the CSR and schedule nodes SparseAttention takes. Options: TopK
// and MaxSeqlenK (required), BlkKV, Causal, SoftmaxScale, Reduce, Workers,
// KeepFirst, KeepLast, each with its meaning on the stage that takes it.
// An error of a stage names SelectBlocks and the stage.
func SelectBlocks(q, k, cuQ, cuK *G.Node, opts ...Option) (csr, sched *G.Node, err error) {
	const fn = "SelectBlocks"
	if _, err := applyNeeding(fn, opts, selectOpts, need{optTopK, "the blocks each query selects"},
		need{optMaxSeqlenK, "it fixes the scores' and the CSR's shapes"}); err != nil {
		return nil, nil, err
	}
	scores, err := BlockScores(q, k, cuQ, cuK, pick(opts, scoreOpts)...)
	if err != nil {
		return nil, nil, inStage(fn, err)
	}
	q2k, err := TopKBlocks(scores, pick(opts, topKOpts)...)
	if err != nil {
		return nil, nil, inStage(fn, err)
	}
	// BlockScores has checked that Hkv = k.shape[1] divides Hq.
	return csrSchedule(fn, q, k, q2k, cuQ, cuK, opts)
}

// csrSchedule adds K2QCSR and FwdSchedule (QheadPerKV = Hq / Hkv, which
// the caller has checked) after a q2k_indices node, with the options of
// opts that apply to them: the stages the one-call graph forms share.
func csrSchedule(fn string, q, k, q2k, cuQ, cuK *G.Node, opts []Option) (csr, sched *G.Node, err error) {
	if csr, err = K2QCSR(q2k, cuQ, cuK, pick(opts, csrOpts)...); err != nil {
		return nil, nil, inStage(fn, err)
	}
	qpk := q.Shape()[1] / k.Shape()[1]
	if sched, err = FwdSchedule(csr, cuQ, cuK, append(pick(opts, schedOpts), QheadPerKV(qpk))...); err != nil {
		return nil, nil, inStage(fn, err)
	}
	return csr, sched, nil
}

// attend adds SparseAttention over csr and sched with the options of opts
// that apply to it, naming fn in its errors.
func attend(fn string, q, k, v, csr, sched, cuQ, cuK *G.Node, opts []Option) (*G.Node, error) {
	out, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, pick(opts, attnLayerOpts)...)
	if err != nil {
		return nil, inStage(fn, err)
	}
	return out, nil
}

// BlockSparseAttention adds a block-sparse attention layer that selects
// its own blocks: SelectBlocks on q and k, then SparseAttention of q, k, v
// [total_k, Hkv, D] (dense K/V; for paged or NVFP4 K/V chain the building
// blocks). The node's value is SparseAttention's (float32 and
// differentiable with float32 q, k, v; LSE and TemperatureLSE read its side
// results). Options: those of SelectBlocks (TopK and MaxSeqlenK required)
// and Temperature, PartialDtype, MMADtypes, SharedKV; Causal, SoftmaxScale
// and Workers apply to the selection and the attention alike.
func BlockSparseAttention(q, k, v, cuQ, cuK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "BlockSparseAttention"
	if _, err := applyOptions(fn, opts, union(selectOpts, attnLayerOpts)...); err != nil {
		return nil, err
	}
	csr, sched, err := SelectBlocks(q, k, cuQ, cuK, pick(opts, selectOpts)...)
	if err != nil {
		return nil, inStage(fn, err)
	}
	return attend(fn, q, k, v, csr, sched, cuQ, cuK, opts)
}

// Selection is the block selection of SelectBlocksFunc: q2k_indices, the
// k2q CSR built from it and its forward schedule, with the arguments
// SparseAttentionFunc needs to use them (Args).
type Selection struct {
	// Q2K is q2k_indices int32 [Hkv, total_q, topK] (TopKBlocksFunc's).
	Q2K *tensor.Dense
	// RowPtr and QIndices are the k2q CSR (K2QCSRFunc's).
	RowPtr, QIndices *tensor.Dense
	// Schedule is the forward schedule (FwdScheduleFunc's); nil
	// for float32 q and k, whose kernels split the work themselves.
	Schedule *Schedule
	// TopK and BlkKV are the selection's topK and blk_kv; Causal whether
	// the scores were causal.
	TopK, BlkKV int
	Causal      bool
	cuQ, cuK    tensor.Tensor
	workers     int
}

// Args returns the SparseArgs of an attention over this selection: the
// cu_seqlens, BlkKV, Causal, Schedule and Workers the selection was made
// with. Set the other fields (SoftmaxScale, PartialDtype, ...) on the
// result.
func (s *Selection) Args() SparseArgs {
	return SparseArgs{CuSeqlensQ: s.cuQ, CuSeqlensK: s.cuK, BlkKV: s.BlkKV, Causal: s.Causal,
		Schedule: s.Schedule, Workers: s.workers}
}

// SelectBlocksFunc is the eager form of SelectBlocks: BlockScoresFunc,
// TopKBlocksFunc, K2QCSRFunc and FwdScheduleFunc in one call,
// with SelectBlocks' options (TopK required; MaxSeqlenK absent: derived
// from cu_seqlens_k). An error of a stage names SelectBlocksFunc and the
// stage.
func SelectBlocksFunc(q, k, cuSeqlensQ, cuSeqlensK tensor.Tensor, opts ...Option) (*Selection, error) {
	const fn = "SelectBlocksFunc"
	cfg, err := applyNeeding(fn, opts, selectOpts, need{optTopK, "the blocks each query selects"})
	if err != nil {
		return nil, err
	}
	blk := cfg.blkKV
	if blk == 0 {
		blk = 128
	}
	scores, err := BlockScoresFunc(q, k, cuSeqlensQ, cuSeqlensK, BlockScoreConfig{BlkKV: blk, MaxSeqlenK: cfg.maxSeqlenK,
		Causal: cfg.causal, SoftmaxScale: cfg.scale, Reduce: cfg.reduce, Workers: cfg.workers})
	if err != nil {
		return nil, inStage(fn, err)
	}
	q2k, err := TopKBlocksFunc(scores, cfg.topK, TopKConfig{KeepFirst: cfg.keepFirst, KeepLast: cfg.keepLast})
	if err != nil {
		return nil, inStage(fn, err)
	}
	rp, qi, err := K2QCSRFunc(q2k, cuSeqlensQ, cuSeqlensK, blk)
	if err != nil {
		return nil, inStage(fn, err)
	}
	s := &Selection{Q2K: q2k, RowPtr: rp, QIndices: qi, TopK: cfg.topK, BlkKV: blk, Causal: cfg.causal,
		cuQ: cuSeqlensQ, cuK: cuSeqlensK, workers: cfg.workers}
	if isFloat32(q) {
		return s, nil
	}
	// BlockScoresFunc has checked q and k: rank 3, Hkv dividing Hq.
	qs, ks := q.Shape(), k.Shape()
	s.Schedule, err = FwdScheduleFunc(rp, qi, ScheduleArgs{CuSeqlensQ: cuSeqlensQ, CuSeqlensK: cuSeqlensK,
		TotalQ: qs[0], TopK: cfg.topK, QheadPerKV: qs[1] / ks[1], BlkKV: blk, Workers: cfg.workers})
	if err != nil {
		return nil, inStage(fn, err)
	}
	return s, nil
}

// BlockSparseAttentionFunc is the eager form of BlockSparseAttention:
// SelectBlocksFunc on q and k, then SparseAttentionFunc of q, k, v over the
// selection, with BlockSparseAttention's options (TopK required;
// Temperature also returns the temperature LSE). SharedKV is a graph
// option (it has no eager meaning) and is refused here.
func BlockSparseAttentionFunc(q, k, v, cuSeqlensQ, cuSeqlensK tensor.Tensor, opts ...Option) (*Result, error) {
	const fn = "BlockSparseAttentionFunc"
	eagerAttn := slices.DeleteFunc(slices.Clone(attnLayerOpts), func(id optID) bool { return id == optSharedKV })
	cfg, err := applyOptions(fn, opts, union(selectOpts, eagerAttn)...)
	if err != nil {
		return nil, err
	}
	sel, err := SelectBlocksFunc(q, k, cuSeqlensQ, cuSeqlensK, pick(opts, selectOpts)...)
	if err != nil {
		return nil, inStage(fn, err)
	}
	args := sel.Args()
	args.SoftmaxScale, args.Temperature, args.ReturnTemperatureLSE = cfg.scale, cfg.temperature, cfg.has(optTemperature)
	args.PartialDtype, args.QKDtype, args.PVDtype = cfg.partial, cfg.qk, cfg.pv
	res, err := SparseAttentionFunc(q, k, v, sel.RowPtr, sel.QIndices, sel.TopK, args)
	if err != nil {
		return nil, inStage(fn, err)
	}
	return res, nil
}
