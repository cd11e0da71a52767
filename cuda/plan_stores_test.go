package cuda

import (
	"fmt"
	"slices"
	"testing"
)

// TestPlanStoresReuse: the stores the prefill launch keeps across calls
// (windowStore for FwdWindows and SplitForOccupancy, qplanStore for
// BuildQPlan and QPlan.Validate) give, for a run of problems that grow and
// shrink over one store (so stale entries of a larger earlier call would
// show), what the fresh functions give; and a repeated call allocates
// nothing once the storage fits.
func TestPlanStoresReuse(t *testing.T) {
	var cut, split windowStore
	var qs qplanStore
	var covered []int32
	for i, pc := range []*prefillCase{
		{cuQ: []int32{0, 100, 300}, cuK: []int32{0, 500, 1200}, hkv: 1, qhpk: 16, d: 128, topK: 4, blk: 64},
		{cuQ: []int32{0, 7, 9, 40}, cuK: []int32{0, 90, 91, 300}, hkv: 2, qhpk: 4, d: 64, topK: 3, blk: 32},
		{cuQ: []int32{0, 513}, cuK: []int32{0, 2000}, hkv: 1, qhpk: 8, d: 128, topK: 8, blk: 128},
		{cuQ: []int32{0, 1, 2}, cuK: []int32{0, 64, 65}, hkv: 2, qhpk: 2, d: 64, topK: 2, blk: 64},
	} {
		pc.qd, pc.kvd, pc.pd = BF16, BF16, BF16
		genPrefill(t, pc, uint64(i)+1)
		for _, w := range []int{pc.totalQ, 64, 13} {
			name := fmt.Sprintf("case %d, window %d", i, w)
			want, err := FwdWindows(pc.csr, pc.sched, pc.cuQ, pc.totalQ, w)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cut.cut(pc.csr, pc.sched, pc.cuQ, pc.totalQ, w)
			if err != nil {
				t.Fatal(err)
			}
			sameWindows(t, name+" cut", got, want)
			sameWindows(t, name+" split", split.split(got, pc.qhpk, 64, 528), SplitForOccupancy(want, pc.qhpk, 64, 528))
			if n := testing.AllocsPerRun(5, func() {
				got, _ := cut.cut(pc.csr, pc.sched, pc.cuQ, pc.totalQ, w)
				split.split(got, pc.qhpk, 64, 528)
			}); n != 0 {
				t.Errorf("%s: the stores allocate %v per call, want 0", name, n)
			}
		}
		want, err := BuildQPlan(pc.csr, pc.sched, pc.cuQ, pc.hkv, pc.qhpk, QTileRows)
		if err != nil {
			t.Fatal(err)
		}
		got, err := qs.build(pc.csr, pc.sched, pc.cuQ, pc.hkv, pc.qhpk, QTileRows)
		if err != nil {
			t.Fatal(err)
		}
		if got.TileTokens != want.TileTokens || !slices.Equal(got.Tiles, want.Tiles) || !slices.Equal(got.TilePtr, want.TilePtr) ||
			!slices.Equal(got.Blocks, want.Blocks) || !slices.Equal(got.Masks, want.Masks) {
			t.Fatalf("case %d: the store's query-major plan differs from BuildQPlan's", i)
		}
		if err := got.check(&covered, pc.cuQ, nil, pc.hkv, pc.qhpk, pc.blk); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if n := testing.AllocsPerRun(5, func() {
			p, _ := qs.build(pc.csr, pc.sched, pc.cuQ, pc.hkv, pc.qhpk, QTileRows)
			_ = p.check(&covered, pc.cuQ, nil, pc.hkv, pc.qhpk, pc.blk)
		}); n != 0 {
			t.Errorf("case %d: the query-major store allocates %v per call, want 0", i, n)
		}
	}
}

// sameWindows fails the test unless got and want are the same windows with
// the same schedules.
func sameWindows(t *testing.T, name string, got, want []FwdWindow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d windows, want %d", name, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Q0 != w.Q0 || g.Q1 != w.Q1 || g.Sched.Capacity != w.Sched.Capacity || g.Sched.WorkCount != w.Sched.WorkCount ||
			!slices.Equal(g.Sched.Metadata, w.Sched.Metadata) || !slices.Equal(g.Sched.QSplit, w.Sched.QSplit) ||
			!slices.Equal(g.Sched.SplitCounts, w.Sched.SplitCounts) {
			t.Fatalf("%s: window %d differs", name, i)
		}
	}
}
