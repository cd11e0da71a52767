package plan

import (
	"math/rand"
	"slices"
	"testing"
)

// TestIntoReuse: BuildK2QCSRInto, BuildFwdScheduleInto and
// ValidateFwdScheduleInto over one scratch and one destination, for a run
// of random problems that grow and shrink (so stale entries of a larger
// earlier problem would show), build what BuildK2QCSR and BuildFwdSchedule
// build from scratch and accept it; a schedule with one split count off is
// refused with ValidateFwdSchedule's error; and a repeated call allocates
// nothing once the storage fits.
func TestIntoReuse(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	var cx CSRBuildScratch
	var sx FwdScheduleScratch
	var csr CSR
	var sched FwdSchedule
	for i := 0; i < 60; i++ {
		p := randProblem(rng)
		rows, wantCSR, wantSched := buildAll(t, p, fwdParams(p))
		c, err := BuildK2QCSRInto(&cx, &csr, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
		if err != nil {
			t.Fatal(err)
		}
		if !sameCSR(c, wantCSR) {
			t.Fatalf("problem %d: BuildK2QCSRInto = %+v, BuildK2QCSR = %+v", i, *c, *wantCSR)
		}
		s, err := BuildFwdScheduleInto(&sx, &sched, c, rows, p.cuQ, fwdParams(p))
		if err != nil {
			t.Fatal(err)
		}
		if !sameSched(s, wantSched) {
			t.Fatalf("problem %d: BuildFwdScheduleInto = %+v, BuildFwdSchedule = %+v", i, *s, *wantSched)
		}
		if err := ValidateFwdScheduleInto(&sx, s, c, rows, p.cuQ, fwdParams(p)); err != nil {
			t.Fatalf("problem %d: ValidateFwdScheduleInto: %v", i, err)
		}
		if len(s.SplitCounts) > 0 {
			s.SplitCounts[0]++
			got := ValidateFwdScheduleInto(&sx, s, c, rows, p.cuQ, fwdParams(p))
			want := ValidateFwdSchedule(s, c, rows, p.cuQ, fwdParams(p))
			if got == nil || want == nil || got.Error() != want.Error() {
				t.Fatalf("problem %d: tampered split count: Into %v, ValidateFwdSchedule %v", i, got, want)
			}
			s.SplitCounts[0]--
		}
		n := testing.AllocsPerRun(5, func() {
			c, _ := BuildK2QCSRInto(&cx, &csr, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
			s, _ := BuildFwdScheduleInto(&sx, &sched, c, rows, p.cuQ, fwdParams(p))
			_ = ValidateFwdScheduleInto(&sx, s, c, rows, p.cuQ, fwdParams(p))
		})
		if n != 0 {
			t.Fatalf("problem %d: repeated Into calls allocate %v per call, want 0", i, n)
		}
	}
}

// sameCSR reports whether a and b hold the same CSR (nil and empty slices
// alike).
func sameCSR(a, b *CSR) bool {
	return a.Hkv == b.Hkv && a.TotalRows == b.TotalRows && a.Stride == b.Stride &&
		slices.Equal(a.RowPtr, b.RowPtr) && slices.Equal(a.QIdx, b.QIdx)
}

// sameSched reports whether a and b hold the same forward schedule.
func sameSched(a, b *FwdSchedule) bool {
	return a.Capacity == b.Capacity && a.WorkCount == b.WorkCount && a.Target == b.Target &&
		slices.Equal(a.Metadata, b.Metadata) && slices.Equal(a.QSplit, b.QSplit) && slices.Equal(a.SplitCounts, b.SplitCounts)
}
