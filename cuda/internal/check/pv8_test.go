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
