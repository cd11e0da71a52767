// Package gpupeak is the table of known GPUs' datasheet figures: dense
// tensor-core throughput (no structured sparsity) and HBM bandwidth. The
// bench's GPU mode reports against them and package cuda's auto prefill
// weighs its tiles with their balance (cuda/prefill_auto.go). It imports
// only the standard library, so that a binary built without the cuda tag
// can use it without carrying package cuda's kernel image.
package gpupeak

import "strings"

// Peak is one GPU's datasheet figures.
type Peak struct {
	Name string  // the part, as the datasheet names it
	BF16 float64 // TFLOP/s, dense BF16 with float32 accumulation
	FP8  float64 // TFLOP/s, dense FP8 (0: no FP8 tensor cores)
	HBM  float64 // GB/s
}

// gpuPeaks are the known GPUs, matched in order by a substring of the
// device name (NVIDIA's datasheets; the more specific names first).
var gpuPeaks = []struct {
	match string
	peak  Peak
}{
	{"GH200", Peak{}}, // Grace Hopper: HBM3 or HBM3e by model, not told apart here
	{"H200 NVL", Peak{"H200 NVL", 835, 1671, 4800}},
	{"H200", Peak{"H200 SXM", 989, 1979, 4800}},
	{"H100 NVL", Peak{"H100 NVL", 835, 1671, 3900}},
	{"H100 PCIe", Peak{"H100 PCIe", 756, 1513, 2000}},
	{"H100", Peak{"H100 SXM", 989, 1979, 3350}},
	{"B200", Peak{"B200", 2250, 4500, 8000}},
	{"A100-SXM4-80GB", Peak{"A100 SXM 80GB", 312, 0, 2039}},
	{"A100 80GB PCIe", Peak{"A100 PCIe 80GB", 312, 0, 1935}},
	{"A100", Peak{"A100 40GB", 312, 0, 1555}},
	{"L40S", Peak{"L40S", 362, 733, 864}},
	{"L40", Peak{}}, // L40 (not S): not in the table; keeps it from matching L4
	{"L4", Peak{"L4", 121, 242, 300}},
}

// For returns the figures of the GPU whose driver name is name; ok is
// false for a GPU not in the table.
func For(name string) (p Peak, ok bool) {
	for _, g := range gpuPeaks {
		if strings.Contains(name, g.match) {
			return g.peak, g.peak.Name != ""
		}
	}
	return Peak{}, false
}
