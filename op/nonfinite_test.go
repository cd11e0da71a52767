package op

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// withPrefillPath runs the rest of a (sub)test with the process's prefill
// path set to p (attn.SetProcessPrefillPath).
func withPrefillPath(t *testing.T, p attn.PrefillPath) {
	prev := attn.ProcessPrefillPath()
	attn.SetProcessPrefillPath(p)
	t.Cleanup(func() { attn.SetProcessPrefillPath(prev) })
}

// Tests of the non-finite input policy that docs/semantics.md states
// ("NaN and Inf in Q, K and V"), of V near the BF16 maximum and of
// negative softmax scales.

// nonFiniteSpec is a non-causal prefill problem where every query selects
// both blocks of its sequence.
func nonFiniteSpec() (sparseSpec, *sparseProblem) {
	s := sparseSpec{seed: 21, seqQ: []int{3, 2}, seqK: []int{256, 200}, hq: 2, hkv: 1, d: 64, topK: 2, blk: 128,
		qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
	pr := buildSparse(s)
	q2k := validate.Backing[int32](pr.q2k)
	for i := range q2k {
		q2k[i] = int32(i % 2)
	}
	return s, pr
}

var bf16NaN = lowp.BF16(float32(math.NaN()))

// rowsEqual reports whether rows [r0, r1) of O (D columns) and LSE match.
func rowsEqual(a, b *Result, d, r0, r1 int) bool {
	oa, ob := validate.Backing[lowp.BFloat16](a.Out), validate.Backing[lowp.BFloat16](b.Out)
	la, lb := validate.Backing[float32](a.LSE), validate.Backing[float32](b.LSE)
	return slices.Equal(oa[r0*d:r1*d], ob[r0*d:r1*d]) && slices.Equal(la[r0:r1], lb[r0:r1])
}

// maskedRow fails unless row r is all zero with LSE = -inf.
func maskedRow(t *testing.T, what string, res *Result, d, r int) {
	t.Helper()
	for c, x := range validate.Backing[lowp.BFloat16](res.Out)[r*d : (r+1)*d] {
		if x.Float32() != 0 {
			t.Fatalf("%s: O[%d][%d] = %v, want 0", what, r, c, x.Float32())
		}
	}
	if l := validate.Backing[float32](res.LSE)[r]; !math.IsInf(float64(l), -1) {
		t.Fatalf("%s: LSE[%d] = %v, want -inf", what, r, l)
	}
}

// TestNonFiniteQ: a NaN or ±Inf in a query row makes every score of that
// (query, head) row non-finite: the row is fully masked (O = 0,
// LSE = -inf); every other row is bit-identical to the clean run.
func TestNonFiniteQ(t *testing.T) {
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		s, pr := nonFiniteSpec()
		clean := runSparse(t, s, pr, 2, nil)
		const row = 3 // query 1, head 1
		validate.Backing[lowp.BFloat16](pr.q)[row*s.d+5] = lowp.BF16(x)
		res := runSparse(t, s, pr, 2, nil)
		maskedRow(t, "prefill", res, s.d, row)
		if !rowsEqual(clean, res, s.d, 0, row) || !rowsEqual(clean, res, s.d, row+1, 10) {
			t.Fatalf("q = %v: other rows changed", x)
		}

		ds := misuseSpec()
		dpr := buildDecode(ds)
		dclean := runDecodeSpec(t, ds, dpr)
		validate.Backing[lowp.BFloat16](dpr.q)[row*ds.d+5] = lowp.BF16(x)
		dres := runDecodeSpec(t, ds, dpr)
		maskedRow(t, "decode", dres, ds.d, row)
		if !rowsEqual(dclean, dres, ds.d, 0, row) || !rowsEqual(dclean, dres, ds.d, row+1, 16) {
			t.Fatalf("decode q = %v: other rows changed", x)
		}
	}
}

// TestNonFiniteK: a NaN in K at a visible key makes that key's scores NaN.
// The KV-major prefill path drops the (query, block) pair that holds the
// key, exactly as if the block were not selected; the query-major path,
// whose accumulation unit is the whole (query, head) row, masks the rows
// that selected the block (O = 0, LSE = -inf) and leaves every other row
// bit-identical; decode drops the KV split that holds it (with
// DisableSplitKV: the whole request, fully masked).
func TestNonFiniteK(t *testing.T) {
	const key = 140 // sequence 0, block 1
	t.Run("kv", func(t *testing.T) {
		withPrefillPath(t, attn.PathKV)
		s, pr := nonFiniteSpec()
		validate.Backing[lowp.BFloat16](pr.k)[key*s.d+7] = bf16NaN
		res := runSparse(t, s, pr, 2, nil)
		// Reference: sequence 0's queries (rows 0..5) without block 1.
		q2k := validate.Backing[int32](pr.q2k)
		for gq := 0; gq < 3; gq++ {
			for i := 0; i < s.topK; i++ {
				if q2k[gq*s.topK+i] == 1 {
					q2k[gq*s.topK+i] = -1
				}
			}
		}
		checkAgainstReference(t, s, pr, res)
	})
	t.Run("query", func(t *testing.T) {
		withPrefillPath(t, attn.PathQuery)
		s, pr := nonFiniteSpec()
		clean := runSparse(t, s, pr, 2, nil)
		validate.Backing[lowp.BFloat16](pr.k)[key*s.d+7] = bf16NaN
		res := runSparse(t, s, pr, 2, nil)
		for r := 0; r < 6; r++ { // sequence 0's queries select block 1
			maskedRow(t, "prefill", res, s.d, r)
		}
		if !rowsEqual(clean, res, s.d, 6, 10) {
			t.Fatal("prefill: sequence 1 changed")
		}
	})

	ds := misuseSpec()
	ds.disableSplit = true
	dpr := buildDecode(ds)
	dclean := runDecodeSpec(t, ds, dpr)
	page := dpr.ptv[0*dpr.cols+1] // request 0, token 16..31
	validate.Backing[lowp.BFloat16](dpr.k)[((int(page)*ds.hkv+0)*ds.pageSize+3)*ds.d] = bf16NaN
	dres := runDecodeSpec(t, ds, dpr)
	// Request 0 is rows 0..3 (2 queries x 4 heads); KV head 0 serves
	// query heads 0 and 1.
	for _, r := range []int{0, 1, 4, 5} {
		maskedRow(t, "decode", dres, ds.d, r)
	}
	for _, r := range []int{2, 3, 6, 7} {
		if !rowsEqual(dclean, dres, ds.d, r, r+1) {
			t.Fatalf("decode: row %d (other KV head) changed", r)
		}
	}
	if !rowsEqual(dclean, dres, ds.d, 8, 16) {
		t.Fatal("decode: request 1 changed")
	}
}

// TestNonFiniteV: a NaN or Inf in V column c propagates to column c of
// every row whose accumulation reads that key (IEEE arithmetic: p*NaN and
// 0*Inf are NaN), including rows for which causal masking hides the key
// inside a block they read; other columns and the LSE are unchanged.
func TestNonFiniteV(t *testing.T) {
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		s, pr := nonFiniteSpec()
		clean := runSparse(t, s, pr, 2, nil)
		const key, col = 140, 9
		validate.Backing[lowp.BFloat16](pr.v)[key*s.d+col] = lowp.BF16(x)
		res := runSparse(t, s, pr, 2, nil)
		o, oc := validate.Backing[lowp.BFloat16](res.Out), validate.Backing[lowp.BFloat16](clean.Out)
		for r := 0; r < 10; r++ {
			for c := 0; c < s.d; c++ {
				got := float64(o[r*s.d+c].Float32())
				switch {
				case r < 6 && c == col:
					if !math.IsNaN(got) && !math.IsInf(got, 0) {
						t.Fatalf("v = %v: O[%d][%d] = %v, want non-finite", x, r, c, got)
					}
				case o[r*s.d+c] != oc[r*s.d+c]:
					t.Fatalf("v = %v: O[%d][%d] changed", x, r, c)
				}
			}
		}
		if !bytes.Equal(res.LSE.Header.Raw, clean.LSE.Header.Raw) {
			t.Fatalf("v = %v: LSE changed", x)
		}
	}
	// Causal: key 255 is hidden from query 0 (it sees keys <= 254) but lies
	// in block 1, which query 0 reads: its weight is 0 and 0*NaN = NaN.
	s := sparseSpec{seed: 3, seqQ: []int{2}, seqK: []int{256}, hq: 1, hkv: 1, d: 64, topK: 2, blk: 128, causal: true,
		qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
	pr := buildSparse(s)
	q2k := validate.Backing[int32](pr.q2k)
	for i := range q2k {
		q2k[i] = int32(i % 2)
	}
	validate.Backing[lowp.BFloat16](pr.v)[255*s.d+3] = bf16NaN
	res := runSparse(t, s, pr, 1, nil)
	if got := validate.Backing[lowp.BFloat16](res.Out)[3].Float32(); !math.IsNaN(float64(got)) {
		t.Fatalf("causally hidden NaN key in a read block: O[0][3] = %v, want NaN (docs/semantics.md)", got)
	}
}

// TestVNearBF16MaxOp (through the op API): V values at the BF16
// maximum give finite outputs that match the reference, prefill and decode.
func TestVNearBF16MaxOp(t *testing.T) {
	const big = lowp.BFloat16(0x7f7f) // 3.3895e38
	s := sparseSpec{seed: 8, seqQ: []int{5, 4}, seqK: []int{300, 200}, hq: 4, hkv: 2, d: 64, topK: 3, blk: 128, causal: true,
		qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
	pr := buildSparse(s)
	v := validate.Backing[lowp.BFloat16](pr.v)
	for i := range v {
		if i%3 == 0 {
			v[i] = big
		} else if i%3 == 1 {
			v[i] = big | 0x8000
		}
	}
	pr.ref.v = func(b, h, tok int) []float64 {
		r := (int(validate.Backing[int32](pr.cuK)[b])+tok)*s.hkv + h
		out := make([]float64, s.d)
		for c := range out {
			out[c] = float64(v[r*s.d+c].Float32())
		}
		return out
	}
	pr.maxV = float64(big.Float32())
	res := runSparse(t, s, pr, 2, nil)
	for i, x := range validate.Backing[lowp.BFloat16](res.Out) {
		if f := float64(x.Float32()); math.IsInf(f, 0) || math.IsNaN(f) {
			t.Fatalf("prefill O[%d] = %v", i, f)
		}
	}
	checkAgainstReference(t, s, pr, res)

	ds := misuseSpec()
	dpr := buildDecode(ds)
	dv := validate.Backing[lowp.BFloat16](dpr.v)
	for i := range dv {
		if i%2 == 0 {
			dv[i] = big
			dpr.vv[i] = float64(big.Float32())
		}
	}
	dpr.maxV = float64(big.Float32())
	dres := runDecodeSpec(t, ds, dpr)
	for i, x := range validate.Backing[lowp.BFloat16](dres.Out) {
		if f := float64(x.Float32()); math.IsInf(f, 0) || math.IsNaN(f) {
			t.Fatalf("decode O[%d] = %v", i, f)
		}
	}
	checkDecode(t, ds, dpr, dres)
}

// TestNegativeScalePrefill: a negative softmax_scale is accepted
// and matches the reference (the softmax is defined for any real logits).
func TestNegativeScalePrefill(t *testing.T) {
	for _, paged := range []bool{false, true} {
		s := sparseSpec{seed: 17, seqQ: []int{7, 3}, seqK: []int{260, 100}, hq: 4, hkv: 2, d: 128, topK: 3, blk: 128, causal: true,
			paged: paged, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32, scale: -0.3, temperature: 2}
		pr := buildSparse(s)
		checkAgainstReference(t, s, pr, runSparse(t, s, pr, 2, nil))
	}
}
