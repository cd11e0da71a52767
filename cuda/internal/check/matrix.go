package check

import (
	"fmt"

	"github.com/sparseattn/msa/cuda"
)

// PrefillMatrix is the correctness matrix of the sparse prefill: every
// tensor-core variant (BF16, FP8, BF16-Q + FP8-K/V, NVFP4 K/V with BF16
// and E4M3 Q) at D 64, 128 and 256; every partial dtype; causal and not;
// dense (ragged batches) and paged (pages of 16 to 256 tokens); GQA 1 to 16;
// blk_kv 64 and 128; temperature LSE; and rows that select no block or whose
// causal limit hides every key (O = 0, LSE = -inf).
func PrefillMatrix() []*Prefill {
	type variant struct {
		name   string
		qd, kd cuda.Dtype
	}
	variants := []variant{{"bf16", cuda.BF16, cuda.BF16}, {"fp8", cuda.E4M3, cuda.E4M3}, {"bf16q-fp8kv", cuda.BF16, cuda.E4M3},
		{"bf16q-nvfp4kv", cuda.BF16, cuda.NVFP4}}
	partials := []cuda.Dtype{cuda.F32, cuda.BF16, cuda.F16, cuda.E4M3}
	gqa := []int{1, 2, 4, 8, 16}
	pages := []int{16, 64, 128, 256}
	var out []*Prefill
	i := 0
	for _, v := range variants {
		for _, d := range []int{64, 128, 256} {
			c := &Prefill{
				QD: v.qd, KVD: v.kd, D: d, PD: partials[i%len(partials)], QHPK: gqa[i%len(gqa)], Hkv: 1 + i%2,
				Causal: i%3 != 1, Paged: i%2 == 1, PageSize: pages[i%len(pages)], TopK: 4 + 4*(i%3), Blk: 128,
			}
			if i%4 == 3 {
				c.Blk = 64
			}
			if i%5 == 2 {
				c.Temp = 0.7
			}
			// Ragged batches: a sequence with more queries than keys (causal:
			// its first queries see no key), one with few queries, one long.
			c.CuQ = []int32{0, 150, 157, 157 + int32(40+17*i)}
			c.CuK = []int32{0, 100, 100 + int32(300+64*i), 100 + int32(300+64*i) + 900}
			c.Name = fmt.Sprintf("prefill/%s/d%d/%s/gqa%d/%s/%s%s", v.name, d, c.PD, c.QHPK, causalName(c.Causal), kvName(c), tempName(c.Temp))
			out = append(out, c)
			i++
		}
	}
	// E4M3 Q with NVFP4 K/V (converted to bf16 on the tensor-core path).
	out = append(out, &Prefill{Name: "prefill/fp8q-nvfp4kv/d128/bf16/gqa4/causal/paged64", QD: cuda.E4M3, KVD: cuda.NVFP4, D: 128,
		PD: cuda.BF16, QHPK: 4, Hkv: 2, Causal: true, Paged: true, PageSize: 64, TopK: 8, Blk: 128,
		CuQ: []int32{0, 200, 333}, CuK: []int32{0, 700, 1500}})
	return out
}

func causalName(c bool) string {
	if c {
		return "causal"
	}
	return "noncausal"
}

func kvName(c *Prefill) string {
	if c.Paged {
		return fmt.Sprintf("paged%d", c.PageSize)
	}
	return "dense"
}

func tempName(t float32) string {
	if t > 0 {
		return "/temp"
	}
	return ""
}

// DecodeMatrix is the decode correctness matrix: BF16, FP8 and BF16 Q with
// FP8 K/V (the tensor-core variants) and NVFP4 K/V (the pipelined sm_90a
// decode; portable on other families), dense and sparse (q2k), split-KV
// and not, D 64 / 128 / 256, GQA 1 to 16, several query tokens.
func DecodeMatrix() []*Decode {
	var out []*Decode
	i := 0
	for _, dt := range []struct {
		name   string
		qd, kd cuda.Dtype
	}{{"bf16", cuda.BF16, cuda.BF16}, {"fp8", cuda.E4M3, cuda.E4M3}, {"bf16q-fp8kv", cuda.BF16, cuda.E4M3}} {
		for _, d := range []int{64, 128, 256} {
			for _, sparse := range []bool{false, true} {
				c := &Decode{QD: dt.qd, KVD: dt.kd, D: d, Batch: 3 + i%4, SeqlenQ: 1 + i%3, Hkv: 1 + i%2, QHPK: []int{1, 4, 8, 16}[i%4],
					PageSize: []int{16, 64, 128}[i%3]}
				c.SeqUsed = make([]int32, c.Batch)
				for b := range c.SeqUsed {
					c.SeqUsed[b] = int32(c.SeqlenQ + (b*977+i*131)%3000)
				}
				split := "auto-split"
				if i%2 == 0 {
					c.FixedSplit, split = 4, "fixed-split4"
				}
				if sparse {
					c.TopK, c.Blk = 8, []int{64, 128, 48}[i%3]
				}
				c.Name = fmt.Sprintf("decode/%s/d%d/gqa%d/sq%d/page%d/%s/%s", dt.name, d, c.QHPK, c.SeqlenQ, c.PageSize, sparseName(sparse), split)
				out = append(out, c)
				i++
			}
		}
	}
	out = append(out, &Decode{Name: "decode/bf16q-nvfp4kv/d64/gqa4/sq2/page64/dense/auto-split", QD: cuda.BF16, KVD: cuda.NVFP4, D: 64,
		Batch: 8, SeqlenQ: 2, Hkv: 4, QHPK: 4, PageSize: 64, SeqUsed: []int32{64, 200, 1000, 3, 700, 128, 129, 900}})
	// NVFP4 K/V at D 128 and 256 (the pipelined sm_90a decode's NVFP4 variants; portable elsewhere)
	out = append(out, &Decode{Name: "decode/fp8q-nvfp4kv/d128/gqa8/sq1/page16/dense/fixed-split4", QD: cuda.E4M3, KVD: cuda.NVFP4, D: 128,
		Batch: 3, SeqlenQ: 1, Hkv: 2, QHPK: 8, PageSize: 16, FixedSplit: 4, SeqUsed: []int32{900, 77, 2000}},
		&Decode{Name: "decode/bf16q-nvfp4kv/d256/gqa4/sq2/page32/sparse/auto-split", QD: cuda.BF16, KVD: cuda.NVFP4, D: 256,
			Batch: 2, SeqlenQ: 2, Hkv: 1, QHPK: 4, PageSize: 32, TopK: 4, Blk: 96, SeqUsed: []int32{1300, 200}})
	return append(out, LongDecodeCases()...)
}

// LongDecodeCases are batch-1 and small-batch decodes of long contexts at
// the bench shape, each with the CUDA executor's automatic split (every SM
// gets a chunk of the one request) and without a split (one CTA per
// request and head): the same inputs must give the same attention either way.
func LongDecodeCases() []*Decode {
	var out []*Decode
	for _, c := range []struct {
		name   string
		qd, kd cuda.Dtype
		seq    []int32
	}{
		{"bf16/b1/32K", cuda.BF16, cuda.BF16, []int32{32768}},
		{"fp8/b1/24K", cuda.E4M3, cuda.E4M3, []int32{24000}},
		{"bf16q-fp8kv/b2/ragged", cuda.BF16, cuda.E4M3, []int32{20000, 3001}},
	} {
		for _, noSplit := range []bool{false, true} {
			split := "auto-split"
			if noSplit {
				split = "no-split"
			}
			out = append(out, &Decode{Name: fmt.Sprintf("decode/long/%s/d128/gqa16/page128/%s", c.name, split), QD: c.qd, KVD: c.kd, D: BenchD,
				Batch: len(c.seq), SeqlenQ: 1, Hkv: BenchHkv, QHPK: BenchHq / BenchHkv, PageSize: BenchPage, SeqUsed: c.seq, NoSplit: noSplit})
		}
	}
	return out
}

func sparseName(s bool) string {
	if s {
		return "sparse"
	}
	return "dense"
}

// Bench shapes (bench/suite.go defaults): Hq 16, Hkv 1, D 128, topK 16,
// blk_kv 128, causal prefill of one sequence; decode with pages of 128
// tokens and one query token.
const (
	BenchHq   = 16
	BenchHkv  = 1
	BenchD    = 128
	BenchTopK = 16
	BenchBlk  = 128
	BenchPage = 128
)

// TimingPrefill is the timed prefill of T tokens at the bench's shape
// (generated by GenTiming in one of the selection patterns).
func TimingPrefill(name string, T int, q, kv cuda.Dtype) *Prefill {
	return &Prefill{Name: name, CuQ: []int32{0, int32(T)}, CuK: []int32{0, int32(T)}, Hkv: BenchHkv, QHPK: BenchHq / BenchHkv,
		D: BenchD, TopK: BenchTopK, Blk: BenchBlk, Causal: true, QD: q, KVD: kv, PD: cuda.BF16}
}

// TimingDecode is the timed decode of batch requests of ctx tokens.
func TimingDecode(name string, batch, ctx int, dt cuda.Dtype) *Decode {
	s := make([]int32, batch)
	for i := range s {
		s[i] = int32(ctx)
	}
	return &Decode{Name: name, Batch: batch, SeqlenQ: 1, Hkv: BenchHkv, QHPK: BenchHq / BenchHkv, D: BenchD, PageSize: BenchPage,
		SeqUsed: s, QD: dt, KVD: dt}
}
