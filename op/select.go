package op

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/sparseattn/msa/kernels/lowp"
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

// blockScorer is a validated BlockScores request.
type blockScorer struct {
	totalQ, hq, hkv, d, blk, maxBlocks int
	cuQ, cuK                           []int32
	q, k                               *tensor.Dense
	causal                             bool
	scale                              float32
	reduce                             HeadReduce
	workers                            int
}

// selFloat32s decodes a float32, BFloat16 or Float8E4M3FN tensor.
func selFloat32s(t *tensor.Dense) []float32 {
	switch t.Dtype() {
	case tensor.Float32:
		return validate.Backing[float32](t)
	case BFloat16:
		src := validate.Backing[lowp.BFloat16](t)
		dst := make([]float32, len(src))
		lowp.DecodeBF16(dst, src)
		return dst
	default:
		src := validate.Backing[lowp.Float8E4M3FN](t)
		dst := make([]float32, len(src))
		lowp.DecodeE4M3(dst, src)
		return dst
	}
}

// validateBlockScores checks q, k, cu_seqlens and the config. With derive,
// MaxSeqlenK 0 is taken from cu_seqlens_k.
func validateBlockScores(fn string, q, k, cuSeqlensQ, cuSeqlensK tensor.Tensor, cfg BlockScoreConfig, derive bool) (*blockScorer, error) {
	c := &validate.Checker{Fn: fn}
	qd, kd := c.Dense(q, "q"), c.Dense(k, "k")
	c.Dtype(qd, "q", BFloat16, Float8E4M3FN, tensor.Float32)
	c.Dtype(kd, "k", BFloat16, Float8E4M3FN, tensor.Float32)
	c.Rank(qd, "q", "[total_q, Hq, D]", 3)
	c.Rank(kd, "k", "[total_k, Hkv, D]", 3)
	if c.Err != nil {
		return nil, c.Err
	}
	qs, ks := qd.Shape(), kd.Shape()
	s := &blockScorer{totalQ: qs[0], hq: qs[1], d: qs[2], hkv: ks[1], q: qd, k: kd,
		causal: cfg.Causal, reduce: cfg.Reduce, workers: validate.WorkerCount(cfg.Workers)}
	c.Need(s.d >= 1 && ks[2] == s.d, "k", fmt.Sprintf("head dimension D = %d (from q) >= 1", s.d), validate.ShapeStr(kd))
	checkHeads(c, "q", qd, kd, s.hkv, true, func() string { return "the layout [total_k, Hkv, D]" })
	c.Need(cfg.Reduce == ReduceMax || cfg.Reduce == ReduceMean, "reduce", "ReduceMax or ReduceMean", cfg.Reduce)
	if c.Err != nil {
		return nil, c.Err
	}
	s.cuQ = validate.CuSeqlens(c, cuSeqlensQ, "cu_seqlens_q", s.totalQ, fmt.Sprintf("total_q = %d", s.totalQ))
	s.cuK = validate.CuSeqlens(c, cuSeqlensK, "cu_seqlens_k", ks[0], fmt.Sprintf("total_k = %d", ks[0]))
	if c.Err != nil {
		return nil, c.Err
	}
	c.Need(len(s.cuK) == len(s.cuQ), "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(s.cuQ)), len(s.cuK))
	s.blk = cfg.BlkKV
	if s.blk == 0 {
		s.blk = 128
	}
	c.Need(s.blk >= 1 && s.blk <= validate.MaxInt32, "blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", validate.MaxInt32), s.blk)
	s.scale = float32(validate.ResolveScale(c, cfg.SoftmaxScale, s.d))
	if c.Err != nil {
		return nil, c.Err
	}
	longest := 0
	for b := 0; b+1 < len(s.cuK); b++ {
		longest = max(longest, int(s.cuK[b+1]-s.cuK[b]))
	}
	maxK := cfg.MaxSeqlenK
	if maxK == 0 && derive {
		maxK = max(longest, 1)
	}
	c.Need(maxK >= 1 && maxK <= max(ks[0], 1), "max_seqlen_k", fmt.Sprintf("1 <= max_seqlen_k <= total_k = k.shape[0] = %d", ks[0]), maxK)
	c.Need(longest <= maxK, "max_seqlen_k", fmt.Sprintf(">= the longest key sequence in cu_seqlens_k (%d)", longest), maxK)
	s.maxBlocks = validate.CeilDiv(maxK, s.blk)
	if c.Err == nil && validate.MulCap(maxGraphValue, s.hkv, s.totalQ, s.maxBlocks) < 0 {
		c.Fail("max_seqlen_k", fmt.Sprintf("scores [Hkv, total_q, ceil(max_seqlen_k / blk_kv)] of at most %d elements", maxGraphValue),
			fmt.Sprintf("[%d, %d, %d]", s.hkv, s.totalQ, s.maxBlocks))
	}
	return s, c.Err
}

// run computes the scores [Hkv][total_q][max_blocks].
func (s *blockScorer) run() []float32 {
	out := make([]float32, s.hkv*s.totalQ*s.maxBlocks)
	ninf := float32(math.Inf(-1))
	for i := range out {
		out[i] = ninf
	}
	q, k := selFloat32s(s.q), selFloat32s(s.k)
	d, hkv, hq, blk := s.d, s.hkv, s.hq, s.blk
	qpk := hq / hkv
	batch := len(s.cuQ) - 1
	// Mean keys per (sequence, block, head): [b][j][h][D], float32 sums in
	// token order (deterministic).
	meanOff := make([]int, batch+1)
	for b := 0; b < batch; b++ {
		nb := (int(s.cuK[b+1]-s.cuK[b]) + blk - 1) / blk
		meanOff[b+1] = meanOff[b] + nb
	}
	means := make([]float32, meanOff[batch]*hkv*d)
	for b := 0; b < batch; b++ {
		sk := int(s.cuK[b+1] - s.cuK[b])
		for j := 0; j*blk < sk; j++ {
			n := min(blk, sk-j*blk)
			inv := 1 / float32(n)
			for h := 0; h < hkv; h++ {
				m := means[((meanOff[b]+j)*hkv+h)*d:][:d]
				for t := j * blk; t < j*blk+n; t++ {
					row := k[((int(s.cuK[b])+t)*hkv+h)*d:][:d]
					for c, x := range row {
						m[c] += x
					}
				}
				for c := range m {
					m[c] *= inv
				}
			}
		}
	}
	// One task per (sequence, query row); rows are independent.
	type task struct{ b, gq int }
	tasks := make(chan task, 256)
	var wg sync.WaitGroup
	nw := max(1, min(s.workers, runtime.GOMAXPROCS(0), s.totalQ))
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tk := range tasks {
				s.scoreRow(out, q, means[meanOff[tk.b]*hkv*d:], tk.b, tk.gq, qpk)
			}
		}()
	}
	for b := 0; b < batch; b++ {
		for gq := int(s.cuQ[b]); gq < int(s.cuQ[b+1]); gq++ {
			tasks <- task{b, gq}
		}
	}
	close(tasks)
	wg.Wait()
	return out
}

// scoreRow fills the scores of one query row for every KV head.
func (s *blockScorer) scoreRow(out, q, means []float32, b, gq, qpk int) {
	d, hkv, blk := s.d, s.hkv, s.blk
	sq := int(s.cuQ[b+1] - s.cuQ[b])
	sk := int(s.cuK[b+1] - s.cuK[b])
	nb := (sk + blk - 1) / blk
	visible := nb
	if s.causal {
		last := gq - int(s.cuQ[b]) + sk - sq // last visible key
		if last < 0 {
			visible = 0
		} else {
			visible = min(nb, last/blk+1)
		}
	}
	for h := 0; h < hkv; h++ {
		dst := out[(h*s.totalQ+gq)*s.maxBlocks:][:s.maxBlocks]
		for j := 0; j < visible; j++ {
			m := means[(j*hkv+h)*d:][:d]
			var acc float32
			if s.reduce == ReduceMax {
				acc = float32(math.Inf(-1))
			}
			for g := 0; g < qpk; g++ {
				qr := q[(gq*s.hq+h*qpk+g)*d:][:d]
				var dot float32
				for c, x := range qr {
					dot += x * m[c]
				}
				dot *= s.scale
				if s.reduce == ReduceMax {
					// NaN propagates: a NaN score is never selected.
					if dot > acc || dot != dot {
						acc = dot
					}
				} else {
					acc += dot
				}
			}
			if s.reduce == ReduceMean {
				acc /= float32(qpk)
			}
			dst[j] = acc
		}
	}
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
	return tensor.New(tensor.WithShape(s.hkv, s.totalQ, s.maxBlocks), tensor.WithBacking(s.run())), nil
}

// selectable reports whether TopKBlocks may pick a block with score x: a
// finite score (-inf marks an invisible block; NaN and +inf only arise from
// non-finite inputs and are never selected).
func selectable(x float32) bool { return !math.IsInf(float64(x), 0) && x == x }

// better reports whether block a (score sa) ranks before block b (score
// sb): higher score first, then lower block id.
func better(sa float32, a int, sb float32, b int) bool {
	return sa > sb || (sa == sb && a < b)
}

// topKRow selects the blocks of one score row into dst (len topK): forced
// blocks first, then the best remaining scores (ties: lower block id),
// then sorted ascending with -1 padding.
func topKRow(dst []int32, row []float32, cfg TopKConfig) {
	topK := len(dst)
	n := 0
	if cfg.KeepLast && n < topK {
		for j := len(row) - 1; j >= 0; j-- {
			if selectable(row[j]) {
				dst[n] = int32(j)
				n++
				break
			}
		}
	}
	if cfg.KeepFirst && n < topK && len(row) > 0 && selectable(row[0]) && !slices.Contains(dst[:n], int32(0)) {
		dst[n] = 0
		n++
	}
	forced := n
	// Insertion into a sorted list of the best topK-forced candidates.
	for j, x := range row {
		if !selectable(x) || slices.Contains(dst[:forced], int32(j)) {
			continue
		}
		if n == topK && (forced == topK || !better(x, j, row[dst[n-1]], int(dst[n-1]))) {
			continue
		}
		p := n
		if n < topK {
			n++
		} else {
			p = topK - 1
		}
		for p > forced && better(x, j, row[dst[p-1]], int(dst[p-1])) {
			dst[p] = dst[p-1]
			p--
		}
		dst[p] = int32(j)
	}
	// Ascending order, -1 padding.
	for i := 1; i < n; i++ {
		for p := i; p > 0 && dst[p] < dst[p-1]; p-- {
			dst[p], dst[p-1] = dst[p-1], dst[p]
		}
	}
	for i := n; i < topK; i++ {
		dst[i] = -1
	}
}

// topKBlocks runs topKRow over [rows][maxBlocks] scores.
func topKBlocks(scores []float32, rows, maxBlocks, topK int, cfg TopKConfig) []int32 {
	out := make([]int32, rows*topK)
	for r := 0; r < rows; r++ {
		topKRow(out[r*topK:(r+1)*topK], scores[r*maxBlocks:(r+1)*maxBlocks], cfg)
	}
	return out
}

// validateTopK checks the scores tensor and topK.
func validateTopK(fn string, scores tensor.Tensor, topK int) (*tensor.Dense, error) {
	c := &validate.Checker{Fn: fn}
	sd := c.Dense(scores, "scores")
	c.Dtype(sd, "scores", tensor.Float32)
	c.Rank(sd, "scores", "[Hkv, total_q, max_blocks]", 3)
	c.Need(topK >= 1 && topK <= validate.MaxTopK, "topK", fmt.Sprintf("1 <= topK <= %d", validate.MaxTopK), topK)
	if c.Err != nil {
		return nil, c.Err
	}
	c.Need(sd.Shape()[0] >= 1, "scores", "Hkv >= 1", validate.ShapeStr(sd))
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
	out := topKBlocks(validate.Backing[float32](sd), s[0]*s[1], s[2], topK, cfg)
	return tensor.New(tensor.WithShape(s[0], s[1], topK), tensor.WithBacking(out)), nil
}
