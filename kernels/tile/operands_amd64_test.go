//go:build amd64 && !purego

package tile

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkOperandForms measures, on this core, what the memory operands of
// the AVX-512 kernels cost next to the register-only multiply-adds that
// the %peak ratios divide by. Each of b.N rounds times, one after the
// other and for the same flops (about 25 us each):
//
//   - reg: the calibration loop (peak512: 12 accumulators, register
//     operands only);
//   - bcst: the inner loop of the lane Q.K kernel (peakBcst512: every
//     multiply-add takes an embedded broadcast from memory, one load per
//     multiply-add, 4 zmm loads per 48);
//   - load: a step of the 6x4 register tile of the block kernels
//     (peakLoad512: 4 zmm loads and 6 broadcasts per 24 register
//     multiply-adds).
//
// Their operands stay in L1 and no pointer moves, so what separates bcst
// and load from reg is the core's load and issue rate, not memory. It
// reports each loop's best round (<form>-GFLOP/s), its median round
// (-GFLOP/s-p50) and the best round as a percentage of reg's best
// (-%reg). A ratio well under 100 bounds the kernels of that form below
// the calibrated peak on this core whatever the rest of the code does:
// on Intel cores with two 512-bit FMA units bcst and load stay well under
// reg (79-86% and 89-96% on a Xeon of family 6 model 167), while on AMD
// Zen 4, whose 512-bit multiply-adds issue at half that rate and leave
// the load pipes room, the lane kernels themselves reach over 90% of the
// peak.
func BenchmarkOperandForms(b *testing.B) {
	if m, ok := tierMissing("avx512"); !ok || m != "" {
		b.Skip("no AVX-512 on this CPU")
	}
	buf := make([]float32, 4096) // 16 KiB: rows 128 floats apart, all in L1
	for i := range buf {
		buf[i] = 1.0 / 1024 // normal products and sums: no assists
	}
	const flops = 12 * 32 * 16384 // 16384 iterations of the calibration loop
	forms := []struct {
		name string
		f    func()
		ds   []time.Duration
	}{
		{name: "reg", f: func() { peak512(16384) }},
		{name: "bcst", f: func() { peakBcst512(flops/(48*32), &buf[0]) }},
		{name: "load", f: func() { peakLoad512(flops/(24*32), &buf[0]) }},
	}
	for i := range forms {
		forms[i].f()
		forms[i].ds = make([]time.Duration, b.N)
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for i := range forms {
			t0 := time.Now()
			forms[i].f()
			forms[i].ds[it] = time.Since(t0)
		}
	}
	regBest := slices.Min(forms[0].ds).Seconds()
	for _, f := range forms {
		slices.Sort(f.ds)
		b.ReportMetric(flops/f.ds[0].Seconds()/1e9, f.name+"-GFLOP/s")
		b.ReportMetric(flops/f.ds[len(f.ds)/2].Seconds()/1e9, f.name+"-GFLOP/s-p50")
		if f.name != "reg" {
			b.ReportMetric(100*regBest/f.ds[0].Seconds(), f.name+"-%reg")
		}
	}
}
