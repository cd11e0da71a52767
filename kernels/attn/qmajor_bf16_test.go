package attn

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueryMajorBF16Lanes: on the avx512bf16 tier the query-major tiles
// run the bf16-product lane kernels (tile.Lanes.SetBF16Products), the
// float32 ones only when qmFloat32Lanes says so, and a decode call on the
// same workspace afterwards runs the float32 lane kernels again, with the
// bits of a decode on a fresh workspace (decode's numbers on that tier do
// not move with the query-major path).
func TestQueryMajorBF16Lanes(t *testing.T) {
	useTier(t, "avx512bf16")
	c := qmCase{seqQ: []int{70}, seqK: []int{150}, hkv: 1, qpk: 4, d: 64, blk: 64, topK: 2, causal: true,
		qDtype: BF16, kvDtype: BF16, pattern: "random"}
	pr := c.build(t, 3)
	p := pr.p
	p.Path = PathQuery
	pool := NewPool(1)
	defer pool.Close()
	dc := decodeCase{batch: 2, seqlenQ: 1, hkv: 1, qpk: 4, d: 64, pageSize: 16, workers: 1, used: []int32{40, 20}}
	dp := dc.build(t, rand.New(rand.NewPCG(5, 5)), nil)
	fresh := newOutput(dp.Batch*dp.SeqlenQ*dp.HQ, dp.D)
	RunDecode(dp, NewWorkspace(1, dp.D), pool, fresh)
	for _, f32 := range []bool{false, true} {
		qmFloat32Lanes = f32
		ws := NewWorkspace(1, p.D)
		RunPrefill(p, ws, pool, newOutput(p.TotalQ*p.HQ, p.D))
		qmFloat32Lanes = false
		if got := ws.worker(0).lanes.g[0].BF16Lanes(); got == f32 {
			t.Fatalf("qmFloat32Lanes %v: the query-major tiles ran bf16-product lanes: %v", f32, got)
		}
		out := newOutput(dp.Batch*dp.SeqlenQ*dp.HQ, dp.D)
		RunDecode(dp, ws, pool, out)
		if ws.worker(0).lanes.g[0].BF16Lanes() {
			t.Fatal("decode after the query-major path ran bf16-product lanes")
		}
		if !slices.Equal(out.O, fresh.O) || !slices.EqualFunc(out.LSE, fresh.LSE, sameBits) {
			t.Fatal("decode after the query-major path differs from decode on a fresh workspace")
		}
	}
}

// TestQueryMajorBF16NoAllocs: on the avx512bf16 tier, once a workspace has
// run a call, further query-major calls on the bf16-product lanes
// allocate nothing (bf16 K/V read in place, e4m3fn K/V staged).
func TestQueryMajorBF16NoAllocs(t *testing.T) {
	useTier(t, "avx512bf16")
	for _, kv := range []Dtype{BF16, E4M3} {
		c := qmCase{seqQ: []int{300, 0, 200}, seqK: []int{300, 50, 400}, hkv: 2, qpk: 4, d: 64, blk: 64, topK: 4,
			causal: true, qDtype: BF16, kvDtype: kv, pattern: "random", invT: 0.5}
		p := c.build(t, 5).p
		p.Path = PathQuery
		pool := NewPool(2)
		ws := NewWorkspace(2, p.D)
		out := newOutput(p.TotalQ*p.HQ, p.D)
		out.TLSE = make([]float32, p.TotalQ*p.HQ)
		for range 3 {
			RunPrefill(p, ws, pool, out)
		}
		a := warmAllocs(10, func() { RunPrefill(p, ws, pool, out) })
		pool.Close()
		if a != 0 {
			t.Fatalf("K/V %s: %v allocations per run", kv, a)
		}
	}
}
