package attn

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/tile"
)

// BenchmarkPrefillPaths times both prefill paths on one causal sequence
// (BF16 Q, K, V, 16 query heads, D 128, 128-key blocks (also 64 at qpk
// 16), topK 16, full lists of visible blocks, BF16 partials) for GQA 16, 4 and 1 (qpk 16,
// 4, 1) with dense K/V and, for qpk 4 and 1, also paged K/V (whose rows of one KV head are
// contiguous within a page), and the selection patterns of the tests, on
// the active tier and 2 workers. It reports the best call's rate against
// the tier's FMA peak (%peak) and which path auto takes (auto=query: 1).
// Run it with -benchtime=3x.
func BenchmarkPrefillPaths(b *testing.B) {
	const tokens, workers = 8192, 2
	tn := tile.Tier()
	peak := calib.PeakGFLOPS(tile.PeakLoop(tn), 50*time.Millisecond) * workers
	for _, g := range []struct {
		hkv, qpk, blk int
		paged         bool
	}{{1, 16, 128, false}, {1, 16, 64, false}, {4, 4, 128, false}, {16, 1, 128, false}, {4, 4, 128, true}, {16, 1, 128, true}} {
		for _, pattern := range []string{"random", "local", "sink", "uniform"} {
			c := qmCase{seqQ: []int{tokens}, seqK: []int{tokens}, hkv: g.hkv, qpk: g.qpk, d: 128, blk: g.blk, topK: 16,
				causal: true, paged: g.paged, qDtype: BF16, kvDtype: BF16, pattern: pattern, full: true}
			pr := c.build(b, 1)
			p := pr.p
			flops := 4 * float64(p.D*g.qpk) * float64(visiblePairs(pr))
			auto := 0.0
			if choosePath(p) == PathQuery {
				auto = 1
			}
			for _, path := range []PrefillPath{PathKV, PathQuery} {
				b.Run(fmt.Sprintf("%s/qpk=%d/blk=%d/paged=%v/%s/%s", tn, g.qpk, g.blk, g.paged, pattern, path), func(b *testing.B) {
					p.Path = path
					pool := NewPool(workers)
					defer pool.Close()
					ws := NewWorkspace(workers, p.D)
					out := newOutput(p.TotalQ*p.HQ, p.D)
					RunPrefill(p, ws, pool, out) // warm-up
					best := time.Duration(math.MaxInt64)
					for range b.N {
						t0 := time.Now()
						RunPrefill(p, ws, pool, out)
						best = min(best, time.Since(t0))
					}
					b.ReportMetric(100*flops/best.Seconds()/1e9/peak, "%peak")
					b.ReportMetric(float64(best.Microseconds())/1e3, "best-ms")
					b.ReportMetric(auto, "auto=query")
				})
			}
		}
	}
}

// visiblePairs counts the (query, key) pairs inside the selected blocks
// that the causal mask leaves visible, summed over the KV heads.
func visiblePairs(pr *qmProblem) int64 {
	p, c := pr.p, pr.c
	var n int64
	for h := range c.hkv {
		for b := range c.seqQ {
			seqQ, seqK := c.seqQ[b], c.seqK[b]
			for qi := range seqQ {
				gq := int(p.CuQ[b]) + qi
				lim := seqK
				if c.causal {
					lim = min(lim, qi+seqK-seqQ+1)
				}
				for _, j := range pr.q2k[(h*p.TotalQ+gq)*c.topK:][:c.topK] {
					if j >= 0 {
						n += int64(max(0, min(lim, (int(j)+1)*c.blk)-int(j)*c.blk))
					}
				}
			}
		}
	}
	return n
}
