package attn

import (
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
)

// TestWorkersBoundedByWork checks that Workers = 16384 does not allocate a
// workspace per requested worker (about 4 GiB) for an 8-query call: the pool is capped at MaxWorkers, a run starts no more goroutines
// than it has work items, and per-worker scratch exists only for workers
// that ran.
func TestWorkersBoundedByWork(t *testing.T) {
	pool := NewPool(16384)
	defer pool.Close()
	if pool.Workers() != MaxWorkers || pool.Started() != 1 {
		t.Fatalf("NewPool(16384): %d workers, %d started; want %d, 1", pool.Workers(), pool.Started(), MaxWorkers)
	}
	c := prefillCase{hkv: 1, qpk: 2, d: 32, blk: 16, topK: 2, seqQ: []int{8}, seqK: []int{40}}
	p, q2k := c.build(t, rand.New(rand.NewPCG(1, 1)), 16384, nil)
	items := int(p.Sched.WorkCount)
	out := newOutput(p.TotalQ*p.HQ, p.D)
	var ws *Workspace
	got := allocs.Bytes(2, func() { // the fewer bytes of two runs: see allocs.Bytes
		ws = NewWorkspace(16384, p.D)
		RunPrefill(p, ws, pool, out)
	})
	refPrefill(t, p, q2k, out, 1.0/64)
	if got := pool.Started(); got > max(items, 1) {
		t.Errorf("%d goroutines started for %d work items", got, items)
	}
	made := 0
	for _, wk := range ws.workers {
		if wk != nil {
			made++
		}
	}
	if len(ws.workers) > MaxWorkers || made > max(items, 1) {
		t.Errorf("%d worker slots, %d workers created for %d work items", len(ws.workers), made, items)
	}
	// Per worker: block buffers 3072*d + 67584 bytes plus small scratch.
	limit := uint64(max(items, 1)*(3072*p.D+80<<10) + 1<<20)
	if got > limit {
		t.Errorf("allocated %d bytes for %d work items, want <= %d", got, items, limit)
	}

	// Decode: goroutines bounded by the items, too.
	dc := decodeCase{batch: 1, seqlenQ: 1, hkv: 1, qpk: 4, d: 32, pageSize: 16, workers: 16384, used: []int32{50}}
	dp := dc.build(t, rand.New(rand.NewPCG(2, 2)), nil)
	dpool := NewPool(16384)
	defer dpool.Close()
	dout := newOutput(dp.Batch*dp.SeqlenQ*dp.HQ, dp.D)
	RunDecode(dp, NewWorkspace(16384, dp.D), dpool, dout)
	refDecode(t, dp, dout, 1.0/64)
	if got, n := dpool.Started(), max(dp.Sched.WorkCount, dp.Batch*dp.SeqlenQ); got > n {
		t.Errorf("decode: %d goroutines started for %d work items", got, n)
	}
}

// TestDecodePartialsFromData checks that a fixed-capacity decode schedule,
// whose o_indptr reserves room for the longest sequence the page table
// allows, gets partial buffers sized by this step's split counts.
func TestDecodePartialsFromData(t *testing.T) {
	c := decodeCase{batch: 2, seqlenQ: 1, hkv: 1, qpk: 4, d: 32, pageSize: 16, workers: 2, fixedSplit: 1, used: []int32{40, 20}}
	p := c.build(t, rand.New(rand.NewPCG(3, 3)), nil)
	// Declare a much larger page table in the fixed-capacity layout.
	sp := p.Sched.Params
	sp.MaxPagesPerSeq, sp.FixedCapacity = 1<<16, true
	pt := make([]int32, 2<<16)
	copy(pt, p.KV.PageTable[:3])
	copy(pt[1<<16:], p.KV.PageTable[3:])
	p.KV.PageTable, p.KV.PTCols = pt, 1<<16
	if err := rebuild(p, sp); err != nil {
		t.Fatal(err)
	}
	ws := NewWorkspace(2, p.D)
	pool := NewPool(2)
	defer pool.Close()
	out := newOutput(p.Batch*p.SeqlenQ*p.HQ, p.D)
	RunDecode(p, ws, pool, out)
	refDecode(t, p, out, 1.0/64)
	want := DecodePartialRows(p.Sched) * p.HQ
	if want >= p.Sched.PartialRows*p.HQ || len(ws.Partials.LSE) != want {
		t.Fatalf("partial rows %d, want %d (schedule's fixed layout: %d)", len(ws.Partials.LSE), want, p.Sched.PartialRows*p.HQ)
	}
}
