package op

import (
	"fmt"
	"hash"
	"slices"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/op/internal/blocks"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file holds dense varlen prefill attention (every key of the
// sequence, causal or not) on the sparse kernels: each query selects every
// block it can see, so a model whose layers mix dense and sparse attention
// uses one package and one numerics. A sequence may have at most
// validate.MaxTopK * blk_kv keys (64 blocks: 8192 keys with the default blk_kv of
// 128). Dense paged decode is DecodeAttention and DecodeAttentionFunc
// without q2k_indices.

// Options of the dense attention layer, eager and graph (which adds
// SharedKV, a graph option).
var (
	denseEagerOpts = []optID{optMaxSeqlenK, optBlkKV, optCausal, optSoftmaxScale, optTemperature, optPartialDtype, optMMADtypes, optWorkers}
	denseOpts      = append(slices.Clone(denseEagerOpts), optSharedKV)
)

// denseTopK returns the topK that selects every block of sequences of at
// most maxSeqK keys, or an *ArgError naming max_seqlen_k when that exceeds
// validate.MaxTopK blocks.
func denseTopK(fn string, maxSeqK, blk int) (int, error) {
	topK := max(1, validate.CeilDiv(maxSeqK, blk))
	if topK > validate.MaxTopK {
		return 0, validate.ArgErr(fn, "max_seqlen_k", fmt.Sprintf("at most %d * blk_kv = %d keys per sequence (dense attention selects every block, at most %d)", validate.MaxTopK, validate.MaxTopK*blk, validate.MaxTopK),
			maxSeqK)
	}
	return topK, nil
}

// DenseAttentionFunc runs dense varlen prefill attention: each query of
// sequence b attends every key of that sequence (with Causal(), those at
// or before its bottom-right aligned position). q is [total_q, Hq, D], k
// and v [total_k, Hkv, D] (BFloat16, Float8E4M3FN, or float32 for all
// three), cuSeqlensQ and cuSeqlensK int32 [B+1]; the result is
// SparseAttentionFunc's. Options: BlkKV (the kernels' key block, default
// 128), Causal, SoftmaxScale, Temperature (also returns the temperature
// LSE), PartialDtype, MMADtypes, Workers, MaxSeqlenK (absent: derived; a
// given value is checked against the key lengths). A sequence may have at
// most 64 * blk_kv keys.
func DenseAttentionFunc(q, k, v, cuSeqlensQ, cuSeqlensK tensor.Tensor, opts ...Option) (*Result, error) {
	const fn = "DenseAttentionFunc"
	cfg, err := applyOptions(fn, opts, denseEagerOpts...)
	if err != nil {
		return nil, err
	}
	c := &validate.Checker{Fn: fn}
	qd, kd := c.Dense(q, "q"), c.Dense(k, "k")
	c.Rank(qd, "q", "[total_q, Hq, D]", 3)
	c.Rank(kd, "k", "[total_k, Hkv, D]", 3)
	if c.Err != nil {
		return nil, c.Err
	}
	cuQ := validate.CuSeqlens(c, cuSeqlensQ, "cu_seqlens_q", qd.Shape()[0], "total_q")
	cuK := validate.CuSeqlens(c, cuSeqlensK, "cu_seqlens_k", kd.Shape()[0], "total_k")
	c.Need(len(cuK) == len(cuQ), "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(cuQ)), len(cuK))
	blk := cfg.blkKV
	if blk == 0 {
		blk = 128
	}
	c.Need(blk >= 1 && blk <= 128, "blk_kv", "1 <= blk_kv <= 128", blk)
	if c.Err != nil {
		return nil, c.Err
	}
	seqK := make([]int32, len(cuK)-1)
	maxSeqK := 0
	for b := range seqK {
		seqK[b] = cuK[b+1] - cuK[b]
		maxSeqK = max(maxSeqK, int(seqK[b]))
	}
	topK, err := denseTopK(fn, maxSeqK, blk)
	if err != nil {
		return nil, err
	}
	hkv, totalQ := kd.Shape()[1], qd.Shape()[0]
	if _, err := valueSize(fn, "q", "q2k_indices Hkv * total_q * topK", hkv, totalQ, topK); err != nil {
		return nil, err
	}
	q2k := make([]int32, hkv*totalQ*topK)
	blocks.All(q2k, cuQ, seqK, hkv, topK, blk, cfg.causal)
	rp, qi, err := K2QCSRFunc(tensor.New(tensor.WithShape(hkv, totalQ, topK), tensor.WithBacking(q2k)), cuSeqlensQ, cuSeqlensK, blk)
	if err != nil {
		return nil, inStage(fn, err)
	}
	args := SparseArgs{CuSeqlensQ: cuSeqlensQ, CuSeqlensK: cuSeqlensK, MaxSeqlenK: cfg.maxSeqlenK, BlkKV: blk, Causal: cfg.causal,
		SoftmaxScale: cfg.scale, Temperature: cfg.temperature, ReturnTemperatureLSE: cfg.has(optTemperature),
		PartialDtype: cfg.partial, QKDtype: cfg.qk, PVDtype: cfg.pv, Workers: cfg.workers}
	res, err := SparseAttentionFunc(q, k, v, rp, qi, topK, args)
	if err != nil {
		return nil, inStage(fn, err)
	}
	return res, nil
}

// allBlocksOp makes the q2k_indices of dense attention in a graph from
// cu_seqlens_q and cu_seqlens_k.
type allBlocksOp struct {
	opBase
	hkv, totalQ, topK, blk int
	causal                 bool
}

func (op *allBlocksOp) Arity() int { return 2 }
func (op *allBlocksOp) Type() hm.Type {
	return fnType(tt(1, tensor.Int32), tt(1, tensor.Int32), tt(3, tensor.Int32))
}
func (op *allBlocksOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.hkv, op.totalQ, op.topK}, nil
}
func (op *allBlocksOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "msa.AllBlocks%+v", *op) }
func (op *allBlocksOp) Hashcode() uint32      { return hashOf(op) }
func (op *allBlocksOp) String() string {
	return fmt.Sprintf("AllBlocks{blk_kv=%d, causal=%v}", op.blk, op.causal)
}

// blockKV and scoredCausal let K2QCSR and SparseAttention compare their
// blk_kv and Causal with the ones the blocks were listed for.
func (op *allBlocksOp) blockKV() (int, string) { return op.blk, "DenseAttention's block list" }
func (op *allBlocksOp) scoredCausal() scoredKey {
	return scoredKey{true, op.causal}
}

// DiffWRT reports no differentiable input: the block list is integer data.
func (op *allBlocksOp) DiffWRT(n int) []bool { return noDiff(n) }

// DoDiff does nothing: the block list's inputs are integer data.
func (op *allBlocksOp) DoDiff(G.ExecutionContext, G.Nodes, *G.Node) error { return nil }

func (op *allBlocksOp) Do(vals ...G.Value) (G.Value, error) {
	const fn = "DenseAttention"
	if len(vals) != 2 {
		return nil, validate.ArgErr(fn, "inputs", "2 values", len(vals))
	}
	c := &validate.Checker{Fn: fn}
	cuQ := validate.CuSeqlens(c, tv(vals[0]), "cu_seqlens_q", op.totalQ, "total_q")
	cuK := validate.CuSeqlens(c, tv(vals[1]), "cu_seqlens_k", -1, "")
	c.Need(len(cuK) == len(cuQ), "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(cuQ)), len(cuK))
	if c.Err != nil {
		return nil, c.Err
	}
	seqK := make([]int32, len(cuK)-1)
	for b := range seqK {
		seqK[b] = cuK[b+1] - cuK[b]
		if int(seqK[b]) > op.topK*op.blk {
			return nil, validate.ArgErr(fn, fmt.Sprintf("cu_seqlens_k (sequence %d)", b),
				fmt.Sprintf("at most %d keys (MaxSeqlenK given at graph construction, rounded up to blocks of %d)", op.topK*op.blk, op.blk), seqK[b])
		}
	}
	q2k := make([]int32, op.hkv*op.totalQ*op.topK)
	blocks.All(q2k, cuQ, seqK, op.hkv, op.topK, op.blk, op.causal)
	return tensor.New(tensor.WithShape(op.hkv, op.totalQ, op.topK), tensor.WithBacking(q2k)), nil
}

// DenseAttention adds dense varlen prefill attention to the graph (see
// DenseAttentionFunc): a block list selecting every block each query can
// see, K2QCSR, FwdSchedule and SparseAttention. q is [total_q, Hq, D], k
// and v [total_k, Hkv, D], cuQ and cuK int32 [B+1]; the node's value is
// SparseAttention's (float32 and differentiable with float32 q, k, v).
// Options: MaxSeqlenK (required: it fixes the block list's shape; at most
// 64 * blk_kv), BlkKV (default 128), Causal, SoftmaxScale, Temperature,
// PartialDtype, MMADtypes, Workers, SharedKV. An error of a stage names
// DenseAttention and the stage.
func DenseAttention(q, k, v, cuQ, cuK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "DenseAttention"
	cfg, err := applyNeeding(fn, opts, denseOpts, need{optMaxSeqlenK, "it fixes the block list's shape"})
	if err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "q", q, 3, BFloat16, Float8E4M3FN, tensor.Float32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "k", k, 3, BFloat16, Float8E4M3FN, tensor.Float32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_q", cuQ, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_k", cuK, 1, tensor.Int32); err != nil {
		return nil, err
	}
	blk := cfg.blkKV
	if blk == 0 {
		blk = 128
	}
	if blk < 1 || blk > 128 {
		return nil, validate.ArgErr(fn, "blk_kv", "1 <= blk_kv <= 128", blk)
	}
	if cfg.maxSeqlenK < 1 {
		return nil, validate.ArgErr(fn, "max_seqlen_k", ">= 1", cfg.maxSeqlenK)
	}
	topK, err := denseTopK(fn, cfg.maxSeqlenK, blk)
	if err != nil {
		return nil, err
	}
	ks := k.Shape()
	if ks[1] < 1 || q.Shape()[1]%ks[1] != 0 {
		return nil, validate.ArgErr(fn, "q/k", "q [total_q, Hq, D], k [total_k, Hkv, D] with Hq divisible by Hkv", fmt.Sprintf("q %v, k %v", q.Shape(), ks))
	}
	op := &allBlocksOp{hkv: ks[1], totalQ: q.Shape()[0], topK: topK, blk: blk, causal: cfg.causal}
	if _, err := valueSize(fn, "max_seqlen_k", "q2k_indices Hkv * total_q * ceil(max_seqlen_k / blk_kv)", op.hkv, op.totalQ, op.topK); err != nil {
		return nil, err
	}
	q2k, err := G.ApplyOp(op, cuQ, cuK)
	if err != nil {
		return nil, err
	}
	csr, sched, err := csrSchedule(fn, q, k, q2k, cuQ, cuK, opts)
	if err != nil {
		return nil, err
	}
	return attend(fn, q, k, v, csr, sched, cuQ, cuK, opts)
}
