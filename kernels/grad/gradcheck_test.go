package grad

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// fdShapes are the small problems of the finite-difference checks: ragged
// batches with empty sequences, -1 padding, query rows outside every
// sequence, causal (also seqlen_q > seqlen_k) and not, GQA 1/2/4/16,
// topK 1..8, dense and paged (shuffled page tables, blocks spanning pages,
// pages holding several blocks, a page shared by two sequences), D 64/128.
var fdShapes = []shape{
	{seqQ: []int{6, 0, 9, 4}, seqK: []int{40, 20, 70, 0}, hq: 2, hkv: 1, d: 64, topK: 3, blk: 16, pad: 0.3, qOffset: 1, seed: 1},
	{seqQ: []int{12, 7}, seqK: []int{12, 50}, hq: 8, hkv: 2, d: 64, topK: 4, blk: 16, causal: true, pad: 0.2, seed: 2},
	{seqQ: []int{20}, seqK: []int{10}, hq: 1, hkv: 1, d: 128, topK: 2, blk: 8, causal: true, seed: 3},
	{seqQ: []int{5, 6}, seqK: []int{33, 40}, hq: 16, hkv: 1, d: 64, topK: 8, blk: 16, causal: true, paged: true, pageSize: 16, shared: true, seed: 4},
	{seqQ: []int{7, 3}, seqK: []int{45, 30}, hq: 4, hkv: 2, d: 128, topK: 1, blk: 16, paged: true, pageSize: 8, shared: true, seed: 5},
	{seqQ: []int{9, 0, 5}, seqK: []int{70, 16, 38}, hq: 3, hkv: 3, d: 64, topK: 5, blk: 16, causal: true, paged: true, pageSize: 32, pad: 0.25, seed: 6},
	{seqQ: []int{4, 6}, seqK: []int{60, 24}, hq: 4, hkv: 1, d: 128, topK: 7, blk: 8, pad: 0.1, qOffset: 2, seed: 7},
	{seqQ: []int{11}, seqK: []int{48}, hq: 2, hkv: 2, d: 64, topK: 6, blk: 8, causal: true, paged: true, pageSize: 8, seed: 8},
}

// fdPick returns up to n indices of the largest |g| and n random indices.
func fdPick(r *rand.Rand, g []float64, n int) []int {
	idx := make([]int, len(g))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if math.Abs(g[a]) > math.Abs(g[b]) {
			return -1
		}
		if math.Abs(g[a]) < math.Abs(g[b]) {
			return 1
		}
		return 0
	})
	out := slices.Clone(idx[:min(n, len(idx))])
	for i := 0; i < n && len(g) > 0; i++ {
		out = append(out, r.IntN(len(g)))
	}
	return out
}

// TestFiniteDifferences checks the float64 reference backward (the
// definitions of the package doc) against central differences of the loss
// sum(dO*O) + sum(dLSE*LSE) with respect to q, k and v.
func TestFiniteDifferences(t *testing.T) {
	const h = 1e-5
	worst := 0.0
	for _, s := range fdShapes {
		in := newInstance(t, s)
		ref := in.reference(in.q, in.k, in.v, in.dO, in.dLSE)
		r := rand.New(rand.NewPCG(s.seed, 99))
		for _, tc := range []struct {
			name string
			x, g []float64
		}{{"dq", in.q, ref.dq}, {"dk", in.k, ref.dk}, {"dv", in.v, ref.dv}} {
			var norm float64
			for _, x := range tc.g {
				norm = max(norm, math.Abs(x))
			}
			if norm == 0 {
				t.Errorf("%v %s: gradient is all zero", s, tc.name)
				continue
			}
			var maxErr float64
			for _, i := range fdPick(r, tc.g, 6) {
				x0 := tc.x[i]
				tc.x[i] = x0 + h
				lp := in.loss(in.q, in.k, in.v, true)
				tc.x[i] = x0 - h
				lm := in.loss(in.q, in.k, in.v, true)
				tc.x[i] = x0
				fd := (lp - lm) / (2 * h)
				maxErr = max(maxErr, math.Abs(fd-tc.g[i])/norm)
			}
			worst = max(worst, maxErr)
			if maxErr > 1e-7 {
				t.Errorf("%v %s: finite differences differ by %.3g (relative to max |grad| %.3g)", s, tc.name, maxErr, norm)
			}
		}
	}
	t.Logf("largest finite-difference error, relative to max |grad|: %.3g", worst)
}
