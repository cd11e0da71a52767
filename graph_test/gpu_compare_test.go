package graphtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// Tolerances of the GPU graph against the CPU graph on the same inputs
// (TestCUDABlockMatchesCPU, build tag cuda).
//
// O (bf16): both paths attend the same keys with float32 accumulation and
// round the result to bf16 (relative error <= 2^-9 each, so <= 2^-8 of
// max|O| between them); prefill partials are stored in bf16 on both paths
// and merged with weights summing to 1, adding at most another 2^-8 of
// max|O| when one partial rounds the other way. Accumulation-order
// differences in float32 (a few thousand terms, ~1e-5 relative at worst)
// are far below that. Bound: 2^-7 of max|O|.
//
// LSE (float32 on both paths, natural log): the log of a sum of up to a
// few thousand float32 exponentials accumulated in different orders, and
// the GPU's exp2/log2 approximations (2 ulp): ~1e-6 relative; held to
// 1e-5 of max(1, |LSE|). A masked row is -inf on both.
const (
	gpuTolO   = 1.0 / 128
	gpuTolLSE = 1e-5
)

// floats returns a float32 or bf16 tensor's values as float32.
func floats(t *tensor.Dense) ([]float32, error) {
	switch d := t.Data().(type) {
	case []float32:
		return d, nil
	case []lowp.BFloat16:
		out := make([]float32, len(d))
		for i, x := range d {
			out[i] = x.Float32()
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %v: want float32 or bfloat16", t.Dtype())
}

// closeO checks |got - want| <= tol * max|want| elementwise.
func closeO(want, got []float32, tol float64) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var scale float64
	for _, x := range want {
		scale = max(scale, math.Abs(float64(x)))
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol*scale) {
			return fmt.Errorf("element %d: %g, want %g (|diff| %.3g > %.3g = %g * max|want| %.3g)", i, got[i], want[i], d, tol*scale, tol, scale)
		}
	}
	return nil
}

// closeLSE checks |got - want| <= tol * max(1, |want|) elementwise, with
// -inf (masked rows) equal on both sides.
func closeLSE(want, got []float32, tol float64) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if math.IsInf(w, -1) || math.IsInf(g, -1) {
			if w != g {
				return fmt.Errorf("element %d: %g, want %g (a masked row on one side only)", i, g, w)
			}
			continue
		}
		if d := math.Abs(g - w); !(d <= tol*max(1, math.Abs(w))) {
			return fmt.Errorf("element %d: %g, want %g (|diff| %.3g > %g * max(1, |want|))", i, g, w, d, tol)
		}
	}
	return nil
}

// TestGPUCompareFailsFaults: the comparisons of the GPU graph test reject
// what a wrong kernel produces: one output element off by 2% of the range,
// a NaN, an LSE off by 1e-4, a masked row made finite.
func TestGPUCompareFailsFaults(t *testing.T) {
	o := []float32{0.5, -1, 0.25, 2}
	if err := closeO(o, o, gpuTolO); err != nil {
		t.Fatal(err)
	}
	bad := append([]float32(nil), o...)
	bad[2] += 0.04 // 2% of max|O| = 2
	if closeO(o, bad, gpuTolO) == nil {
		t.Error("an element off by 2% of max|O| passed")
	}
	bad[2] = float32(math.NaN())
	if closeO(o, bad, gpuTolO) == nil {
		t.Error("a NaN passed")
	}
	ninf := float32(math.Inf(-1))
	l := []float32{3.5, ninf, 7.25}
	if err := closeLSE(l, l, gpuTolLSE); err != nil {
		t.Fatal(err)
	}
	if closeLSE(l, []float32{3.5 + 1e-4, ninf, 7.25}, gpuTolLSE) == nil {
		t.Error("an LSE off by 1e-4 passed")
	}
	if closeLSE(l, []float32{3.5, 0, 7.25}, gpuTolLSE) == nil {
		t.Error("a finite LSE for a masked row passed")
	}
}
