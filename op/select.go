package op

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/selection"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// In-graph block selection (beyond the reference, which takes q2k_indices
// as an input): BlockScores rates every (KV head, query, key block) and
// TopKBlocks turns the ratings into q2k_indices for K2QCSR / K2QCSRFunc.

// HeadReduce says how BlockScores combines the query heads of one GQA group
// (all of them share one q2k list).
type HeadReduce int

const (
	// ReduceMax (the default) keeps a block when any head of the group
	// rates it highly: score = max over the group's heads.
	ReduceMax HeadReduce = iota
	// ReduceMean averages the group's heads.
	ReduceMean
)

// String returns "max" or "mean".
func (r HeadReduce) String() string {
	switch r {
	case ReduceMax:
		return "max"
	case ReduceMean:
		return "mean"
	}
	return fmt.Sprintf("HeadReduce(%d)", int(r))
}

// BlockScoreConfig holds the parameters of BlockScoresFunc; the graph
// constructor BlockScores takes the same ones as options (BlkKV,
// MaxSeqlenK, Causal, SoftmaxScale, Reduce, Workers).
type BlockScoreConfig struct {
	// BlkKV (blk_kv): keys per block; 0 means 128.
	BlkKV int
	// MaxSeqlenK (max_seqlen_k) fixes the output's last dimension,
	// max_blocks = ceil(MaxSeqlenK / BlkKV). A sequence with more keys is
	// an error. BlockScoresFunc derives it from cu_seqlens_k when 0; the
	// graph constructor requires it (a node's shape may depend only on
	// input shapes and parameters).
	MaxSeqlenK int
	// Causal gives -inf to blocks entirely in the query's causal future
	// (bottom-right aligned: key t is visible from batch-local query i iff
	// t <= i + seqlen_k - seqlen_q).
	Causal bool
	// SoftmaxScale multiplies the scores; 0 means 1/sqrt(D). Only the
	// order of the scores matters to TopKBlocks, but the scale keeps them
	// comparable with attention logits.
	SoftmaxScale float64
	// Reduce combines the query heads of a group: ReduceMax (default) or
	// ReduceMean.
	Reduce HeadReduce
	// Workers caps the goroutines; <= 0 uses runtime.GOMAXPROCS(0). The
	// result does not depend on it.
	Workers int
}

// TopKConfig holds the optional rules of TopKBlocksFunc (TopKBlocks takes
// them as the KeepFirst and KeepLast options).
// Forced blocks are taken first (the last visible block, then block 0, as
// far as topK allows); the remaining slots go to the highest scores.
type TopKConfig struct {
	// KeepFirst always selects block 0 when it is visible (finite score):
	// the "attention sink" block.
	KeepFirst bool
	// KeepLast always selects the query's last visible block (the highest
	// block id with a finite score). With causal scores this is the
	// query's own (diagonal) block, the local window.
	KeepLast bool
}

// validateBlockScores checks q, k, cu_seqlens and the config. With derive,
// MaxSeqlenK 0 is taken from cu_seqlens_k.
func validateBlockScores(fn string, q, k, cuSeqlensQ, cuSeqlensK tensor.Tensor, cfg BlockScoreConfig, derive bool) (*selection.Scorer, error) {
	s := new(selection.Scorer)
	if err := validateBlockScoresInto(s, fn, q, k, cuSeqlensQ, cuSeqlensK, cfg, derive); err != nil {
		return nil, err
	}
	return s, nil
}

// validateBlockScoresInto is validateBlockScores writing the request into s
// (storage a graph node keeps across runs): it formats a message only on
// failure.
func validateBlockScoresInto(s *selection.Scorer, fn string, q, k, cuSeqlensQ, cuSeqlensK tensor.Tensor, cfg BlockScoreConfig, derive bool) error {
	c := &validate.Checker{Fn: fn}
	qd, kd := c.Dense(q, "q"), c.Dense(k, "k")
	c.Dtype(qd, "q", BFloat16, Float8E4M3FN, tensor.Float32)
	c.Dtype(kd, "k", BFloat16, Float8E4M3FN, tensor.Float32)
	c.Rank(qd, "q", "[total_q, Hq, D]", 3)
	c.Rank(kd, "k", "[total_k, Hkv, D]", 3)
	if c.Err != nil {
		return c.Err
	}
	qs, ks := qd.Shape(), kd.Shape()
	*s = selection.Scorer{TotalQ: qs[0], HQ: qs[1], D: qs[2], Hkv: ks[1], Q: scoreOperand(qd), K: scoreOperand(kd),
		Causal: cfg.Causal, Mean: cfg.Reduce == ReduceMean, Workers: validate.WorkerCount(cfg.Workers)}
	if !(s.D >= 1 && ks[2] == s.D) {
		c.Fail("k", fmt.Sprintf("head dimension D = %d (from q) >= 1", s.D), validate.ShapeStr(kd))
	}
	checkHeads(c, "q", qd, kd, s.Hkv, true, func() string { return "the layout [total_k, Hkv, D]" })
	if !(cfg.Reduce == ReduceMax || cfg.Reduce == ReduceMean) {
		c.Fail("reduce", "ReduceMax or ReduceMean", cfg.Reduce)
	}
	if c.Err != nil {
		return c.Err
	}
	s.CuQ = validate.CuSeqlens(c, cuSeqlensQ, "cu_seqlens_q", s.TotalQ, "total_q")
	s.CuK = validate.CuSeqlens(c, cuSeqlensK, "cu_seqlens_k", ks[0], "total_k")
	if c.Err != nil {
		return c.Err
	}
	if len(s.CuK) != len(s.CuQ) {
		c.Fail("cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(s.CuQ)), len(s.CuK))
	}
	s.Blk = cfg.BlkKV
	if s.Blk == 0 {
		s.Blk = 128
	}
	if !(s.Blk >= 1 && s.Blk <= validate.MaxInt32) {
		c.Fail("blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", validate.MaxInt32), s.Blk)
	}
	s.Scale = float32(validate.ResolveScale(c, cfg.SoftmaxScale, s.D))
	if c.Err != nil {
		return c.Err
	}
	longest := 0
	for b := 0; b+1 < len(s.CuK); b++ {
		longest = max(longest, int(s.CuK[b+1]-s.CuK[b]))
	}
	maxK := cfg.MaxSeqlenK
	if maxK == 0 && derive {
		maxK = max(longest, 1)
	}
	if !(maxK >= 1 && maxK <= max(ks[0], 1)) {
		c.Fail("max_seqlen_k", fmt.Sprintf("1 <= max_seqlen_k <= total_k = k.shape[0] = %d", ks[0]), maxK)
	}
	if longest > maxK {
		c.Fail("max_seqlen_k", fmt.Sprintf(">= the longest key sequence in cu_seqlens_k (%d)", longest), maxK)
	}
	s.MaxBlocks = validate.CeilDiv(maxK, s.Blk)
	if c.Err == nil && validate.MulCap(maxGraphValue, s.Hkv, s.TotalQ, s.MaxBlocks) < 0 {
		c.Fail("max_seqlen_k", fmt.Sprintf("scores [Hkv, total_q, ceil(max_seqlen_k / blk_kv)] of at most %d elements", maxGraphValue),
			fmt.Sprintf("[%d, %d, %d]", s.Hkv, s.TotalQ, s.MaxBlocks))
	}
	return c.Err
}

// scoreOperand is the values of t, a float32, BFloat16 or Float8E4M3FN
// tensor (its dtype already checked).
func scoreOperand(t *tensor.Dense) selection.Operand {
	switch t.Dtype() {
	case tensor.Float32:
		return selection.Operand{F32: validate.Backing[float32](t)}
	case BFloat16:
		return selection.Operand{BF16: validate.Backing[lowp.BFloat16](t)}
	}
	return selection.Operand{E4M3: validate.Backing[lowp.Float8E4M3FN](t)}
}

// BlockScoresFunc rates every key block for every query and KV head (the
// eager form of BlockScores): q [total_q, Hq, D] and k [total_k, Hkv, D]
// are BFloat16, Float8E4M3FN or float32 (FP8 decoded exactly, no scale);
// cuSeqlensQ, cuSeqlensK int32 [B+1]. The result is float32
// [Hkv, total_q, max_blocks] with
//
//	score[h, i, j] = reduce over the query heads hq of group h of
//	                 softmax_scale * q[i, hq] . mean(k[block j of i's sequence, h])
//
// where the mean runs over the block's keys that exist (t < seqlen_k_b;
// with causal, the keys of the query's diagonal block that lie in its
// future are part of the mean too: the attention masks them). The score is
// -inf for blocks beyond the sequence's ceil(seqlen_k_b / blk_kv) blocks,
// for blocks entirely in the query's causal future, and for rows past
// cu_seqlens_q[B]. Scores are computed in float32 in a fixed order, so they
// do not depend on cfg.Workers.
func BlockScoresFunc(q, k, cuSeqlensQ, cuSeqlensK tensor.Tensor, cfg BlockScoreConfig) (*tensor.Dense, error) {
	s, err := validateBlockScores("BlockScoresFunc", q, k, cuSeqlensQ, cuSeqlensK, cfg, true)
	if err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(s.Hkv, s.TotalQ, s.MaxBlocks), tensor.WithBacking(s.Run())), nil
}

// validateTopK checks the scores tensor and topK.
func validateTopK(fn string, scores tensor.Tensor, topK int) (*tensor.Dense, error) {
	c := &validate.Checker{Fn: fn}
	sd := c.Dense(scores, "scores")
	c.Dtype(sd, "scores", tensor.Float32)
	c.Rank(sd, "scores", "[Hkv, total_q, max_blocks]", 3)
	if !(topK >= 1 && topK <= validate.MaxTopK) {
		c.Fail("topK", fmt.Sprintf("1 <= topK <= %d", validate.MaxTopK), topK)
	}
	if c.Err != nil {
		return nil, c.Err
	}
	if sd.Shape()[0] < 1 {
		c.Fail("scores", "Hkv >= 1", validate.ShapeStr(sd))
	}
	return sd, c.Err
}

// TopKBlocksFunc selects up to topK blocks per (KV head, query) from
// scores [Hkv, total_q, max_blocks] float32 (the eager form of TopKBlocks)
// and returns q2k_indices int32 [Hkv, total_q, topK]: block ids sorted
// ascending, no duplicates, only blocks with a finite score (-inf marks an
// invisible block), -1 padding at the end. The highest scores win; equal
// scores go to the lower block id, so the result is deterministic. topK >=
// max_blocks selects every visible block (dense attention). cfg forces
// block 0 and/or the last visible (diagonal) block into the selection.
func TopKBlocksFunc(scores tensor.Tensor, topK int, cfg TopKConfig) (*tensor.Dense, error) {
	sd, err := validateTopK("TopKBlocksFunc", scores, topK)
	if err != nil {
		return nil, err
	}
	s := sd.Shape()
	out := selection.TopK(validate.Backing[float32](sd), s[0]*s[1], s[2], topK, cfg.KeepFirst, cfg.KeepLast)
	return tensor.New(tensor.WithShape(s[0], s[1], topK), tensor.WithBacking(out)), nil
}
