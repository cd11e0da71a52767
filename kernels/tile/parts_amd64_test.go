//go:build amd64 && !purego

package tile

import (
	"math"
	"math/rand"
	"testing"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/internal/calib"
)

// BenchmarkUpdateParts splits the in-cache bound of Acc.Update on each
// SIMD tier into its three parts, at the prefill shape (register tiles of
// 6 query rows against a full 128-key block, D = 128): the Q.K kernel over
// the block's key vectors, the online softmax of the 6 score rows, and the
// P.V kernel over the D output columns (simd.scores, simd.values: the
// update's own loops), each timed alone over many calls
// with its operands in L1/L2 (best of the repetitions). It reports
//
//   - qk%peak, pv%peak: each kernel's rate against the tier's peak
//     (calib.PeakGFLOPS of tile.PeakLoop, the VDPBF16PS peak on avx512bf16);
//   - softmax-ns: one softmax call (6 rows), and softmax%: its share of the
//     three parts' time;
//   - bound%peak: the tile's flops (4*6*128*128) over the three parts'
//     time, the most Acc.Update can reach with these kernels.
//
// The softmax's cost does not shrink with the kernels' width: on the
// avx512bf16 tier, whose kernels do twice the flops per instruction, it
// takes twice the share.
func BenchmarkUpdateParts(b *testing.B) {
	const R, d = rowGroup, 128
	for _, c := range []struct {
		tier string
		k    *simd
	}{{"avx2", k256}, {"avx512", k512}, {"avx512bf16", kbf16}} {
		b.Run("tier="+c.tier, func(b *testing.B) {
			if m, ok := tierMissing(c.tier); !ok || m != "" {
				b.Skipf("tier %s: CPU lacks %s", c.tier, m)
			}
			k := c.k
			peak := calib.PeakGFLOPS(PeakLoop(c.tier), 50*time.Millisecond)
			rng := rand.New(rand.NewSource(5))
			// Operands in the tier's layout, as update passes them: steps
			// are floats (d of Q.K, BlockN of P.V) or bf16 pairs (half as
			// many); random bits of small magnitude either way.
			steps, pvSteps := d, BlockN
			if k.bf16 {
				steps, pvSteps = d/2, BlockN/2
			}
			word := func() uint32 {
				if k.bf16 { // two bf16 values in [-1/2, 1/2)
					lo := math.Float32bits(rng.Float32()-0.5) >> 16
					hi := math.Float32bits(rng.Float32()-0.5) >> 16
					return lo | hi<<16
				}
				return math.Float32bits(rng.Float32() - 0.5)
			}
			fill := func(n int) []uint32 {
				x := make([]uint32, n)
				for i := range x {
					x[i] = word()
				}
				return x
			}
			q, kt, v := fill(R*steps), fill(steps*BlockN), fill(pvSteps*d)
			s := make([]float32, R*BlockN)
			o := make([]float32, R*d)
			valid := make([]int32, R)
			mx, sum, tsum, alpha := make([]float32, R), make([]float32, R), make([]float32, R), make([]float32, R)
			for r := range R {
				valid[r], alpha[r] = BlockN, 1
			}
			nv := BlockN / k.vk
			qk := func() { k.scores(R, nv, unsafe.Pointer(&q[0]), uintptr(steps*4), unsafe.Pointer(&kt[0]), steps, s) }
			softmax := func() {
				for r := range R {
					mx[r], sum[r] = float32(math.Inf(-1)), 0
				}
				k.softmax(&s[0], (nv+1)&^1, &valid[0], R, BlockN, 0.125, 0, int(RoundNone), &mx[0], &sum[0], &tsum[0], &alpha[0])
			}
			pv := func() { k.values(k.pv, R, d, s, unsafe.Pointer(&v[0]), uintptr(d*4), pvSteps, o, &alpha[0]) }
			qk()
			// The best time per call of f over b.N repetitions of 64 calls.
			best := func(f func()) float64 {
				const calls = 64
				t := time.Duration(math.MaxInt64)
				for it := 0; it < b.N; it++ {
					t0 := time.Now()
					for range calls {
						f()
					}
					t = min(t, time.Since(t0))
				}
				return t.Seconds() / calls
			}
			tq, ts, tp := best(qk), best(softmax), best(pv)
			half := 2 * float64(R*BlockN*d) // flops of Q.K, and of P.V
			if peak > 0 {
				b.ReportMetric(100*half/tq/1e9/peak, "qk%peak")
				b.ReportMetric(100*half/tp/1e9/peak, "pv%peak")
				b.ReportMetric(100*2*half/(tq+ts+tp)/1e9/peak, "bound%peak")
			}
			b.ReportMetric(ts*1e9, "softmax-ns")
			b.ReportMetric(100*ts/(tq+ts+tp), "softmax%")
		})
	}
}
