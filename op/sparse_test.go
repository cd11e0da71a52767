package op

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Tolerances, per path. O is compared as |o - ref| <= rtol*|ref| + atol*maxV
// (maxV = the largest |V| value after any output scale):
//   - O is stored as BF16: relative error <= 2^-9, so rtol = 2^-8 leaves 2x
//     room for float32 reassociation (exp2 polynomial, accumulation order).
//   - BF16 partials add 2^-9 * |O_s| <= 2^-9 * maxV per slot; FP16 partials
//     2^-11 * maxV; FP8 partials 2^-4 * maxV (3 mantissa bits).
//   - FP8 P.V rounds P to e4m3 (relative error <= 2^-4 per weight) before the
//     weighted sum, so O moves by at most 2^-4 * maxV.
//   - LSE is float32 throughout: 2e-5 absolute plus 2e-5 relative covers the
//     exp2 polynomial and the float32 dot products at D = 256.
func oTolerance(partial tensor.Dtype, pvFP8, bf16 bool) (rtol, atol float64) {
	rtol = 1.0 / 256
	atol = 1e-6
	switch partial {
	case BFloat16, tensor.Dtype{}:
		atol += 1.0 / 256
	case Float16:
		atol += 1.0 / 1024
	case Float8E4M3FN:
		atol += 1.0 / 14
	}
	if pvFP8 {
		atol += 1.0 / 14
	}
	// A call with bf16 products (bf16: a prefill on the bf16 twin of the
	// tier, attn.BF16Products; a decode on a bf16 tier made active,
	// tile.BF16Products) rounds P to bf16 before P.V (relative error 2^-9
	// per probability, so at most 2^-9 of the largest |v| in the sum), on
	// top of whatever the partial dtype adds: twice that bound.
	if bf16 {
		atol += 1.0 / 256
	}
	return
}

// dtypeOf maps a test spec's dtype name to the kernels' dtype.
func dtypeOf(name string) attn.Dtype {
	switch name {
	case "e4m3":
		return attn.E4M3
	case "nvfp4":
		return attn.NVFP4
	}
	return attn.BF16
}

// specBF16 reports whether the prefill call of s runs bf16 products
// (attn.BF16Products of its Q and K/V dtypes).
func specBF16(s sparseSpec) bool {
	return attn.BF16Products(dtypeOf(s.qDt), dtypeOf(s.kvDt), dtypeOf(s.kvDt))
}

// runSparse builds the CSR, runs SparseAttentionFunc (or the NVFP4 variant)
// and returns the result.
func runSparse(t testing.TB, s sparseSpec, pr *sparseProblem, workers int, sched *Schedule) *Result {
	t.Helper()
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
	if err != nil {
		t.Fatalf("%v: K2QCSRFunc: %v", s, err)
	}
	args := SparseArgs{
		CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, Causal: s.causal,
		SoftmaxScale: s.scale, Temperature: s.temperature,
		ReturnTemperatureLSE: s.temperature != 0,
		PartialDtype:         s.partial, Workers: workers, Schedule: sched, PVDtype: s.pv,
	}
	if s.paged {
		args.PageTable, args.SeqUsedK = pr.pageTable, pr.seqused
	}
	var res *Result
	if s.kvDt == "nvfp4" {
		var kg, vg tensor.Tensor
		if pr.kGlobal != nil {
			kg = pr.kGlobal
		}
		if pr.vGlobal != nil {
			vg = pr.vGlobal
		}
		res, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, kg, vg, rp, qi, s.topK, args)
	} else {
		res, err = SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, args)
	}
	if err != nil {
		t.Fatalf("%v: %v", s, err)
	}
	return res
}

// checkAgainstReference compares a result with the float64 reference.
func checkAgainstReference(t testing.TB, s sparseSpec, pr *sparseProblem, res *Result) {
	t.Helper()
	ref := referenceSparse(&pr.ref)
	pvFP8 := s.pv == Float8E4M3FN || (s.pv == (tensor.Dtype{}) && s.qDt == "e4m3")
	rtol, atol := oTolerance(s.partial, pvFP8, specBF16(s))
	o := validate.Backing[lowp.BFloat16](res.Out)
	lse := validate.Backing[float32](res.LSE)
	d := s.d
	bad := 0
	for row := range ref.o {
		for c := 0; c < d; c++ {
			got := float64(o[row*d+c].Float32())
			want := ref.o[row][c]
			if math.IsNaN(got) || math.Abs(got-want) > rtol*math.Abs(want)+atol*pr.maxV {
				if bad < 5 {
					t.Errorf("%v: O[row %d][%d] = %g, want %g", s, row, c, got, want)
				}
				bad++
			}
		}
		checkLSE(t, s, "LSE", row, float64(lse[row]), ref.lse[row], specBF16(s), &bad)
		if s.temperature != 0 {
			checkLSE(t, s, "TemperatureLSE", row, float64(validate.Backing[float32](res.TemperatureLSE)[row]), ref.tlse[row], specBF16(s), &bad)
		}
	}
	if bad > 0 {
		t.Fatalf("%v: %d mismatches", s, bad)
	}
}

func checkLSE(t testing.TB, s sparseSpec, what string, row int, got, want float64, bf16 bool, bad *int) {
	t.Helper()
	tol := 2e-5 + 2e-5*math.Abs(want)
	// bf16 products (bf16, as for oTolerance) take the operands of Q.K in
	// bf16: exact for BF16 and FP8 inputs and for NVFP4 K whose global
	// scale goes into the score scale, but an NVFP4 K whose global scale
	// stays in its decoding (one the score scale cannot absorb), or any K
	// of a bf16 tier made active, is off by up to 2^-9 per element, so a
	// score by up to 2^-8 of its magnitude; the LSE, within about the
	// largest score, likewise.
	if bf16 {
		tol = 0x1p-8 * math.Max(1, math.Abs(want))
	}
	// The outputs are float32: a value beyond its range (a temperature LSE
	// of large scores over a small T) is ±inf there, and one within tol of
	// the range's end may round either way.
	beyond := math.Abs(want)+tol > math.MaxFloat32 && math.IsInf(got, int(math.Copysign(1, want)))
	ok := (math.IsInf(want, -1) && math.IsInf(got, -1)) || math.Abs(got-want) <= tol || beyond
	if !ok {
		if *bad < 5 {
			t.Errorf("%v: %s[%d] = %g, want %g", s, what, row, got, want)
		}
		*bad++
	}
}

// TestSparseMatrix compares SparseAttentionFunc with the float64 reference over
// ragged batches with empty sequences, -1 padding, causal and non-causal,
// dense and paged (shuffled page tables, trimmed page-table capacity),
// every dtype path and partial dtype, every GQA ratio, several topK and D.
func TestSparseMatrix(t *testing.T) {
	type shape struct{ seqQ, seqK []int }
	shapes := []shape{
		{[]int{5, 0, 37}, []int{300, 0, 190}},  // empty sequence in the middle
		{[]int{64}, []int{64}},                 // square, causal diagonal
		{[]int{3, 20}, []int{129, 1}},          // one key, a key past a block edge
		{[]int{40, 7, 0}, []int{20, 256, 128}}, // seqQ > seqK: fully masked causal rows
		{[]int{0, 0}, []int{5, 0}},             // no queries at all
		{[]int{17}, []int{517}},                // many blocks
		{[]int{9, 11, 2, 30}, []int{33, 400, 2, 129}},
	}
	dtypes := []struct{ q, kv string }{{"bf16", "bf16"}, {"e4m3", "e4m3"}, {"bf16", "e4m3"}}
	partials := []tensor.Dtype{tensor.Float32, BFloat16, Float16, Float8E4M3FN}
	gqas := [][2]int{{2, 2}, {4, 2}, {8, 2}, {8, 1}, {16, 1}}
	topKs := []int{1, 4, 5, 8, 16, 32, 64}
	dims := []int{64, 128, 256}
	n := 0
	for si, sh := range shapes {
		for di, dt := range dtypes {
			for ci := 0; ci < 2; ci++ {
				for pi := 0; pi < 2; pi++ {
					n++
					g := gqas[(si+di+ci+n)%len(gqas)]
					s := sparseSpec{
						seed: uint64(n), seqQ: sh.seqQ, seqK: sh.seqK,
						hq: g[0], hkv: g[1], d: dims[(si+ci+n)%len(dims)],
						topK: topKs[(si*3+di+pi+n)%len(topKs)], blk: 128,
						causal: ci == 1, paged: pi == 1, trim: n%2 == 0,
						qDt: dt.q, kvDt: dt.kv, partial: partials[n%len(partials)],
					}
					if n%5 == 0 {
						s.temperature = 2
					}
					if n%7 == 0 {
						s.scale = 0.3
					}
					if n%11 == 0 {
						s.blk = 32
					}
					if s.paged && s.blk != 128 {
						s.blk = 128
					}
					pr := buildSparse(s)
					res := runSparse(t, s, pr, 2, nil)
					checkAgainstReference(t, s, pr, res)
				}
			}
		}
	}
}
