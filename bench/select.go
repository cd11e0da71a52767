package main

import (
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// The correlated selection pattern (package workload, shared with the GPU
// check's timing rows): Q and K whose neighbouring tokens are correlated
// (workload.CorrelatedRows, an AR(1) process per column), rated by the
// package's BlockScores and selected by TopKBlocks with block 0 and the
// diagonal block kept (op.BlockScoresFunc, op.TopKBlocksFunc: the code
// workload.CorrelatedQ2K runs for the GPU check through op/causalselect).

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
