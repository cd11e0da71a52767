package calib_test

import (
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/tile"
)

// loopTier names the calibration loop of a tier: the emulated bf16 tier has
// none of its own and is measured against the AVX-512 FP32 loop.
func loopTier(tn string) string {
	if tn == "avx512bf16-emulated" {
		return "avx512"
	}
	return tn
}

// TestSustainedGFLOPS checks the sustained calibration rate: positive for
// every supported tier, never above the best-window rate by more than the
// timer's jitter, and 0 for an unknown tier.
func TestSustainedGFLOPS(t *testing.T) {
	for _, tn := range tile.Tiers() {
		tn = loopTier(tn)
		loop := tile.PeakLoop(tn)
		if loop == nil {
			t.Fatalf("tier %s is supported but has no calibration loop", tn)
		}
		s := calib.SustainedGFLOPS(loop, 20*time.Millisecond)
		if !(s > 0) {
			t.Fatalf("tier %s: sustained rate %v, want > 0", tn, s)
		}
		if b := calib.PeakGFLOPS(loop, 20*time.Millisecond); s > 1.25*b {
			t.Errorf("tier %s: sustained %.1f GFLOP/s above the best window %.1f", tn, s, b)
		}
	}
	if l := tile.PeakLoop("no-such-tier"); l != nil {
		t.Fatal("unknown tier: a calibration loop, want nil")
	}
	if s := calib.SustainedGFLOPS(nil, time.Millisecond); s != 0 {
		t.Fatalf("no loop: sustained %v, want 0", s)
	}
	if s := calib.PeakGFLOPS(nil, time.Millisecond); s != 0 {
		t.Fatalf("no loop: peak %v, want 0", s)
	}
}

// TestSumOnThreads checks that every index runs once and the results add
// up, and that no work gives 0.
func TestSumOnThreads(t *testing.T) {
	var seen [5]int
	if got := calib.SumOnThreads(len(seen), func(i int) float64 { seen[i]++; return float64(i + 1) }); got != 15 {
		t.Fatalf("sum of 1..5 = %v", got)
	}
	if seen != [5]int{1, 1, 1, 1, 1} {
		t.Fatalf("runs per index %v, want one each", seen)
	}
	if got := calib.SumOnThreads(0, func(int) float64 { return 1 }); got != 0 {
		t.Fatalf("no work: %v", got)
	}
}

// BenchmarkPeak reports the best-window calibration rate of every tier this
// CPU has.
func BenchmarkPeak(b *testing.B) {
	for _, tn := range []string{"generic", "avx2", "avx512", "avx512bf16", "amxbf16"} {
		b.Run("tier="+tn, func(b *testing.B) {
			loop := tile.PeakLoop(tn)
			if loop == nil {
				b.Skipf("tier %s: not supported by this CPU", tn)
			}
			var g float64
			for i := 0; i < b.N; i++ {
				g = calib.PeakGFLOPS(loop, 20*time.Millisecond)
			}
			b.ReportMetric(g, "GFLOP/s")
		})
	}
}
