package main

import (
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

// correlatedQ2K must keep block 0 and the diagonal block in every list,
// select only visible blocks, count the visible pairs exactly, and give
// neighbouring queries more blocks in common than causalQ2K's uniformly
// random choices do (the point of the pattern).
func TestCorrelatedQ2K(t *testing.T) {
	const T, hq, hkv, d, topK, blk = 2048, 4, 2, 64, 8, 64
	c := caseSpec{SeqLen: T, HQ: hq, HKV: hkv, D: d, TopK: topK, Blk: blk, DType: "bf16"}
	qd, _ := storeRows("bf16", correlatedRows(T, hq*d, 1))
	kd, _ := storeRows("bf16", correlatedRows(T, hkv*d, 2))
	q := tensor.New(tensor.WithShape(T, hq, d), tensor.WithBacking(qd))
	k := tensor.New(tensor.WithShape(T, hkv, d), tensor.WithBacking(kd))
	cu := func() *tensor.Dense { return tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, T})) }
	q2k, pairs, err := correlatedQ2K(&config{workers: 2}, c, q, k, cu(), cu())
	if err != nil {
		t.Fatal(err)
	}
	var brute int64
	for h := range hkv {
		for qi := range T {
			list := q2k[(h*T+qi)*topK : (h*T+qi+1)*topK]
			diag := int32(qi / blk)
			if !slices.Contains(list, 0) || !slices.Contains(list, diag) {
				t.Fatalf("h %d q %d: list %v lacks block 0 or the diagonal %d", h, qi, list, diag)
			}
			for _, j := range list {
				if j > diag {
					t.Fatalf("h %d q %d: future block in %v", h, qi, list)
				}
				for kk := int(j) * blk; j >= 0 && kk < (int(j)+1)*blk; kk++ {
					if kk <= qi {
						brute++
					}
				}
			}
		}
	}
	if brute != pairs {
		t.Fatalf("pairs %d, brute force %d", pairs, brute)
	}
	random, _ := causalQ2K(T, hkv, topK, blk, 3)
	if sc, sr := sharedNext(q2k, T, topK), sharedNext(random, T, topK); sc < 2*sr {
		t.Fatalf("neighbouring queries share %.2f blocks (random selection: %.2f): not correlated", sc, sr)
	}
}

// sharedNext is the mean number of blocks a query's list shares with the
// next query's, over the later half of the queries (which see enough
// blocks to choose among).
func sharedNext(q2k []int32, T, topK int) float64 {
	n, s := 0, 0
	for qi := T / 2; qi+1 < T; qi++ {
		a, b := q2k[qi*topK:(qi+1)*topK], q2k[(qi+1)*topK:(qi+2)*topK]
		for _, j := range a {
			if j >= 0 && slices.Contains(b, j) {
				s++
			}
		}
		n++
	}
	return float64(s) / float64(n)
}
