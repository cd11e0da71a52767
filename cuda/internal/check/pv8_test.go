package check

import (
	"testing"

	"github.com/sparseattn/msa/cuda"
)

// TestPV8WalkArith: PV8Walk changes only FP8 P.V's accumulation term, to
// one 2^-13 truncation per k-group of the longest possible walk (at least
// uFP8MMA), and leaves every other term and dtype as they were.
func TestPV8WalkArith(t *testing.T) {
	for _, dt := range [][2]cuda.Dtype{{cuda.E4M3, cuda.E4M3}, {cuda.BF16, cuda.BF16}, {cuda.BF16, cuda.E4M3}} {
		c := &Prefill{QD: dt[0], KVD: dt[1], PD: cuda.F32, D: 128, Blk: 128, TopK: 4, SeqK: []int32{300, 4096, 129}}
		base := c.arith().forRow(64)
		c.PV8Walk = true
		got := c.arith().forRow(64)
		want := base
		if dt[0] == cuda.E4M3 && dt[1] == cuda.E4M3 {
			want.uPV = max(base.uPV, 128*0x1p-13) // 32 blocks of 4 groups
		}
		if got.uPV != want.uPV || got.uP != base.uP || got.fP != base.fP || got.uQK != base.uQK || got.fp8PV != base.fp8PV {
			t.Errorf("Q %v, K/V %v: PV8Walk arith uPV %g uP %g fP %g uQK %g; want uPV %g and the rest of %+v", dt[0], dt[1], got.uPV, got.uP, got.fP, got.uQK, want.uPV, base)
		}
	}
	if uFP8Walk(1) != uFP8MMA || uFP8Walk(128) != 128*0x1p-13 {
		t.Errorf("uFP8Walk(1) = %g, uFP8Walk(128) = %g: want %g and %g", uFP8Walk(1), uFP8Walk(128), uFP8MMA, 128*0x1p-13)
	}
}

// TestDecodePV8WalkArith: Decode.PV8Walk changes only FP8 P.V's
// accumulation term, to one 2^-13 truncation per k-group of the longest
// item's visits (walkGroups: dense 128-key steps over the longest request,
// sparse 128-key steps per block of the union), and leaves every other
// dtype's arithmetic as it was.
func TestDecodePV8WalkArith(t *testing.T) {
	for _, c := range []struct {
		topK, blk int
		groups    int
	}{
		{0, 0, 4 * 64},       // dense: 8192 keys in 64 visits
		{8, 64, 4 * 128},     // sparse 64-key blocks: one visit each, 128 blocks
		{4, 256, 4 * 2 * 32}, // sparse 256-key blocks: two visits each, 32 blocks
		{4, 100, 4 * 82},     // sparse, blocks not a multiple of 128: 82 blocks of one visit
	} {
		for _, dt := range [][2]cuda.Dtype{{cuda.E4M3, cuda.E4M3}, {cuda.BF16, cuda.BF16}, {cuda.BF16, cuda.E4M3}} {
			d := &Decode{Batch: 2, SeqlenQ: 1, Hkv: 1, QHPK: 4, D: 128, PageSize: 64, SeqUsed: []int32{8192, 17}, QD: dt[0], KVD: dt[1], TopK: c.topK, Blk: c.blk}
			if got := d.walkGroups(); got != c.groups {
				t.Errorf("topK %d blk %d: walkGroups %d, want %d", c.topK, c.blk, got, c.groups)
			}
			base := d.arith().forRow(64)
			d.PV8Walk = true
			got := d.arith().forRow(64)
			want := base
			if dt[0] == cuda.E4M3 && dt[1] == cuda.E4M3 {
				want.uPV = max(base.uPV, float64(c.groups)*0x1p-13)
			}
			if got.uPV != want.uPV || got.uP != base.uP || got.fP != base.fP || got.uQK != base.uQK || got.fp8PV != base.fp8PV {
				t.Errorf("topK %d blk %d Q %v K/V %v: PV8Walk arith uPV %g uP %g fP %g uQK %g; want uPV %g and the rest of %+v",
					c.topK, c.blk, dt[0], dt[1], got.uPV, got.uP, got.fP, got.uQK, want.uPV, base)
			}
		}
	}
}
