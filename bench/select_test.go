package main

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"slices"
	"testing"

	"github.com/sparseattn/msa/internal/workload"
	"github.com/sparseattn/msa/op/causalselect"
	"gorgonia.org/tensor"
)

// correlatedQ2K must keep block 0 and the diagonal block in every list,
// select only visible blocks, count the visible pairs exactly, and give
// neighbouring queries more blocks in common than causalQ2K's uniformly
// random choices do (the point of the pattern).
func TestCorrelatedQ2K(t *testing.T) {
	const T, hq, hkv, d, topK, blk = 2048, 4, 2, 64, 8, 64
	c := caseSpec{SeqLen: T, HQ: hq, HKV: hkv, D: d, TopK: topK, Blk: blk, DType: "bf16"}
	qd, _ := storeRows("bf16", workload.CorrelatedRows(T, hq*d, 1))
	kd, _ := storeRows("bf16", workload.CorrelatedRows(T, hkv*d, 2))
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
	random, _, err := causalQ2K(T, hkv, topK, blk, 3)
	if err != nil {
		t.Fatal(err)
	}
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

// The correlated cases' selections at the default shapes are pinned by
// the FNV-1a hash of their q2k lists (little-endian int32), recorded from
// the bench before its generator moved to package workload: a change to
// the AR(1) rows, the seeds or the selection changes them. The BF16 case's
// list must also be what workload.CorrelatedQ2K gives the GPU check.
func TestCorrelatedGolden(t *testing.T) {
	for _, g := range []struct {
		c     caseSpec
		hash  uint64
		pairs int64
	}{
		{caseSpec{Kind: "prefill", DType: "bf16", SeqLen: 8192, HQ: 16, HKV: 1, D: 128, TopK: 16, Blk: 128}, 0x0f817b0b58c444cd, 14290944},
		{caseSpec{Kind: "prefill", DType: "fp8", SeqLen: 8192, HQ: 16, HKV: 1, D: 128, TopK: 16, Blk: 128}, 0x6537bc1e6a74e216, 14290944},
		{caseSpec{Kind: "nvfp4", DType: "bf16", SeqLen: 4096, HQ: 16, HKV: 1, D: 128, TopK: 16, Blk: 128}, 0x72ee9aaf7aa9bfa3, 6162432},
		{caseSpec{Kind: "prefill", DType: "bf16", SeqLen: 1536, HQ: 4, HKV: 2, D: 64, TopK: 8, Blk: 64}, 0x314c966522b567b2, 1246720},
	} {
		c := g.c
		c.Select = "correlated"
		p, err := buildPrefill(&config{workers: 2}, c)
		if err != nil {
			t.Fatal(err)
		}
		if h := q2kHash(p.q2k); h != g.hash || p.pairs != g.pairs {
			t.Errorf("%s %s %d: q2k hash %#x, %d pairs: want %#x, %d", c.Kind, c.DType, c.SeqLen, h, p.pairs, g.hash, g.pairs)
		}
		if c.Kind != "prefill" || c.DType != "bf16" {
			continue
		}
		w, err := workload.CorrelatedQ2K(causalselect.Shape{T: c.SeqLen, Hq: c.HQ, Hkv: c.HKV, D: c.D, TopK: c.TopK, Blk: c.Blk}, workload.Seed(c.SeqLen), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(w, p.q2k) {
			t.Errorf("%s %d: workload.CorrelatedQ2K differs from the bench's correlated case", c.DType, c.SeqLen)
		}
	}
}

// q2kHash is the FNV-1a hash of q2k as little-endian int32.
func q2kHash(q2k []int32) uint64 {
	h := fnv.New64a()
	b := make([]byte, 4*len(q2k))
	for i, v := range q2k {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	h.Write(b)
	return h.Sum64()
}

// The default 8K prefill's mean union of blocks per 64-row query tile is
// the figure bench/README.md gives for each pattern (18.7 correlated,
// 26.8 random), correlated below random.
func TestTileUnion(t *testing.T) {
	want := map[string]float64{"correlated": 18.7, "random": 26.8}
	for _, sel := range []string{"correlated", "random"} {
		c := caseSpec{Kind: "prefill", DType: "bf16", SeqLen: 8192, HQ: 16, HKV: 1, D: 128, TopK: 16, Blk: 128, Select: sel}
		p, err := buildPrefill(&config{workers: 2}, c)
		if err != nil {
			t.Fatal(err)
		}
		u, err := p.tileUnion()
		if err != nil {
			t.Fatal(err)
		}
		if math.Round(u*10)/10 != want[sel] {
			t.Errorf("%s: %.3f blocks per tile, want %.1f", sel, u, want[sel])
		}
	}
}
