package op

import (
	"testing"

	"gorgonia.org/tensor"
)

// TestSparseNVFP4 covers the NVFP4 K/V entry point: BF16 and FP8 Q, dense
// and paged, with and without K and V global scales, causal and not.
func TestSparseNVFP4(t *testing.T) {
	n := 0
	for _, q := range []string{"bf16", "e4m3"} {
		for _, paged := range []bool{false, true} {
			for _, g := range [][2]float32{{0, 0}, {0.5, 3}, {2, 0}, {0, 0.25}} {
				n++
				s := sparseSpec{
					seed: uint64(100 + n), seqQ: []int{7, 0, 30}, seqK: []int{200, 5, 300},
					hq: 4 << (n % 3), hkv: 2, d: []int{64, 128, 256}[n%3], topK: []int{4, 7, 16}[n%3], blk: 128,
					causal: n%2 == 0, paged: paged, trim: true, qDt: q, kvDt: "nvfp4",
					partial: []tensor.Dtype{tensor.Float32, BFloat16}[n%2], kGlobal: g[0], vGlobal: g[1],
				}
				pr := buildSparse(s)
				res := runSparse(t, s, pr, 2, nil)
				checkAgainstReference(t, s, pr, res)
			}
		}
	}
}
