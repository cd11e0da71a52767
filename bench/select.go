package main

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// The correlated selection pattern: the blocks a model's own selection
// picks are correlated between neighbouring tokens (their queries are
// alike), unlike the uniformly random choices of causalQ2K. It is made the
// way a model would make it, by the package's BlockScores and TopKBlocks
// (block 0 and the diagonal block kept) on Q and K whose neighbouring
// tokens are correlated.

// corrRho is the correlation of each value with the same value of the
// previous token: an AR(1) process x_t = rho x_{t-1} + sqrt(1-rho^2) e_t
// with standard-normal e, so every value stays standard normal.
const corrRho = 0.95

// correlatedRows returns rows x width float32 values, each column an AR(1)
// process over the rows (tokens) with correlation corrRho.
func correlatedRows(rows, width int, seed uint64) []float32 {
	tables()
	norm := make([]float32, len(bf16Table))
	for i, b := range bf16Table {
		norm[i] = b.Float32()
	}
	mask := uint64(len(norm) - 1)
	r := splitmix{seed*0x9e3779b97f4a7c15 + 11}
	x := make([]float32, rows*width)
	e := float32(math.Sqrt(1 - corrRho*corrRho))
	for c := range width {
		x[c] = norm[r.next()&mask]
	}
	for t := 1; t < rows; t++ {
		prev, cur := x[(t-1)*width:t*width], x[t*width:(t+1)*width]
		for c := range cur {
			cur[c] = corrRho*prev[c] + e*norm[r.next()&mask]
		}
	}
	return x
}

// storeRows rounds x to dt ("bf16" or "fp8", saturating) and returns the
// stored slice and its reference decoder.
func storeRows(dt string, x []float32) (any, rowSource) {
	if dt == "fp8" {
		s := make([]lowp.Float8E4M3FN, len(x))
		for i, v := range x {
			s[i] = lowp.E4M3Sat(v)
		}
		return s, fp8Rows(s)
	}
	s := make([]lowp.BFloat16, len(x))
	for i, v := range x {
		s[i] = lowp.BF16(v)
	}
	return s, bf16Rows(s)
}

// correlatedQ2K selects c.TopK blocks per (KV head, query) of one causal
// sequence with op.BlockScoresFunc on q and k and op.TopKBlocksFunc
// (KeepFirst, KeepLast), and returns the q2k list with its number of
// visible (query, key) pairs inside the selected blocks.
func correlatedQ2K(cfg *config, c caseSpec, q, k, cuQ, cuK *tensor.Dense) ([]int32, int64, error) {
	scores, err := op.BlockScoresFunc(q, k, cuQ, cuK, op.BlockScoreConfig{BlkKV: c.Blk, Causal: true, Workers: cfg.workers})
	if err != nil {
		return nil, 0, err
	}
	sel, err := op.TopKBlocksFunc(scores, c.TopK, op.TopKConfig{KeepFirst: true, KeepLast: true})
	if err != nil {
		return nil, 0, err
	}
	q2k := sel.Data().([]int32)
	var pairs int64
	T := c.SeqLen
	for i, j := range q2k {
		if j < 0 {
			continue
		}
		qi := i / c.TopK % T
		pairs += int64(max(0, min((int(j)+1)*c.Blk, qi+1, T)-int(j)*c.Blk))
	}
	return q2k, pairs, nil
}
