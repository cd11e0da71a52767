package plan

import (
	"reflect"
	"slices"
	"testing"
)

// TestRowsReset: Reset over one Rows gives NewRows's numbering for a
// sequence of layouts that grow and shrink (so stale entries of a larger
// earlier numbering would show), allocates nothing once its buffers fit,
// and leaves the numbering unchanged on bad input.
func TestRowsReset(t *testing.T) {
	layouts := []struct {
		cuK []int32
		blk int
	}{
		{[]int32{0, 100, 100, 357, 400}, 32},
		{[]int32{5, 9}, 4},
		{[]int32{0, 64, 65, 200}, 16},
		{[]int32{0}, 8},
		{[]int32{0, 1000, 1001, 1500, 1900, 2048}, 64},
	}
	var r Rows
	for _, l := range layouts {
		want, err := NewRows(l.cuK, l.blk)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Reset(l.cuK, l.blk); err != nil {
			t.Fatal(err)
		}
		same := r.Total == want.Total && r.NumSeq == want.NumSeq && r.BlkKV == want.BlkKV && r.MaxBlocks == want.MaxBlocks &&
			slices.Equal(r.Batch, want.Batch) && slices.Equal(r.Block, want.Block) &&
			slices.Equal(r.Count, want.Count) && slices.Equal(r.SeqlenK, want.SeqlenK)
		for b := -1; same && b <= want.NumSeq; b++ {
			for j := -1; j <= want.MaxBlocks; j++ {
				same = same && r.RowOf(b, j) == want.RowOf(b, j)
			}
		}
		if !same {
			t.Fatalf("Reset(%v, %d) = %+v, NewRows gives %+v", l.cuK, l.blk, r, *want)
		}
	}
	before := r
	if err := r.Reset([]int32{0, 10, 5}, 4); err == nil {
		t.Fatal("Reset with decreasing cu_seqlens_k gave no error")
	}
	if !reflect.DeepEqual(r, before) {
		t.Fatal("a failed Reset changed the numbering")
	}
	last := layouts[len(layouts)-1]
	if n := testing.AllocsPerRun(10, func() { _ = r.Reset(last.cuK, last.blk) }); n != 0 {
		t.Errorf("Reset into buffers that fit allocates %v per call, want 0", n)
	}
}
