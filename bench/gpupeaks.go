package main

import "strings"

// gpuPeak is a GPU's datasheet figures the GPU mode reports against: dense
// tensor-core throughput (no structured sparsity) and HBM bandwidth.
type gpuPeak struct {
	name string
	bf16 float64 // TFLOP/s, dense BF16 with float32 accumulation
	fp8  float64 // TFLOP/s, dense FP8 (0: no FP8 tensor cores)
	hbm  float64 // GB/s
}

// gpuPeaks are the known GPUs, matched in order by a substring of the
// device name (NVIDIA's datasheets; the more specific names first).
var gpuPeaks = []struct {
	match string
	peak  gpuPeak
}{
	{"GH200", gpuPeak{}}, // Grace Hopper: HBM3 or HBM3e by model, not told apart here
	{"H200 NVL", gpuPeak{"H200 NVL", 835, 1671, 4800}},
	{"H200", gpuPeak{"H200 SXM", 989, 1979, 4800}},
	{"H100 NVL", gpuPeak{"H100 NVL", 835, 1671, 3900}},
	{"H100 PCIe", gpuPeak{"H100 PCIe", 756, 1513, 2000}},
	{"H100", gpuPeak{"H100 SXM", 989, 1979, 3350}},
	{"B200", gpuPeak{"B200", 2250, 4500, 8000}},
	{"A100-SXM4-80GB", gpuPeak{"A100 SXM 80GB", 312, 0, 2039}},
	{"A100 80GB PCIe", gpuPeak{"A100 PCIe 80GB", 312, 0, 1935}},
	{"A100", gpuPeak{"A100 40GB", 312, 0, 1555}},
	{"L40S", gpuPeak{"L40S", 362, 733, 864}},
	{"L40", gpuPeak{}}, // L40 (not S): not in the table; keeps it from matching L4
	{"L4", gpuPeak{"L4", 121, 242, 300}},
}

// gpuPeakFor returns the figures of the GPU called name; ok is false for a
// GPU not in the table.
func gpuPeakFor(name string) (p gpuPeak, ok bool) {
	for _, g := range gpuPeaks {
		if strings.Contains(name, g.match) {
			return g.peak, g.peak.name != ""
		}
	}
	return gpuPeak{}, false
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
