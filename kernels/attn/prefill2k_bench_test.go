package attn

import (
	"fmt"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/tile"
)

// BenchmarkPrefill2K times both prefill paths at the shape of the bench's
// 2K graph prefill layer: one causal sequence of 2048 tokens, 16 query
// heads on one KV head, D 128, 128-key blocks, topK 16 with full lists
// (every token selects all of its visible blocks: dense causal), BF16
// Q/K/V, 2 workers, on the tier that runs the call (PrefillTier: the bf16
// twin of the active tier under the automatic choice). It reports the median process CPU
// time per call (cpu-ms: on a shared host it counts this process's cycles
// only), the best wall time (best-ms) and the rate of the visible
// (query, key) pairs at the best wall time against the tier's peak
// measured in the same run (%peak). The query-major path also runs with
// the float32 Q.K kernels where it would take VDPBF16PS scores
// (-f32scores, qmNoBF16Scores; not on a tier with bf16 products, whose
// lane kernels multiply in bf16 either way), and auto shows what the
// planner picks.
func BenchmarkPrefill2K(b *testing.B) {
	const workers = 2
	tn := PrefillTier(BF16, BF16, BF16)
	peak := calib.PeakGFLOPS(tile.PeakLoop(tn), 50*time.Millisecond) * workers
	c := qmCase{seqQ: []int{2048}, seqK: []int{2048}, hkv: 1, qpk: 16, d: 128, blk: 128, topK: 16,
		causal: true, qDtype: BF16, kvDtype: BF16, pattern: "local", full: true}
	pr := c.build(b, 1)
	p := pr.p
	flops := 4 * float64(p.D*c.qpk) * float64(visiblePairs(pr))
	for _, run := range []struct {
		path  PrefillPath
		f32qk bool
	}{{PathKV, false}, {PathQuery, false}, {PathQuery, true}, {PathAuto, false}} {
		if run.f32qk && BF16Products(BF16, BF16, BF16) {
			continue // the bf16-product lane kernels take no VDPBF16PS scores switch
		}
		name := fmt.Sprintf("%s/%s", tn, run.path)
		if run.f32qk {
			name += "-f32scores"
		}
		b.Run(name, func(b *testing.B) {
			defer func(f bool) { qmNoBF16Scores = f }(qmNoBF16Scores)
			qmNoBF16Scores = run.f32qk
			p.Path = run.path
			timePrefillCalls(b, p, workers, flops, peak)
		})
	}
}
