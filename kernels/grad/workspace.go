package grad

import (
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/attn"
)

// tileRows is the number of (query, head) rows the dK/dV pass computes
// against a block at once (rounded down to whole query groups).
const tileRows = 64

// queryChunk is the number of query rows of one forward or dQ work item.
const queryChunk = 8

// Workspace runs forward and backward calls on a pool and keeps their
// buffers between calls. It is not safe for concurrent use; use one
// Workspace per goroutine (they may share a pool: attn.Pool serialises
// runs).
type Workspace struct {
	pool    *attn.Pool
	workers []*worker
	next    atomic.Int64
	task    task      // the items parallel runs
	nItems  int       // their number
	runFn   func(int) // ws.runItems, bound on first use so that runs allocate nothing
	prep    Prepared  // the problem of Forward, Backward and TemperatureLSE
	fwd     forwardCall
	tb      transposeCall
	tl      temperatureCall
	bw      backwardCall

	delta      []float32 // [TotalQ][HQ] rowsum(dO * O)
	items      []int32   // dK/dV work items h*TotalRows+r, largest first
	stageK     []float32 // paged: [TotalRows][Hkv][BlkKV][D] block gradients
	stageV     []float32
	pageRefPtr []int32 // paged: [NumPages+1] into pageRefs
	pageRefs   []int32 // paged: b*PTCols+col of every use of a page
	pagePos    []int32 // paged: [NumPages] fill cursors of pageRefs
	// SIMD tiers: the transposed K and V blocks of a Forward or Backward
	// call, [Hkv*TotalRows][D][padCols(BlkKV)] (block h*TotalRows+r).
	kt, vt []float32
}

// NewWorkspace returns a workspace that runs on pool. A nil pool runs
// everything on the calling goroutine.
func NewWorkspace(pool *attn.Pool) *Workspace {
	if pool == nil {
		pool = attn.NewPool(1) // one worker: the caller, no goroutines
	}
	return &Workspace{pool: pool}
}

// Workers returns the number of workers of the workspace's pool.
func (ws *Workspace) Workers() int { return ws.pool.Workers() }

// worker is one goroutine's scratch.
type worker struct {
	qpk, blk, d int
	ld          int            // leading dimension of s and dp: padCols(blk)
	simd        bool           // run the SIMD building blocks and GEMM tiles (useAsm)
	simd512     bool           // run the AVX-512 GEMM tiles, else the AVX2 ones (useAsm512, gemm.go)
	scr         [8][32]float32 // rows past the end of a GEMM tile
	tileC       [8]*float32    // C row pointers of the current GEMM tile (gemmTiles)
	kb, vb      []float32      // [blk][d] gathered K/V block
	dk, dv      []float32      // [blk][d] block gradient accumulators
	tq, tdo     []float32      // [tileRows][d] gathered Q and dO rows
	s, dp       []float32      // [tileRows][ld] scores/P and dP/dS
	acc         []float32      // [qpk][d] O or dQ accumulator
	lse, dlt    []float32      // [tileRows] LSE and Delta - dLSE of each row
	mx, sum     []float32      // [qpk] running max and sum (forward)
	mx64, sum64 []float64      // [qpk] maximum and sum (temperature LSE)
	cnt         []int32        // [tileRows] visible keys of each row
}

// rowsPerTile returns the rows of a dK/dV tile: whole query groups, at
// least one group.
func rowsPerTile(qpk int) int { return max(1, tileRows/qpk) * qpk }

// ensure sizes the per-worker scratch for a call.
func (ws *Workspace) ensure(qpk, blk, d int) {
	n := ws.pool.Workers()
	if len(ws.workers) == n && n > 0 {
		w := ws.workers[0]
		if w.qpk == qpk && w.blk == blk && w.d == d {
			ws.setSIMD(d)
			return
		}
	}
	ws.workers = make([]*worker, n)
	tr := rowsPerTile(qpk)
	for i := range ws.workers {
		ld := padCols(blk)
		ws.workers[i] = &worker{
			qpk: qpk, blk: blk, d: d, ld: ld,
			kb: make([]float32, blk*d), vb: make([]float32, blk*d),
			dk: make([]float32, blk*d), dv: make([]float32, blk*d),
			tq: make([]float32, tr*d), tdo: make([]float32, tr*d),
			s: make([]float32, tr*ld), dp: make([]float32, tr*ld),
			acc: make([]float32, qpk*d),
			lse: make([]float32, tr), dlt: make([]float32, tr),
			mx: make([]float32, qpk), sum: make([]float32, qpk),
			mx64: make([]float64, qpk), sum64: make([]float64, qpk),
			cnt: make([]int32, tr),
		}
	}
	ws.setSIMD(d)
}

// setSIMD selects the building blocks of this call from tile's active tier.
func (ws *Workspace) setSIMD(d int) {
	simd, simd512 := haveAsm && useAsm(d), haveAsm && useAsm512(d)
	for _, w := range ws.workers {
		w.simd, w.simd512 = simd, simd512
	}
}

// task is the work of one parallel run: item i of it on a worker's
// scratch. The calls keep theirs in Workspace fields and pass pointers to
// them, so that starting a run allocates nothing.
type task interface {
	item(wk *worker, i int)
}

// parallel runs t.item(worker, i) for every i in [0, n) on the pool; items
// are taken from a shared counter. Every item must write a disjoint part
// of the outputs.
func (ws *Workspace) parallel(n int, t task) {
	if n <= 0 {
		return
	}
	if ws.runFn == nil {
		ws.runFn = ws.runItems
	}
	ws.next.Store(0)
	ws.task, ws.nItems = t, n
	ws.pool.Run(ws.runFn)
	ws.task = nil
}

// runItems is worker w's loop of a parallel run.
func (ws *Workspace) runItems(w int) {
	wk := ws.workers[w]
	for {
		i := ws.next.Add(1) - 1
		if i >= int64(ws.nItems) {
			return
		}
		ws.task.item(wk, int(i))
	}
}

// blockKV returns tokens t0 .. t0+n-1 of sequence b, KV head h of x as
// [n][d] rows: a subslice of x when they are contiguous there, else a copy
// in buf.
func (dv *derived) blockKV(x []float32, d, b, h, t0, n int, buf []float32) []float32 {
	r, c := dv.kv.Run(b, h, t0, n)
	if c >= n {
		return x[r*d : (r+n)*d]
	}
	for i := 0; i < n; {
		r, c := dv.kv.Run(b, h, t0+i, n-i)
		copy(buf[i*d:(i+c)*d], x[r*d:(r+c)*d])
		i += c
	}
	return buf[:n*d]
}

// visible returns how many leading keys of the block starting at token t0
// (n keys) batch-local query i may see: keys t < seqK and, when causal,
// t <= i + seqK - seqQ (bottom-right alignment). It is attn's rule.
func visible(i, seqQ, seqK int, causal bool, t0, n int) int {
	lim := seqK
	if causal {
		lim = min(lim, i+seqK-seqQ+1)
	}
	return max(0, min(n, lim-t0))
}

// growI32 returns buf resliced to n when its capacity allows, else a new
// slice.
func growI32(buf []int32, n int) []int32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]int32, n)
}

// growF32 is growI32 for float32.
func growF32(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}
