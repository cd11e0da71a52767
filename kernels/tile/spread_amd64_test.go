//go:build amd64 && !purego

package tile

import (
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkSpread tells the host's toll on each tier's kernels from the
// host's toll on the core itself. The best repetition of an in-cache
// benchmark is what the code can do; the rest of the repetitions are slower
// only by what the host took, and this benchmark shows that the host does
// not take the same from all code. Each of b.N rounds times, one after the
// other, for every SIMD tier this CPU has:
//
//   - fma: the tier's calibration loop (register-only multiply-adds,
//     PeakLoop);
//   - qk: the Q.K kernels of one register tile against a full block
//     (simd.scores, 6 rows x 128 keys, D = 128), operands in L1/L2;
//   - pv: the P.V kernels of the same tile (simd.values);
//
// each for about the same flops (16 calls of a kernel, ~25-50 us). The
// entries of one round run within a fraction of a millisecond of each
// other, so all see the same host. For each entry it reports
// <tier>-<entry>-GFLOP/s-p50, the median round's rate, -%p50, the same as
// a percentage of the best round's, and -%p90, the rate 90% of the rounds
// reach, as a percentage of the best. Where the kernels'
// percentages sit below the fma loop's, the host's interference costs code
// that loads from memory more than it costs multiply-adds.
func BenchmarkSpread(b *testing.B) {
	const R, d, calls = rowGroup, 128, 16
	rng := rand.New(rand.NewSource(9))
	fill := func(n int) []uint32 {
		x := make([]uint32, n)
		for i := range x {
			// Two bf16 values in [-1/2, 1/2), or one float32 there.
			x[i] = math.Float32bits(rng.Float32()-0.5)>>16 | math.Float32bits(rng.Float32()-0.5)&^0xffff
		}
		return x
	}
	q, kt, v := fill(R*d), fill(d*BlockN), fill(BlockN*d)
	s, o := make([]float32, R*BlockN), make([]float32, R*d)
	alpha := make([]float32, R)
	for r := range alpha {
		alpha[r] = 1
	}
	// Half the flops of one tile update: 2*R*BlockN*d per kernel call.
	flops := 2 * float64(R*BlockN*d) * calls
	type entry struct {
		name string
		f    func()
		ds   []time.Duration
	}
	var es []*entry
	for _, c := range []struct {
		tier string
		k    *simd
	}{{"avx2", k256}, {"avx512", k512}, {"avx512bf16", kbf16}} {
		if m, ok := tierMissing(c.tier); !ok || m != "" {
			continue
		}
		k, t := c.k, findTier(c.tier)
		steps, pvSteps := d, BlockN
		if k.bf16 {
			steps, pvSteps = d/2, BlockN/2
		}
		iters := int(flops / t.peak(1))
		es = append(es,
			&entry{name: c.tier + "-fma", f: func() { t.peak(iters) }},
			&entry{name: c.tier + "-qk", f: func() {
				for range calls {
					k.scores(R, BlockN/k.vk, unsafe.Pointer(&q[0]), uintptr(steps*4), unsafe.Pointer(&kt[0]), steps, s)
				}
			}},
			&entry{name: c.tier + "-pv", f: func() {
				for range calls {
					k.values(k.pv, R, d, s, unsafe.Pointer(&v[0]), uintptr(d*4), pvSteps, o, &alpha[0])
				}
			}})
	}
	if len(es) == 0 {
		b.Skip("no SIMD tier on this CPU")
	}
	for _, e := range es {
		e.f() // warm up: page in the code, fill the caches
		e.ds = make([]time.Duration, b.N)
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for _, e := range es {
			t0 := time.Now()
			e.f()
			e.ds[it] = time.Since(t0)
		}
	}
	for _, e := range es {
		slices.Sort(e.ds)
		best := e.ds[0].Seconds()
		b.ReportMetric(flops/e.ds[len(e.ds)/2].Seconds()/1e9, e.name+"-GFLOP/s-p50")
		b.ReportMetric(100*best/e.ds[len(e.ds)/2].Seconds(), e.name+"-%p50")
		b.ReportMetric(100*best/e.ds[len(e.ds)*9/10].Seconds(), e.name+"-%p90")
	}
}
