package attn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/internal/calib/updatemeter"
	"github.com/sparseattn/msa/kernels/tile"
)

// BenchmarkPrefillPhases times the two phases of RunPrefill by the wall
// clock (phaseClock) on the bench's prefill shape at 8K and 32K tokens (2
// and 8 query windows of 4096 queries, see windowQueries): BF16 Q, K,
// V, 16 query heads on one KV head, D 128, 128-key blocks, topK 16 (a
// fifth of the slots -1), not causal, BF16 partials, on 1 and 2 workers.
// It reports
//
//   - items% and combine%: the share of each call's time spent in the work
//     items (partials) and in the combine;
//   - load%, setq%, update%, store%: how the work items' time divides
//     between their parts (itemClock, summed over the workers): the K/V
//     block decode, each tile's query rows and bookkeeping, its Acc.Update
//     (with the next tile's prefetch hints), and its FinishLSE and partial
//     row stores;
//   - items%kern: the work items' rate (the call's flops over the items
//     phase's wall time) over the rate of the same tier's in-cache tile
//     update on as many goroutines (updatemeter.Meter) measured right after
//     each call, the mean over the calls: what the work items lose to
//     everything but the kernels' in-cache speed, whatever the host's
//     state;
//   - %peak: the best call's rate against the tier's peak
//     (calib.PeakGFLOPS of one goroutine times the workers; the VDPBF16PS
//     peak on avx512bf16).
//
// CPU profiles mislead here: on a virtual machine -cpuprofile inflates
// the combine's wall time several times over, so a profile's shares for
// the store- and stream-heavy phases are too large.
func BenchmarkPrefillPhases(b *testing.B) {
	benchTiers(b, []string{"avx2", "avx512", "avx512bf16"}, func(b *testing.B, tn string, lv vec) {
		peak1 := calib.PeakGFLOPS(tile.PeakLoop(tn), 50*time.Millisecond)
		for _, sub := range []struct{ tokens, workers int }{{8192, 1}, {8192, 2}, {32768, 1}, {32768, 2}} {
			tokens, workers := sub.tokens, sub.workers
			b.Run(fmt.Sprintf("tokens=%d/workers=%d", tokens, workers), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(9, 10))
				c := prefillCase{hkv: 1, qpk: 16, d: 128, blk: 128, topK: 16, seqQ: []int{tokens}, seqK: []int{tokens}}
				p, q2k := c.build(b, rng, workers, nil)
				p.Partial = PartialBF16
				pairs := 0
				for _, blk := range q2k {
					if blk >= 0 {
						pairs += c.blk
					}
				}
				flops := 4 * float64(c.d*c.qpk) * float64(pairs)
				out := newOutput(p.TotalQ*p.HQ, p.D)
				pool := NewPool(workers)
				defer pool.Close()
				ws := NewWorkspace(workers, p.D)
				RunPrefill(p, ws, pool, out) // warm-up: buffers, pages
				var items, comb time.Duration
				var parts [itemParts]atomic.Int64
				phaseClock = func(i, c time.Duration) { items, comb = items+i, comb+c }
				itemClock = func(part int, d time.Duration) { parts[part].Add(int64(d)) }
				defer func() { phaseClock, itemClock = nil, nil }()
				meters := make([]*updatemeter.Meter, workers)
				for w := range meters {
					var err error
					if meters[w], err = updatemeter.New(128, c.d, false); err != nil {
						b.Fatal(err)
					}
				}
				best := time.Duration(math.MaxInt64)
				var total time.Duration
				kern := 0.0
				for range b.N {
					i0 := items
					t0 := time.Now()
					RunPrefill(p, ws, pool, out)
					e := time.Since(t0)
					best, total = min(best, e), total+e
					b.StopTimer()
					ti := items - i0 // this call's items phase
					ref := calib.SumOnThreads(workers, func(w int) float64 { return meters[w].Sustained(min(ti, 250*time.Millisecond)) })
					kern += flops / ti.Seconds() / 1e9 / ref
					b.StartTimer()
				}
				b.ReportMetric(100*items.Seconds()/total.Seconds(), "items%")
				b.ReportMetric(100*kern/float64(b.N), "items%kern")
				sum := 0.0
				for i := range parts {
					sum += float64(parts[i].Load())
				}
				for i, n := range [itemParts]string{"load%", "setq%", "update%", "store%"} {
					b.ReportMetric(100*float64(parts[i].Load())/sum, n)
				}
				b.ReportMetric(100*comb.Seconds()/total.Seconds(), "combine%")
				b.ReportMetric(float64(comb.Microseconds())/1e3/float64(b.N), "combine-ms")
				if peak1 > 0 {
					b.ReportMetric(100*flops/best.Seconds()/1e9/(peak1*float64(workers)), "%peak")
				}
			})
		}
	})
}
