// Package causalselect runs op's block selection on one causal sequence
// of BF16 Q and K: the scores of op.BlockScoresFunc (causal, the default
// softmax scale, the maximum over a group's query heads) and the choice of
// op.TopKBlocksFunc with block 0 and the diagonal block kept (KeepFirst,
// KeepLast), through the same code (op/internal/selection) and without
// importing package op. It is for tools that must not link what op links:
// the GPU check (cuda/gpucheck) loads no CUDA library at start, while
// package op under the cuda build tag links Gorgonia's CUDA engine
// (cuBLAS, cuDNN). Models call op's functions and graph nodes.
package causalselect

import (
	"fmt"
	"math"
	"runtime"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/selection"
)

// Limits of op's BlockScores and TopKBlocks (op/internal/validate, which
// this package does not import: it links Gorgonia's tensors; the test
// holds them equal).
const (
	// MaxScores is the most block scores (Hkv x T x ceil(T / Blk)) one
	// call may hold.
	MaxScores = 1 << 28
	// MaxTopK is the most blocks one (KV head, query) may select.
	MaxTopK = 64
)

// mulCap returns the product of factors >= 1, or -1 when it exceeds limit.
func mulCap(limit int, factors ...int) int {
	p := 1
	for _, f := range factors {
		if p > limit/f {
			return -1
		}
		p *= f
	}
	return p
}

// Shape is a causal sequence of T tokens with Hq query heads, Hkv KV
// heads and head dimension D, selecting up to TopK blocks of Blk keys per
// (KV head, query).
type Shape struct {
	T, Hq, Hkv, D, TopK, Blk int
}

// Check reports the first field out of range, by name.
func (s Shape) Check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"T", s.T}, {"Hq", s.Hq}, {"Hkv", s.Hkv}, {"D", s.D}, {"TopK", s.TopK}, {"Blk", s.Blk}} {
		if f.v < 1 || f.v > math.MaxInt32 {
			return fmt.Errorf("causalselect: %s = %d: want 1 <= %s <= %d", f.name, f.v, f.name, math.MaxInt32)
		}
	}
	switch nb := (s.T + s.Blk - 1) / s.Blk; {
	case s.Hq%s.Hkv != 0:
		return fmt.Errorf("causalselect: Hq = %d: want a multiple of Hkv = %d", s.Hq, s.Hkv)
	case s.TopK > MaxTopK:
		return fmt.Errorf("causalselect: TopK = %d: want <= %d", s.TopK, MaxTopK)
	case mulCap(MaxScores, s.Hkv, s.T, nb) < 0:
		return fmt.Errorf("causalselect: scores [Hkv, T, ceil(T / Blk)] = [%d, %d, %d]: want at most %d elements", s.Hkv, s.T, nb, MaxScores)
	}
	return nil
}

// Select returns the q2k list [Hkv][T][TopK] of q [T][Hq][D] and k
// [T][Hkv][D] (row-major BF16): block ids ascending, -1 padding, what
// op.TopKBlocksFunc(op.BlockScoresFunc(q, k, cu, cu, {BlkKV: Blk, Causal:
// true}), TopK, {KeepFirst: true, KeepLast: true}) returns for cu = [0, T].
// workers goroutines score the blocks (<= 0: GOMAXPROCS); the result does
// not depend on them.
func Select(s Shape, q, k []lowp.BFloat16, workers int) ([]int32, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	nq, nk := mulCap(math.MaxInt, s.T, s.Hq, s.D), mulCap(math.MaxInt, s.T, s.Hkv, s.D)
	if len(q) != nq || len(k) != nk {
		return nil, fmt.Errorf("causalselect: q has %d values, k %d: want T x Hq x D = %d and T x Hkv x D = %d",
			len(q), len(k), nq, nk)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	cu := []int32{0, int32(s.T)}
	nb := (s.T + s.Blk - 1) / s.Blk
	sc := &selection.Scorer{TotalQ: s.T, HQ: s.Hq, Hkv: s.Hkv, D: s.D, Blk: s.Blk, MaxBlocks: nb, CuQ: cu, CuK: cu,
		Q: selection.Operand{BF16: q}, K: selection.Operand{BF16: k},
		Causal: true, Scale: float32(1 / math.Sqrt(float64(s.D))), Workers: workers} // op's default scale
	return selection.TopK(sc.Run(), s.Hkv*s.T, nb, s.TopK, true, true), nil
}
