package attn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
)

// FuzzRunPrefillDecode runs small prefill and decode calls with
// fuzzer-chosen shapes, worker counts (up to 2^40), seeds and V magnitudes
// (up to the BF16 maximum): no panic, outputs equal to the float64
// reference (finite whenever V is finite), and allocation bounded by the
// work: per work item at most one worker's scratch, plus the partials.
func FuzzRunPrefillDecode(f *testing.F) {
	f.Add(uint8(1), uint8(2), uint8(16), uint8(2), uint8(9), uint8(40), int64(3), uint64(1), uint8(0), false)
	f.Add(uint8(2), uint8(4), uint8(5), uint8(3), uint8(30), uint8(90), int64(16384), uint64(7), uint8(127), true)
	f.Add(uint8(1), uint8(1), uint8(1), uint8(1), uint8(1), uint8(1), int64(1<<40), uint64(9), uint8(120), true)
	f.Fuzz(func(t *testing.T, hkv, qpk, blk, topK, sq, sk uint8, workers int64, seed uint64, vexp uint8, causal bool) {
		c := prefillCase{hkv: 1 + int(hkv%2), qpk: 1 << (qpk % 3), d: 16 << (seed % 2), blk: 1 + int(blk%24), topK: 1 + int(topK%4),
			seqQ: []int{int(sq % 40), int(sk % 7)}, seqK: []int{int(sk % 100), int(sq % 13)}, causal: causal}
		w := int(min(max(workers, -1), 1<<40))
		scale := float32(math.Ldexp(1, int(vexp%128)))
		gen := func(i int) float32 {
			x := float32(math.Sin(float64(i)*0.7)) * scale
			return max(min(x, bf16Max), -bf16Max)
		}
		rng := rand.New(rand.NewPCG(seed, 1))
		p, q2k := c.build(t, rng, max(w, 1), gen)
		out := newOutput(p.TotalQ*p.HQ, p.D)
		// A worker's scratch (see worker): the staging buffers (1024*d
		// bytes), the block kernel's block and accumulator (about 1540*d +
		// 70 KiB), one lane group (192*d + 9 KiB; the tiles here hold at
		// most 16 rows: qpk <= 4, decode's seqlen_q <= 3) and the per-row
		// slices of newWorker (under 16 KiB).
		perWorker := uint64(1024*p.D) + uint64(1540*p.D+70<<10) + uint64(192*p.D+9<<10) + 16<<10
		partials := uint64(p.TopK*p.TotalQ*p.HQ*(p.D+1)*4 + 1<<20)
		var started int
		runPrefill := func() {
			pool := NewPool(w)
			RunPrefill(p, NewWorkspace(w, p.D), pool, out)
			started = pool.Started()
			pool.Close()
		}
		// The largest phase bounds the goroutines and the scratch: the
		// KV-major work items, the combine chunks, the query-major tiles
		// (per KV head, ceil(seq_q / tile tokens) per sequence) and the
		// cached block conversions (per KV head, one per key block).
		qTiles, kBlocks := 0, 0
		for b := range c.seqQ {
			tok := qmTileTokens(c.qpk)
			qTiles += (c.seqQ[b] + tok - 1) / tok
			kBlocks += (c.seqK[b] + c.blk - 1) / c.blk
		}
		items := max(int(p.Sched.WorkCount), (p.TotalQ+combineChunk-1)/combineChunk, c.hkv*qTiles, c.hkv*kBlocks, 1)
		pbound := uint64(items)*perWorker + partials
		if got := allocs.Within(pbound, runPrefill); got > pbound {
			t.Fatalf("prefill allocated %d bytes for %d tasks", got, items)
		}
		if started > items {
			t.Fatalf("prefill: %d goroutines for %d tasks", started, items)
		}
		refPrefill(t, p, q2k, out, 1.0/64)

		dc := decodeCase{batch: 1 + int(sk%2), seqlenQ: 1 + int(sq%3), hkv: c.hkv, qpk: c.qpk, d: c.d, pageSize: c.blk,
			workers: max(w, 1), fixedSplit: int(topK % 3), used: []int32{int32(sk), int32(sq)}}
		dc.used = dc.used[:dc.batch]
		for i := range dc.used {
			dc.used[i] = max(dc.used[i], int32(dc.seqlenQ))
		}
		dp := dc.build(t, rng, gen)
		dout := newOutput(dp.Batch*dp.SeqlenQ*dp.HQ, dp.D)
		runDecode := func() {
			dpool := NewPool(w)
			RunDecode(dp, NewWorkspace(w, dp.D), dpool, dout)
			started = dpool.Started()
			dpool.Close()
		}
		items = max(dp.Sched.WorkCount, dp.Batch*dp.SeqlenQ, 1)
		dpart := uint64(DecodePartialRows(dp.Sched)*dp.HQ*(dp.D+1)*4 + 1<<20)
		dbound := uint64(items)*perWorker + dpart
		if got := allocs.Within(dbound, runDecode); got > dbound {
			t.Fatalf("decode allocated %d bytes for %d items", got, items)
		}
		if started > items {
			t.Fatalf("decode: %d goroutines for %d items", started, items)
		}
		refDecode(t, dp, dout, 1.0/64)
	})
}
