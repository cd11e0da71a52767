package op_test

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// Shared-prefix attention: 128 suffix queries attend a 256-token prefix
// (all of it visible) and their own 128 tokens (causally). The two parts
// are computed separately, as when the prefix's K/V is shared by many
// requests, and merged; the result equals causal attention over the
// concatenated 384 keys within the tolerance derived below.
func ExampleMergeStatesFunc_sharedPrefix() {
	const hq, hkv, d, pre, suf = 2, 1, 64, 256, 128
	q := bf16(suf, hq, d)
	kAll, vAll := patternBF16(pre+suf, hkv, d, 1), patternBF16(pre+suf, hkv, d, 2)
	kPre, vPre := tokenRows(kAll, 0, pre), tokenRows(vAll, 0, pre)
	kSuf, vSuf := tokenRows(kAll, pre, pre+suf), tokenRows(vAll, pre, pre+suf)

	// attend runs sparse attention of every query over every block of keys.
	attend := func(k, v *tensor.Dense, causal bool) *op.Result {
		n := k.Shape()[0]
		blocks := n / 128
		q2k := make([]int32, 0, suf*blocks)
		for i := 0; i < suf; i++ {
			for j := 0; j < blocks; j++ {
				q2k = append(q2k, int32(j))
			}
		}
		cuQ, cuK := i32([]int{2}, 0, suf), i32([]int{2}, 0, int32(n))
		rowPtr, qIdx, err := op.K2QCSRFunc(i32([]int{hkv, suf, blocks}, q2k...), cuQ, cuK, 128)
		if err != nil {
			panic(err)
		}
		res, err := op.SparseAttentionFunc(q, k, v, rowPtr, qIdx, blocks, op.SparseArgs{
			CuSeqlensQ: cuQ, CuSeqlensK: cuK, Causal: causal})
		if err != nil {
			panic(err)
		}
		return res
	}
	prefix := attend(kPre, vPre, false) // every prefix key precedes every query
	suffix := attend(kSuf, vSuf, true)
	merged, err := op.MergeStatesFunc(
		[]tensor.Tensor{prefix.Out, suffix.Out}, []tensor.Tensor{prefix.LSE, suffix.LSE}, op.MergeArgs{})
	if err != nil {
		panic(err)
	}
	// Bottom-right causal alignment puts query i at key position 256 + i.
	full := attend(kAll, vAll, true)

	// Each key block's partial is the same in both computations; they
	// differ in roundings to BF16 (unit roundoff u = 2^-8 of values at most
	// max|V|): the prefix's and the suffix's outputs (together at most
	// u*max|V|, their weights summing to 1) and the final roundings of
	// both results (u*max|V| each), so |merged - full| <= 3u*max|V|. LSEs
	// are float32 sums of e^x within 2 ulp over 3 blocks, in both: within
	// 2^-20 * (|LSE| + 3).
	mo, _ := op.Float32s(merged.Out)
	fo, _ := op.Float32s(full.Out)
	vf, _ := op.Float32s(vAll)
	maxV := 0.0
	for _, x := range vf {
		maxV = math.Max(maxV, math.Abs(float64(x)))
	}
	oOK := true
	for i := range mo {
		oOK = oOK && math.Abs(float64(mo[i]-fo[i])) <= 3*0x1p-8*maxV
	}
	ml, fl := merged.LSE.Data().([]float32), full.LSE.Data().([]float32)
	lOK := true
	for i := range ml {
		lOK = lOK && math.Abs(float64(ml[i]-fl[i])) <= 0x1p-20*(math.Abs(float64(fl[i]))+3)
	}
	fmt.Println(merged.Out.Shape(), merged.LSE.Shape())
	fmt.Println("O within 3*2^-8*max|V|:", oOK)
	fmt.Println("LSE within 2^-20*(|LSE|+3):", lOK)
	// Output:
	// (128, 2, 64) (128, 2)
	// O within 3*2^-8*max|V|: true
	// LSE within 2^-20*(|LSE|+3): true
}

// patternBF16 returns a BF16 [n, h, d] tensor of a pseudo-random pattern in
// [-1, 1) (seed picks the pattern).
func patternBF16(n, h, d int, seed uint32) *tensor.Dense {
	data := make([]lowp.BFloat16, n*h*d)
	x := seed*2654435761 + 1
	for i := range data {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		data[i] = lowp.BF16(float32(x%2048)/1024 - 1)
	}
	return tensor.New(tensor.WithShape(n, h, d), tensor.WithBacking(data))
}

// tokenRows copies rows [a, b) of a BF16 [n, h, d] tensor.
func tokenRows(t *tensor.Dense, a, b int) *tensor.Dense {
	s := t.Shape()
	per := s[1] * s[2]
	data := append([]lowp.BFloat16(nil), t.Data().([]lowp.BFloat16)[a*per:b*per]...)
	return tensor.New(tensor.WithShape(b-a, s[1], s[2]), tensor.WithBacking(data))
}
