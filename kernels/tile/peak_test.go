package tile

import (
	"testing"
	"time"
)

// TestSustainedGFLOPS checks the sustained calibration rate: positive for
// every supported tier, never above the best-window rate by more than the
// timer's jitter, and 0 for an unknown tier.
func TestSustainedGFLOPS(t *testing.T) {
	for _, tn := range Tiers() {
		tn = peakTier(tn)
		s := SustainedGFLOPS(tn, 20*time.Millisecond)
		if !(s > 0) {
			t.Fatalf("tier %s: sustained rate %v, want > 0", tn, s)
		}
		if b := PeakGFLOPS(tn, 20*time.Millisecond); s > 1.25*b {
			t.Errorf("tier %s: sustained %.1f GFLOP/s above the best window %.1f", tn, s, b)
		}
	}
	if s := SustainedGFLOPS("no-such-tier", time.Millisecond); s != 0 {
		t.Fatalf("unknown tier: %v, want 0", s)
	}
}

// TestSumOnThreads checks that every index runs once and the results add
// up, and that no work gives 0.
func TestSumOnThreads(t *testing.T) {
	var seen [5]int
	if got := SumOnThreads(len(seen), func(i int) float64 { seen[i]++; return float64(i + 1) }); got != 15 {
		t.Fatalf("sum of 1..5 = %v", got)
	}
	if seen != [5]int{1, 1, 1, 1, 1} {
		t.Fatalf("runs per index %v, want one each", seen)
	}
	if got := SumOnThreads(0, func(int) float64 { return 1 }); got != 0 {
		t.Fatalf("no work: %v", got)
	}
}
