package op

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// f32Problem is a generated problem with float32 q, k, v (the BF16 values
// of buildSparse widened exactly) and float64 copies for the reference.
type f32Problem struct {
	*sparseProblem
	spec       sparseSpec
	q, k, v    *tensor.Dense
	qf, kf, vf []float64
}

// widenTest decodes a BF16 tensor to float32 and float64 copies.
func widenTest(t *tensor.Dense) (*tensor.Dense, []float64) {
	src := validate.Backing[lowp.BFloat16](t)
	dst := make([]float32, len(src))
	lowp.DecodeBF16(dst, src)
	f := make([]float64, len(dst))
	for i, x := range dst {
		f[i] = float64(x)
	}
	return tensor.New(tensor.WithShape(t.Shape().Clone()...), tensor.WithBacking(dst)), f
}

func newF32Problem(s sparseSpec) *f32Problem {
	s.qDt, s.kvDt = "bf16", "bf16"
	fp := &f32Problem{sparseProblem: buildSparse(s), spec: s}
	fp.q, fp.qf = widenTest(fp.sparseProblem.q)
	fp.k, fp.kf = widenTest(fp.sparseProblem.k)
	fp.v, fp.vf = widenTest(fp.sparseProblem.v)
	return fp
}

// refWith returns the reference case of the problem with q, k, v replaced
// by the given float64 data (same layouts).
func (fp *f32Problem) refWith(q, k, v []float64) *refCase {
	rc := fp.ref
	s := fp.spec
	d := s.d
	cuK := validate.Int32s(fp.cuK)
	rowOf := func(b, h, t int) int { return (int(cuK[b])+t)*s.hkv + h }
	if s.paged {
		pt := validate.Int32s(fp.pageTable)
		cols := fp.pageTable.Shape()[1]
		ps := s.blk
		rowOf = func(b, h, t int) int { return (int(pt[b*cols+t/ps])*s.hkv+h)*ps + t%ps }
	}
	rc.q = make([][]float64, len(q)/d)
	for i := range rc.q {
		rc.q[i] = q[i*d : (i+1)*d]
	}
	rc.k = func(b, h, t int) []float64 { r := rowOf(b, h, t); return k[r*d : (r+1)*d] }
	rc.v = func(b, h, t int) []float64 { r := rowOf(b, h, t); return v[r*d : (r+1)*d] }
	return &rc
}

// args returns the SparseArgs of the problem.
func (fp *f32Problem) args() SparseArgs {
	a := SparseArgs{CuSeqlensQ: fp.cuQ, CuSeqlensK: fp.cuK, BlkKV: fp.spec.blk, Causal: fp.spec.causal,
		Workers: 2, Temperature: fp.spec.temperature, ReturnTemperatureLSE: true}
	if fp.spec.paged {
		a.PageTable, a.SeqUsedK = fp.pageTable, fp.seqused
	}
	return a
}

// f32Specs are the float32 test problems: ragged batches with an empty
// sequence, GQA 1/2/4/16, causal and not, dense and paged, D 16/64/128.
func f32Specs() []sparseSpec {
	var out []sparseSpec
	seed := uint64(900)
	for _, g := range []int{1, 2, 4, 16} {
		for _, causal := range []bool{false, true} {
			for _, paged := range []bool{false, true} {
				seed++
				d := []int{16, 64, 128}[seed%3]
				hkv := 2
				if g == 16 {
					hkv = 1
				}
				out = append(out, sparseSpec{seed: seed, seqQ: []int{21, 0, 34}, seqK: []int{70, 5, 100}, hq: g * hkv, hkv: hkv,
					d: d, topK: int(seed%5) + 1, blk: 16, causal: causal, paged: paged, temperature: 0.7})
			}
		}
	}
	return out
}

// TestSparseAttenF32MatchesReference compares the float32 SparseAttentionFunc
// (O, LSE, temperature LSE) with the float64 reference.
func TestSparseAttenF32MatchesReference(t *testing.T) {
	var worstO, worstL float64
	for _, s := range f32Specs() {
		fp := newF32Problem(s)
		rp, qi, err := K2QCSRFunc(fp.q2k, fp.cuQ, fp.cuK, s.blk)
		if err != nil {
			t.Fatal(err)
		}
		res, err := SparseAttentionFunc(fp.q, fp.k, fp.v, rp, qi, s.topK, fp.args())
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		if res.Out.Dtype() != tensor.Float32 {
			t.Fatalf("%v: out dtype %v", s, res.Out.Dtype())
		}
		ref := referenceSparse(fp.refWith(fp.qf, fp.kf, fp.vf))
		o := validate.Backing[float32](res.Out)
		for r, row := range ref.o {
			for c, w := range row {
				e := math.Abs(float64(o[r*s.d+c]) - w)
				worstO = max(worstO, e)
				if !(e <= 2e-6*fp.maxV*float64(s.d)/16) {
					t.Fatalf("%v: O[%d][%d] = %v, want %v", s, r, c, o[r*s.d+c], w)
				}
			}
		}
		for name, pair := range map[string][2]any{"LSE": {validate.Backing[float32](res.LSE), ref.lse}, "TLSE": {validate.Backing[float32](res.TemperatureLSE), ref.tlse}} {
			got, want := pair[0].([]float32), pair[1].([]float64)
			for i, w := range want {
				g := float64(got[i])
				if math.IsInf(w, -1) || math.IsInf(g, -1) {
					if math.IsInf(w, -1) != math.IsInf(g, -1) {
						t.Fatalf("%v: %s[%d] = %v, want %v", s, name, i, g, w)
					}
					continue
				}
				worstL = max(worstL, math.Abs(g-w))
				if math.Abs(g-w) > 2e-5 {
					t.Fatalf("%v: %s[%d] = %v, want %v", s, name, i, g, w)
				}
			}
		}
	}
	t.Logf("worst abs errors: O %.3g, LSE/TLSE %.3g", worstO, worstL)
}

// refLoss is sum(w * O) + sum(wl * LSE) over rows with a finite LSE.
func refLoss(rc *refCase, w, wl []float64) float64 {
	out := referenceSparse(rc)
	var l float64
	for r, row := range out.o {
		for c, x := range row {
			l += w[r*rc.d+c] * x
		}
		if !math.IsInf(out.lse[r], -1) && wl != nil {
			l += wl[r] * out.lse[r]
		}
	}
	return l
}

// TestSparseAttenBackwardF32FiniteDifferences checks the float32
// SparseAttentionBackwardFunc against central differences of the float64
// reference loss sum(W*O) + sum(WL*LSE), at sampled elements of q, k, v,
// on the float32 specs (dense and paged, GQA 1..16, causal or not,
// ragged with an empty sequence, -1 padding from buildSparse).
func TestSparseAttenBackwardF32FiniteDifferences(t *testing.T) {
	worst := map[string][2]float64{}
	for n, s := range f32Specs() {
		fp := newF32Problem(s)
		rng := rand.New(rand.NewPCG(s.seed, 3))
		totalQ := fp.q.Shape()[0]
		w := make([]float64, totalQ*s.hq*s.d)
		wf := make([]float32, len(w))
		for i := range w {
			wf[i] = float32(rng.NormFloat64())
			w[i] = float64(wf[i])
		}
		var wl []float64
		var dLSE tensor.Tensor
		if n%2 == 0 {
			wl = make([]float64, totalQ*s.hq)
			wlf := make([]float32, len(wl))
			for i := range wl {
				wlf[i] = float32(rng.NormFloat64())
				wl[i] = float64(wlf[i])
			}
			dLSE = tensor.New(tensor.WithShape(totalQ, s.hq), tensor.WithBacking(wlf))
		}
		rp, qi, err := K2QCSRFunc(fp.q2k, fp.cuQ, fp.cuK, s.blk)
		if err != nil {
			t.Fatal(err)
		}
		res, err := SparseAttentionFunc(fp.q, fp.k, fp.v, rp, qi, s.topK, fp.args())
		if err != nil {
			t.Fatal(err)
		}
		gr, err := SparseAttentionBackwardFunc(fp.q, fp.k, fp.v, res.Out, res.LSE,
			tensor.New(tensor.WithShape(totalQ, s.hq, s.d), tensor.WithBacking(wf)), dLSE, rp, qi, s.topK, fp.args())
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		for _, c := range []struct {
			name string
			x    []float64
			g    []float32
		}{{"dQ", fp.qf, validate.Backing[float32](gr.DQ)}, {"dK", fp.kf, validate.Backing[float32](gr.DK)}, {"dV", fp.vf, validate.Backing[float32](gr.DV)}} {
			// Probe the largest gradients and random elements.
			probes := rng.Perm(len(c.x))[:min(4, len(c.x))]
			big := 0
			for i, g := range c.g {
				if math.Abs(float64(g)) > math.Abs(float64(c.g[big])) {
					big = i
				}
			}
			probes = append(probes, big)
			var maxFD, maxErr float64
			for _, i := range probes {
				const h = 1e-4
				x0 := c.x[i]
				c.x[i] = x0 + h
				lp := refLoss(fp.refWith(fp.qf, fp.kf, fp.vf), w, wl)
				c.x[i] = x0 - h
				lm := refLoss(fp.refWith(fp.qf, fp.kf, fp.vf), w, wl)
				c.x[i] = x0
				fd := (lp - lm) / (2 * h)
				maxFD = max(maxFD, math.Abs(fd))
				maxErr = max(maxErr, math.Abs(fd-float64(c.g[i])))
			}
			rel := maxErr / max(maxFD, 1e-30)
			wst := worst[c.name]
			worst[c.name] = [2]float64{max(wst[0], maxErr), max(wst[1], rel)}
			if !(rel <= 1e-4) {
				t.Errorf("%v (dLSE %v): %s error %.3g, %.3g relative to max |fd| %.3g", s, wl != nil, c.name, maxErr, rel, maxFD)
			}
		}
	}
	for _, k := range []string{"dQ", "dK", "dV"} {
		t.Logf("%s: max abs error %.3g, max error relative to max |gradient| %.3g", k, worst[k][0], worst[k][1])
	}
}

// TestSparseAttenF32Errors: float32 calls reject mixed dtypes, low-precision
// partial and MMA dtypes, and a backward with mismatched shapes.
func TestSparseAttenF32Errors(t *testing.T) {
	fp := newF32Problem(f32Specs()[0])
	s := fp.spec
	rp, qi, err := K2QCSRFunc(fp.q2k, fp.cuQ, fp.cuK, s.blk)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		k    tensor.Tensor
		edit func(*SparseArgs)
	}{
		"bf16 k":        {fp.sparseProblem.k, func(*SparseArgs) {}},
		"partial bf16":  {fp.k, func(a *SparseArgs) { a.PartialDtype = BFloat16 }},
		"qk dtype":      {fp.k, func(a *SparseArgs) { a.QKDtype = BFloat16 }},
		"no cu_seqlens": {fp.k, func(a *SparseArgs) { a.CuSeqlensK = nil }},
	} {
		a := fp.args()
		tc.edit(&a)
		if _, err := SparseAttentionFunc(fp.q, tc.k, fp.v, rp, qi, s.topK, a); err == nil {
			t.Errorf("%s: no error", name)
		} else if _, ok := err.(*ArgError); !ok {
			t.Errorf("%s: %T %v", name, err, err)
		}
	}
	res, err := SparseAttentionFunc(fp.q, fp.k, fp.v, rp, qi, s.topK, fp.args())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SparseAttentionBackwardFunc(fp.q, fp.k, fp.v, res.Out, res.LSE, res.LSE, nil, rp, qi, s.topK, fp.args()); err == nil {
		t.Error("backward with an LSE-shaped dOut: no error")
	} else if !strings.Contains(err.Error(), "dOut") {
		t.Errorf("backward error does not name dOut: %v", err)
	}
}
