package op

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
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

// widenScales returns the 128x4-tiled scales of t (rows x cols logical
// scales, cols padded to 4) re-tiled with extra column tiles up to width
// columns, the added scales set to junk: a valid tiling of a wider matrix
// whose first cols columns hold t's scales.
func widenScales(t *tensor.Dense, cols, width int) *tensor.Dense {
	rows := t.Shape()[0]
	src := validate.Backing[uint8](t)
	dst := make([]uint8, rows*width)
	for i := range dst {
		dst[i] = 0x7e // e4m3 448: a junk scale far from the real ones
	}
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			dst[lowp.Scale128x4Offset(r, c, width)] = src[lowp.Scale128x4Offset(r, c, cols)]
		}
	}
	return tensor.New(tensor.WithShape(rows, width), tensor.WithBacking(dst))
}

// TestNVFP4ScaleWidth: a k_scale or v_scale wider than the layout's
// (D = 64: [256, 8], a valid tiling with two column tiles, instead of
// [256, 4]) was accepted ("at least (256, 4)") and read with the stride of
// a 4-column tiling, so the output was wrong. The exact width matches the
// reference; any other shape is an *ArgError naming the tensor and the
// exact shape.
func TestNVFP4ScaleWidth(t *testing.T) {
	s := sparseSpec{seed: 77, seqQ: []int{9, 20}, seqK: []int{150, 100}, hq: 4, hkv: 2, d: 64, topK: 2, blk: 128,
		qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32}
	pr := buildSparse(s)
	checkAgainstReference(t, s, pr, runSparse(t, s, pr, 2, nil))
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
	if err != nil {
		t.Fatal(err)
	}
	args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, PartialDtype: s.partial, Workers: 2}
	rows, cols := pr.kScale.Shape()[0], pr.kScale.Shape()[1]
	want := fmt.Sprintf("shape exactly (%d, %d)", rows, cols)
	wide := widenScales(pr.kScale, cols, 8)
	_, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, wide, pr.vScale, nil, nil, rp, qi, s.topK, args)
	wantArgErr(t, err, "k_scale_128x4", want)
	_, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, widenScales(pr.vScale, cols, 8), nil, nil, rp, qi, s.topK, args)
	wantArgErr(t, err, "v_scale_128x4", want)
	tall := tensor.New(tensor.WithShape(rows+128, cols), tensor.WithBacking(append(slices.Clone(validate.Backing[uint8](pr.kScale)), make([]uint8, 128*cols)...)))
	_, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, tall, pr.vScale, nil, nil, rp, qi, s.topK, args)
	wantArgErr(t, err, "k_scale_128x4", want)
}
