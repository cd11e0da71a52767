package main

import "testing"

// TestGPUPeakFor: device names as the driver reports them find their
// figures, the more specific entries first, and unknown or ambiguous parts
// none.
func TestGPUPeakFor(t *testing.T) {
	for _, tc := range []struct {
		dev, want string
		hbm       float64
	}{
		{"NVIDIA H200", "H200 SXM", 4800},
		{"NVIDIA H200 NVL", "H200 NVL", 4800},
		{"NVIDIA H100 80GB HBM3", "H100 SXM", 3350},
		{"NVIDIA H100 PCIe", "H100 PCIe", 2000},
		{"NVIDIA B200", "B200", 8000},
		{"NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 2039},
		{"NVIDIA A100-SXM4-40GB", "A100 40GB", 1555},
		{"NVIDIA L40S", "L40S", 864},
		{"NVIDIA GH200 480GB", "", 0},
		{"NVIDIA L40", "", 0},
		{"NVIDIA L4", "L4", 300},
		{"NVIDIA GeForce RTX 4090", "", 0},
	} {
		p, ok := gpuPeakFor(tc.dev)
		if ok != (tc.want != "") || p.name != tc.want || p.hbm != tc.hbm {
			t.Errorf("%q: got %+v (known %v), want %q with %v GB/s", tc.dev, p, ok, tc.want, tc.hbm)
		}
	}
	p, _ := gpuPeakFor("NVIDIA H200")
	if l, v := p.peakFor("prefill", "fp8"); v != 1979e3 || l != "H200 SXM FP8" {
		t.Errorf("FP8 prefill peak %s %v", l, v)
	}
	if _, v := p.peakFor("nvfp4", "fp8"); v != 989e3 {
		t.Errorf("NVFP4 prefill peak %v, want the BF16 one", v)
	}
}
