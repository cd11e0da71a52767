package attn

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/internal/cputime"
	"github.com/sparseattn/msa/kernels/tile"
)

// BenchmarkPrefillPaths times both prefill paths on one causal sequence
// (BF16 Q, 16 query heads, D 128, 128-key blocks (also 64 at qpk 16),
// topK 16, full lists of visible blocks, BF16 partials) for GQA 16, 4 and
// 1 (qpk 16, 4, 1) with dense BF16 K/V and, for qpk 4 and 1, also paged
// K/V (whose rows of one KV head are contiguous within a page), and dense
// NVFP4 K/V at qpk 16, and the selection patterns of the tests, on the
// tier that runs these calls (PrefillTier: the bf16 twin of the active
// tier under the automatic choice) and 2 workers. It reports the best call's rate against the
// tier's FMA peak (%peak), its wall time (best-ms), the median CPU time of
// the process per call (cpu-ms, where the platform gives it: on a shared
// host it counts this process's cycles only), and which paths auto runs
// (auto-query: 0 KV-major only, 1 query-major only, 0.5 both), and the
// cost model's counts summed over the call's tiles (entries, union: the E
// and U of cost.go, which fits its constants to them); on avx512bf16
// also the query-major path on the float32 lane kernels, and where the
// query-major path takes VDPBF16PS scores on the float32 lane kernels
// (tile.LanesBF16Scores) also that path with float32 scores
// (benchPaths). Run it with -benchtime=3x.
func BenchmarkPrefillPaths(b *testing.B) {
	const tokens, workers = 8192, 2
	tn := PrefillTier(BF16, BF16, BF16)
	peak := calib.PeakGFLOPS(tile.PeakLoop(tn), 50*time.Millisecond) * workers
	for _, g := range []struct {
		hkv, qpk, blk int
		paged         bool
		kv            Dtype
	}{{1, 16, 128, false, BF16}, {1, 16, 64, false, BF16}, {4, 4, 128, false, BF16}, {16, 1, 128, false, BF16},
		{4, 4, 128, true, BF16}, {16, 1, 128, true, BF16}, {1, 16, 128, false, NVFP4}} {
		for _, pattern := range []string{"random", "local", "sink", "uniform"} {
			c := qmCase{seqQ: []int{tokens}, seqK: []int{tokens}, hkv: g.hkv, qpk: g.qpk, d: 128, blk: g.blk, topK: 16,
				causal: true, paged: g.paged, qDtype: BF16, kvDtype: g.kv, pattern: pattern, full: true}
			pr := c.build(b, 1)
			p := pr.p
			flops := 4 * float64(p.D*g.qpk) * float64(visiblePairs(pr))
			// The cost model's counts over the call's tiles (cost.go fits
			// its constants to them): CSR entries and visible union blocks.
			var entries, union int
			for _, x := range tileStats(pr) {
				entries, union = entries+x[0], union+x[1]
			}
			auto := -1.0 // autoShare, run once per case that is benchmarked
			for _, run := range benchPaths(tn) {
				path := run.path
				b.Run(fmt.Sprintf("%s/kv=%s/qpk=%d/blk=%d/paged=%v/%s/%s%s", tn, g.kv, g.qpk, g.blk, g.paged, pattern, path, run.lanes), func(b *testing.B) {
					if auto < 0 {
						auto = autoShare(p, workers)
					}
					defer func(f, g bool) { qmFloat32Lanes, qmNoBF16Scores = f, g }(qmFloat32Lanes, qmNoBF16Scores)
					qmFloat32Lanes = run.lanes == "-f32lanes"
					qmNoBF16Scores = run.lanes == "-f32scores"
					p.Path = path
					timePrefillCalls(b, p, workers, flops, peak)
					b.ReportMetric(auto, "auto-query")
					b.ReportMetric(float64(entries), "entries")
					b.ReportMetric(float64(union), "union")
				})
			}
		}
	}
}

// benchPaths returns the runs of BenchmarkPrefillPaths on tier tn: the
// KV-major path and the query-major one, and on avx512bf16, whose
// query-major tiles multiply in bf16 (queryTile), also the
// query-major path on the float32 lane kernels (lanes "-f32lanes"), and
// where the query-major path takes VDPBF16PS scores on the float32 lane
// kernels (tile.LanesBF16Scores), also that path with float32 scores
// (lanes "-f32scores").
func benchPaths(tn string) []struct {
	path  PrefillPath
	lanes string
} {
	runs := []struct {
		path  PrefillPath
		lanes string
	}{{PathKV, ""}, {PathQuery, ""}}
	switch {
	case tn == "avx512bf16":
		runs = append(runs, runs[1])
		runs[2].lanes = "-f32lanes"
	case tile.LanesBF16Scores(128):
		runs = append(runs, runs[1])
		runs[2].lanes = "-f32scores"
	}
	return runs
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

// autoShare runs p once with PathAuto and returns which paths ran: 0
// KV-major only, 1 query-major only, 0.5 both (on tiles of their own).
func autoShare(p *Prefill, workers int) float64 {
	kv0, q0 := PrefillRuns(PathKV), PrefillRuns(PathQuery)
	runPath(p, PathAuto, workers, false)
	switch kv, q := PrefillRuns(PathKV) > kv0, PrefillRuns(PathQuery) > q0; {
	case kv && q:
		return 0.5
	case q:
		return 1
	}
	return 0
}

// timePrefillCalls runs p on a fresh pool of workers b.N times after one
// warm-up and reports the best call's share of peak (GFLOP/s) for flops
// useful FLOPs, its time, and the median process CPU time per call.
func timePrefillCalls(b *testing.B, p *Prefill, workers int, flops, peak float64) {
	pool := NewPool(workers)
	defer pool.Close()
	ws := NewWorkspace(workers, p.D)
	out := newOutput(p.TotalQ*p.HQ, p.D)
	RunPrefill(p, ws, pool, out) // warm-up
	best := time.Duration(math.MaxInt64)
	cpu := make([]time.Duration, 0, b.N)
	for range b.N {
		c0, cpuOK := cputime.Process()
		t0 := time.Now()
		RunPrefill(p, ws, pool, out)
		best = min(best, time.Since(t0))
		if c1, ok := cputime.Process(); ok && cpuOK {
			cpu = append(cpu, c1-c0)
		}
	}
	b.ReportMetric(100*flops/best.Seconds()/1e9/peak, "%peak")
	b.ReportMetric(float64(best.Microseconds())/1e3, "best-ms")
	if len(cpu) > 0 {
		slices.Sort(cpu)
		b.ReportMetric(float64(cpu[len(cpu)/2].Microseconds())/1e3, "cpu-ms")
	}
}
