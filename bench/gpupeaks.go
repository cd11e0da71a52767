package main

import "github.com/sparseattn/msa/cuda/gpupeak"

// gpuPeak is a GPU's datasheet figures the GPU mode reports against: dense
// tensor-core throughput (no structured sparsity) and HBM bandwidth.
type gpuPeak struct {
	name string
	bf16 float64 // TFLOP/s, dense BF16 with float32 accumulation
	fp8  float64 // TFLOP/s, dense FP8 (0: no FP8 tensor cores)
	hbm  float64 // GB/s
}

// gpuPeakFor returns the figures of the GPU called name from package cuda's
// table of known GPUs (gpupeak.For); ok is false for a GPU not in it.
func gpuPeakFor(name string) (p gpuPeak, ok bool) {
	g, ok := gpupeak.For(name)
	return gpuPeak{g.Name, g.BF16, g.FP8, g.HBM}, ok
}

// peakFor is the dense tensor-core peak (GFLOP/s) and its label for the
// case kind and dtype: FP8 for FP8 prefill and FP8 decode, BF16 otherwise
// (BF16 Q with NVFP4 K/V runs BF16 products).
func (p gpuPeak) peakFor(kind, dtype string) (string, float64) {
	if dtype == "fp8" && kind != "nvfp4" {
		return p.name + " FP8", p.fp8 * 1e3
	}
	return p.name + " BF16", p.bf16 * 1e3
}
