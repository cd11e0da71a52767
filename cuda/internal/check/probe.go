package check

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/cuda"
)

// Exact probes of the mask and the block selection. With Q = 0 every
// attended score is 0, so P = exp(0 - 0) = 1 for exactly the attended
// tokens whatever P is rounded to (1 is exact in BF16 and E4M3), LSE =
// ln(count) and O is the mean of the attended V rows. V then encodes token
// positions: in probe pass p, the row of token t of sequence b at KV head
// h is one-hot at channel (t + 7h + 13b) mod D when t / D == p and zero
// otherwise, and every row that holds no token (page slots at or past the
// sequence length, pool pages outside the page table) is all ones. So in
// pass p, O[c] of a (query row, head) is nonzero exactly when the one
// token of the pass with channel c is attended (its weight 1/count, or a
// sum of partials 1/n_s >= 2^-7 weighted by n_s/count: never rounded to 0
// in any partial dtype or in the BF16 output), and an attended empty row
// lights every channel. The check recovers the attended set token by
// token from O, its size from LSE, and compares both with the set the
// reference attends: a mask or selection error fails it whatever the
// tolerances. The channel's dependence on h and b makes a row read through
// the wrong KV head or sequence show up as the wrong tokens.

// ProbeDiff is the comparison of probe results with the reference's
// attended sets.
type ProbeDiff struct {
	Rows        int    // (query row, query head) pairs checked, over all passes
	Tokens      int    // (token, row) memberships checked
	Attended    int    // of which the reference attends
	WrongTokens int    // memberships that differ from the reference's
	WrongCount  int    // rows whose exp(LSE) is not the reference's count (within 1/4; -inf for none)
	First       string // the first mismatch
}

// OK reports whether every membership and count matched.
func (d ProbeDiff) OK() bool { return d.WrongTokens == 0 && d.WrongCount == 0 && d.Rows > 0 }

// Add accumulates e into d.
func (d *ProbeDiff) Add(e ProbeDiff) {
	if d.First == "" {
		d.First = e.First
	}
	d.Rows += e.Rows
	d.Tokens += e.Tokens
	d.Attended += e.Attended
	d.WrongTokens += e.WrongTokens
	d.WrongCount += e.WrongCount
}

// probeChannel is the V channel that encodes token t of sequence b at KV
// head h.
func probeChannel(t, h, b, d int) int { return (t + 7*h + 13*b) % d }

// probeRows fills the rows x d values of a probe V for pass p: owner(row)
// says which (sequence, token, KV head) a row holds, ok false for none.
func probeRows(rows, d, pass int, owner func(row int) (b, t, h int, ok bool)) []float32 {
	x := make([]float32, rows*d)
	for r := 0; r < rows; r++ {
		b, t, h, ok := owner(r)
		switch {
		case !ok:
			for e := 0; e < d; e++ {
				x[r*d+e] = 1
			}
		case t/d == pass:
			x[r*d+probeChannel(t, h, b, d)] = 1
		}
	}
	return x
}

// pagedOwner maps the rows of a paged pool [pages][hkv][pageSize] to the
// tokens the page table puts there (sequence lengths seqK).
func pagedOwner(table []int32, maxPages, pageSize, hkv int, seqK []int32) func(int) (int, int, int, bool) {
	type tok struct{ b, t int }
	pages := map[int]tok{}
	for b := range seqK {
		for col := 0; col < maxPages; col++ {
			pages[int(table[b*maxPages+col])] = tok{b, col * pageSize}
		}
	}
	return func(r int) (int, int, int, bool) {
		page, h, i := r/(hkv*pageSize), r/pageSize%hkv, r%pageSize
		p, ok := pages[page]
		if !ok || p.t+i >= int(seqK[p.b]) {
			return 0, 0, 0, false
		}
		return p.b, p.t + i, h, true
	}
}

// maxLen is the largest of s.
func maxLen(s []int32) int {
	m := 0
	for _, x := range s {
		m = max(m, int(x))
	}
	return m
}

// ProbePasses is the number of probe passes: one per D tokens of the
// longest sequence.
func (c *Prefill) ProbePasses() int { return (maxLen(c.SeqK) + c.D - 1) / c.D }

// SetProbe replaces Q by zeros and V by the codes of pass (after Gen).
func (c *Prefill) SetProbe(pass int) error {
	var err error
	if c.Q, err = storeOf(c.QD, c.Q.Rows, c.D, make([]float32, c.Q.Rows*c.D)); err != nil {
		return err
	}
	owner := func(r int) (int, int, int, bool) {
		t, h := r/c.Hkv, r%c.Hkv
		b := seqOf(c.CuK, t)
		return b, t - int(c.CuK[b]), h, true
	}
	if c.Paged {
		owner = pagedOwner(c.PageTable, c.MaxPages, c.PageSize, c.Hkv, c.SeqK)
	}
	c.V, err = storeOf(c.KVD, c.V.Rows, c.D, probeRows(c.V.Rows, c.D, pass, owner))
	return err
}

// CheckProbe compares a result of probe pass with the attended sets of the
// reference.
func (c *Prefill) CheckProbe(pass int, got Result) ProbeDiff {
	return checkProbe(got, c.D, pass, c.TotalQ, c.Hkv, c.QHPK, func(h, row int) ([]int, int, int) {
		b := seqOf(c.CuQ, row)
		return c.keys(h, row, nil), int(c.SeqK[b]), b
	})
}

// ProbePasses is the number of probe passes of a decode problem.
func (c *Decode) ProbePasses() int { return (maxLen(c.SeqUsed) + c.D - 1) / c.D }

// SetProbe replaces Q by zeros and V by the codes of pass (after Gen).
func (c *Decode) SetProbe(pass int) error {
	var err error
	if c.Q, err = storeOf(c.QD, c.Q.Rows, c.D, make([]float32, c.Q.Rows*c.D)); err != nil {
		return err
	}
	owner := pagedOwner(c.PageTable, c.MaxPages, c.PageSize, c.Hkv, c.SeqUsed)
	c.V, err = storeOf(c.KVD, c.V.Rows, c.D, probeRows(c.V.Rows, c.D, pass, owner))
	return err
}

// CheckProbe compares a result of probe pass with the reference's sets.
func (c *Decode) CheckProbe(pass int, got Result) ProbeDiff {
	return checkProbe(got, c.D, pass, c.Batch*c.SeqlenQ, c.Hkv, c.QHPK, func(h, row int) ([]int, int, int) {
		b := row / c.SeqlenQ
		return c.keys(h, row, nil), int(c.SeqUsed[b]), b
	})
}

// checkProbe checks every (row, query head) of got for pass: keys(h, row)
// gives the reference's attended tokens, the sequence length and the
// sequence.
func checkProbe(got Result, d, pass, rows, hkv, qhpk int, keys func(h, row int) ([]int, int, int)) ProbeDiff {
	var pd ProbeDiff
	hq := hkv * qhpk
	if len(got.O) != rows*hq*d || len(got.LSE) != rows*hq {
		pd.WrongCount, pd.First = 1, fmt.Sprintf("result of %d O and %d LSE values, want %d and %d", len(got.O), len(got.LSE), rows*hq*d, rows*hq)
		return pd
	}
	in := make([]bool, d)
	for row := 0; row < rows; row++ {
		for h := 0; h < hkv; h++ {
			toks, seqK, b := keys(h, row)
			for e := range in {
				in[e] = false
			}
			for _, t := range toks {
				if t/d == pass {
					in[probeChannel(t, h, b, d)] = true
				}
			}
			for g := 0; g < qhpk; g++ {
				idx := row*hq + h*qhpk + g
				pd.Rows++
				lse := float64(got.LSE[idx])
				if n := float64(len(toks)); (n == 0 && !math.IsInf(lse, -1)) || (n > 0 && !(math.Abs(math.Exp(lse)-n) <= 0.25)) {
					pd.WrongCount++
					if pd.First == "" {
						pd.First = fmt.Sprintf("row %d head %d: exp(LSE) = %g, attends %d tokens", row, h*qhpk+g, math.Exp(lse), len(toks))
					}
				}
				for t := pass * d; t < (pass+1)*d; t++ {
					ch := probeChannel(t, h, b, d)
					want := in[ch] && t < seqK
					if want {
						pd.Attended++
					}
					pd.Tokens++
					if (got.O[idx*d+ch] != 0) != want {
						pd.WrongTokens++
						if pd.First == "" {
							pd.First = fmt.Sprintf("row %d head %d token %d (sequence %d): attended %v, reference %v", row, h*qhpk+g, t, b, !want, want)
						}
					}
				}
			}
		}
	}
	return pd
}

// ProbePrefillMatrix is the prefill probe problems: causal edges with more
// queries than keys (fully masked rows), partial last blocks, -1 entries
// anywhere in the lists, dense ragged batches and paged K/V in shuffled
// pages with unused slots, blk_kv 64 and 128, every Q/K/V variant and
// partial dtype.
func ProbePrefillMatrix() []*Prefill {
	type pc struct {
		v      string
		qd, kd cuda.Dtype
		d      int
		pd     cuda.Dtype
		causal bool
		page   int // 0: dense
		blk    int
	}
	cases := []pc{
		{"bf16", cuda.BF16, cuda.BF16, 64, cuda.F32, true, 0, 64},
		{"bf16", cuda.BF16, cuda.BF16, 128, cuda.E4M3, true, 16, 128},
		{"bf16", cuda.BF16, cuda.BF16, 256, cuda.BF16, false, 64, 64},
		{"fp8", cuda.E4M3, cuda.E4M3, 64, cuda.BF16, true, 64, 64},
		{"fp8", cuda.E4M3, cuda.E4M3, 128, cuda.F16, false, 0, 128},
		{"bf16q-fp8kv", cuda.BF16, cuda.E4M3, 128, cuda.F16, true, 0, 64},
		{"bf16q-nvfp4kv", cuda.BF16, cuda.NVFP4, 64, cuda.F32, true, 64, 64},
		{"fp8q-nvfp4kv", cuda.E4M3, cuda.NVFP4, 128, cuda.BF16, true, 16, 128},
	}
	var out []*Prefill
	for i, p := range cases {
		c := &Prefill{QD: p.qd, KVD: p.kd, D: p.d, PD: p.pd, Causal: p.causal, Paged: p.page > 0, PageSize: p.page, Blk: p.blk,
			Hkv: 2, QHPK: []int{1, 2, 4}[i%3], TopK: 4,
			// 150 queries on 100 keys (causal: the first 50 see none), then
			// 7 and 43 queries on 130 and 200 keys: partial last blocks.
			CuQ: []int32{0, 150, 157, 200}, CuK: []int32{0, 100, 230, 430}}
		c.Name = fmt.Sprintf("prefill/%s/d%d/probe/%s/gqa%d/%s/%s/blk%d", p.v, p.d, p.pd, c.QHPK, causalName(c.Causal), kvName(c), c.Blk)
		out = append(out, c)
	}
	return out
}

// ProbeDecodeMatrix is the decode probe problems: dense and sparse (q2k
// with -1 entries), 1 to 3 query tokens per request, request lengths that
// end inside a page (seqused trims) and a request shorter than a page,
// shuffled pages, split and unsplit.
func ProbeDecodeMatrix() []*Decode {
	type pc struct {
		v      string
		qd, kd cuda.Dtype
		d      int
		sq     int
		page   int
		topK   int
		blk    int
		split  int
	}
	cases := []pc{
		{"bf16", cuda.BF16, cuda.BF16, 128, 1, 16, 0, 0, 4},
		{"bf16", cuda.BF16, cuda.BF16, 64, 3, 64, 4, 48, 0},
		{"fp8", cuda.E4M3, cuda.E4M3, 128, 2, 16, 4, 64, 2},
		{"fp8", cuda.E4M3, cuda.E4M3, 256, 1, 128, 0, 0, 0},
		{"bf16q-fp8kv", cuda.BF16, cuda.E4M3, 128, 3, 64, 0, 0, 1},
		{"bf16q-nvfp4kv", cuda.BF16, cuda.NVFP4, 64, 2, 64, 0, 0, 0},
	}
	var out []*Decode
	for i, p := range cases {
		c := &Decode{QD: p.qd, KVD: p.kd, D: p.d, Batch: 4, SeqlenQ: p.sq, Hkv: 2, QHPK: []int{1, 4, 8}[i%3], PageSize: p.page,
			TopK: p.topK, Blk: p.blk, FixedSplit: p.split, SeqUsed: []int32{int32(p.sq), 70, 129, 300}}
		split := "auto-split"
		if p.split > 0 {
			split = fmt.Sprintf("fixed-split%d", p.split)
		}
		c.Name = fmt.Sprintf("decode/%s/d%d/probe/gqa%d/sq%d/page%d/%s/%s", p.v, p.d, c.QHPK, c.SeqlenQ, c.PageSize, sparseName(p.topK > 0), split)
		out = append(out, c)
	}
	return out
}
