package attn

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparseattn/msa/kernels/lowp"
)

// BenchmarkCombine measures the prefill combine streaming its partials from
// DRAM: combineRow over the rows of an 8K-token call at GQA 16 and topK 16
// (BF16 partials laid out [slot][query x head][D], 512 MiB, far beyond the
// caches), on one goroutine and on two at once (each its half of the
// queries), against a plain sequential read of the same buffer on as many
// goroutines. It reports the partial bytes read per second and their share
// of that read rate: the combine's distance from its memory bound.
func BenchmarkCombine(b *testing.B) {
	const hq, slots, d, nq = 16, 16, 128, 8192
	const plane = nq * hq
	benchVecLevels(b, func(b *testing.B, tn string, lv vec) {
		var pt Partials
		pt.Ensure(PartialBF16, d, slots*plane, false)
		pt.vec = lv
		rng := rand.New(rand.NewSource(3))
		for i := range pt.BF16 {
			pt.BF16[i] = lowp.BF16(float32(rng.NormFloat64()))
		}
		for i := range pt.LSE {
			pt.LSE[i] = float32(rng.NormFloat64())
		}
		out := make([]lowp.BFloat16, plane*d)
		lse := make([]float32, plane)
		rowBytes := float64(slots*d*2 + slots*4)
		for _, g := range []int{1, 2} {
			b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
				wks := make([]*worker, g)
				for w := range wks {
					wks[w] = newWorker(d, slots)
				}
				// Each repetition combines a fresh range of rows per
				// goroutine, so the partials come from DRAM.
				const chunk = 256 // queries per goroutine and repetition
				var el, rd time.Duration
				rows := 0
				for it := 0; it < b.N; it++ {
					t0 := time.Now()
					var wg sync.WaitGroup
					for w := range g {
						wg.Add(1)
						go func(w int) {
							defer wg.Done()
							wk := wks[w]
							q0 := ((it*g + w) * chunk) % nq
							for gq := q0; gq < q0+chunk; gq++ {
								for h := range hq {
									prow := gq*hq + h
									ls := wk.ls[:slots]
									for s := range ls {
										ls[s] = pt.LSE[s*plane+prow]
									}
									combineRow(&pt, ls, wk.ws[:slots], plane, prow, d, 1, wk, out[prow*d:(prow+1)*d], &lse[prow])
								}
							}
						}(w)
					}
					wg.Wait()
					el += time.Since(t0)
					rows += g * chunk * hq
					// As many bytes read plainly: every slot's rows of a range
					// half the buffer away (not touched for many repetitions).
					t0 = time.Now()
					for w := range g {
						wg.Add(1)
						go func(w int) {
							defer wg.Done()
							q0 := ((it*g+w)*chunk + nq/2) % nq
							var acc uint64
							for s := range slots {
								r := pt.BF16[(s*plane+q0*hq)*d : (s*plane+(q0+chunk)*hq)*d]
								for i := 0; i < len(r); i += 32 {
									acc += uint64(r[i]) + uint64(r[i+8]) + uint64(r[i+16]) + uint64(r[i+24])
								}
							}
							sink.Add(acc)
						}(w)
					}
					wg.Wait()
					rd += time.Since(t0)
				}
				gbs := float64(rows) * rowBytes / el.Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(100*rd.Seconds()/el.Seconds(), "%read")
			})
		}
	})
}

// sink keeps the plain reads of BenchmarkCombine from being optimised away.
var sink atomic.Uint64
