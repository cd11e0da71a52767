package attn

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
)

// maxTileRows is the number of (query, head) rows one Acc pass computes.
const maxTileRows = 128

// Prefill describes one sparse prefill call. Every index in it has been
// validated by the caller (package op); Run trusts them.
type Prefill struct {
	Q       Operand           // [TotalQ, HQ, D] rows
	K, V    Operand           // token rows addressed through KV
	KV      KVLayout          // where K/V token rows live (dense or paged)
	TotalQ  int               // query tokens over the batch
	HQ, Hkv int               // query heads and KV heads (HQ % Hkv == 0)
	D       int               // head dimension
	CuQ     []int32           // [B+1]
	SeqK    []int32           // [B] effective key length of each sequence
	BlkKV   int               // keys per block, <= tile.BlockN
	Causal  bool              // bottom-right aligned causal mask
	Scale   float32           // softmax_scale
	InvT    float32           // 1/T for temperature LSE partials; 0 = none
	PV      tile.Round        // rounding of P before P.V (the contract's pv dtype)
	TopK    int               // selected blocks per query
	CSR     *plan.CSR         // the k2q CSR
	Sched   *plan.FwdSchedule // the forward schedule built from CSR
	Partial PartialDtype      // storage dtype of the per-slot partials
	// OutputScale multiplies O in the combine (the NVFP4 V global scale);
	// 1 when absent.
	OutputScale float32
	// Path selects the KV-major or the query-major execution; PathDefault
	// takes the process setting (MSA_PREFILL_PATH, see PrefillPath).
	Path PrefillPath
}

// Output receives the combined results. O is [TotalQ, HQ, D] BF16, LSE and
// TLSE are [TotalQ, HQ]; TLSE may be nil.
type Output struct {
	O    []lowp.BFloat16 // [TotalQ, HQ, D]
	LSE  []float32       // [TotalQ, HQ], natural log
	TLSE []float32       // [TotalQ, HQ] temperature LSE, or nil
}

// worker holds one goroutine's scratch buffers. The staging buffers (kbuf,
// vbuf: 1024*d bytes) are allocated by buffers on the worker's first work
// item, the block kernel's block and accumulator (blk, acc: about 1540*d +
// 70 KiB) by blockKernel when the worker first runs it (the KV-major path,
// and decode or query-major tiles where the tier has no SIMD lanes), and
// the lane groups (192*d + 9 KiB per 16 rows) as decode and query-major
// tiles need them: workers that only combine stay small, and decode
// workers hold their staging buffers and lane groups only.
type worker struct {
	d      int
	kbuf   []float32 // [BlockN][d]
	vbuf   []float32 // [BlockN][d]
	blk    *tile.Block
	acc    *tile.Acc
	valid  []int32
	lse    []float32
	tlse   []float32
	inv    []float32   // per-row normalisation factors (Acc.FinishLSE)
	lanes  *lanesAcc   // decode and query-major accumulators (SIMD lanes), groups created as tiles need them
	block  *blockAcc   // decode accumulator over acc/blk otherwise
	stage  kvStager    // decode: the block the accumulator stages
	vs     vScale      // decode: the current tile's V overflow guard
	dst    []int32     // prefill: partial row of each Acc row
	lim    []int32     // keyWalk: causal limit of each token of the tile
	blocks []int32     // keyWalk: the union of the tile's selected blocks
	kept   []int32     // prefill: the entries of one Acc pass (kvRow)
	qmKV   KVLayout    // query-major: the layout of the K/V block cache's head
	hints  []tile.Hint // prefill: the next tile's query rows, prefetched by the update
	ws     []float32
	ls     []float32
	tmp    []float32
	accO   []float32
}

func newWorker(d, splits int) *worker {
	return &worker{
		d:     d,
		valid: make([]int32, maxTileRows), lse: make([]float32, maxTileRows),
		tlse: make([]float32, maxTileRows), dst: make([]int32, maxTileRows), inv: make([]float32, maxTileRows),
		lim: make([]int32, maxTileRows), blocks: make([]int32, 0, maxTileRows), kept: make([]int32, 0, maxTileRows),
		tmp: make([]float32, d), accO: make([]float32, d), hints: make([]tile.Hint, 0, maxTileRows),
		ls: make([]float32, splits), ws: make([]float32, splits),
	}
}

// buffers allocates the K/V staging buffers on first use and returns wk.
func (wk *worker) buffers() *worker {
	if wk.kbuf == nil {
		wk.kbuf, wk.vbuf = make([]float32, tile.BlockN*wk.d), make([]float32, tile.BlockN*wk.d)
	}
	return wk
}

// blockKernel is buffers with the block kernel's block and accumulator.
func (wk *worker) blockKernel() *worker {
	if wk.acc == nil {
		wk.blk, wk.acc = tile.NewBlock(wk.d), tile.NewAcc(maxTileRows, wk.d)
	}
	return wk.buffers()
}

// Workspace holds reusable buffers: per-worker scratch and the partials.
// A worker's scratch is created the first time a run uses that worker, and
// a run uses at most as many workers as it has work items (Pool.RunN).
type Workspace struct {
	workers  []*worker     // [n], nil until used
	d        int           // head dimension of the workers
	splits   int           // combine slots reserved per worker (Reserve)
	decOff   []int32       // decode: first partial row of each request
	Partials Partials      // the partial buffers, sized by the last run
	tasks    []prefillTask // prefill: the current window's tasks
	qtasks   []qmTask      // query-major prefill: the current window's tiles
	sel      []int32       // query-major prefill: the window's block table [Hkv][win][slots]
	slots    int           // query-major prefill: entries per token in sel
	cache    qmCache       // query-major prefill: the K/V block cache
	// auto: per-tile path choices of the call (qmchoice.go)
	auto     bool           // the query-major part chooses per tile
	mixed    bool           // the KV-major part computes only tileKV's tiles
	tileKV   []bool         // [Hkv][tiles] the tile runs KV-major
	tileBase []int32        // [B+1] first tile of each sequence
	tileTok  int            // tokens per tile
	stamp    []int64        // [blocks] last tile that counted the block
	stampID  int64          // the current tile's stamp
	costs    *pathCosts     // the constants of the tier that runs the call (callCosts)
	staged   bool           // query-major tiles would decode K/V per tile
	win      int            // prefill: query window size W
	fixedWin int            // tests: W to use instead of windowQueries / fusedWindow (0: automatic)
	combine  combineMode    // tests, benchmarks: the KV-major combine (0: defaultCombine)
	ringRows int            // fused: partial rows of one window's buffer in the ring
	winStart []int32        // fused: [windows+1] first task of each window in tasks
	winFill  []int32        // fused: scratch of fusedTasks
	winLeft  []atomic.Int32 // fused: [windows] tasks left, then winCombined
	winMu    sync.Mutex     // fused: guards the waits for winLeft (winCond)
	winCond  sync.Cond      // fused: signalled when a window is combined
	cacheOn  bool           // fused: tasks read their blocks from kvBlocks
	kvBase   []int32        // fused: [B+1] first block of each sequence
	kvSlot   []int32        // fused: [Hkv][blocks] entry of kvBlocks, -1 none
	kvList   []int32        // fused: a work item of each cached block
	kvBlocks []kvBlock      // fused: the block cache (kvblocks.go)
	kvBlockD int            // head dimension of kvBlocks
	noStage  bool           // tests: decode decodes whole blocks, never staged
	w0, w1   int            // prefill: the current window [w0, w1)
	bf16     bool           // prefill: the call asks for bf16 products (exactBF16Call)
	kvK, kvV Operand        // KV-major: the call's K and V as decoded (kvOperands)
	kvScale  float32        // KV-major: the score scale, softmax_scale * log2(e) (kvOperands)
	kvOut    float32        // KV-major: the combine's output factor (kvOperands)
	next     atomic.Int64
	// prefill / decode of the current call
	pf *Prefill
	pd *Decode
	po *Output
	// bound entry points, created once so Run does not allocate
	prefillItem, combineRows, decodeItem, decodeCombine, queryItems, cacheItems, fusedItems, blockItems func(int)
}

// NewWorkspace returns a workspace for n workers (at most MaxWorkers) and
// head dimension d. It allocates no per-worker scratch yet.
func NewWorkspace(n, d int) *Workspace {
	ws := &Workspace{}
	ws.winCond.L = &ws.winMu
	ws.ensure(n, d)
	ws.prefillItem = ws.runPrefillItems
	ws.combineRows = ws.runCombine
	ws.decodeItem = ws.runDecodeItems
	ws.decodeCombine = ws.runDecodeCombine
	ws.queryItems = ws.runQueryItems
	ws.cacheItems = ws.runCacheItems
	ws.fusedItems = ws.runFusedItems
	ws.blockItems = ws.runBlockItems
	return ws
}

// ensure makes room for n workers (at most MaxWorkers) of head dimension
// d, dropping the scratch of another d.
func (ws *Workspace) ensure(n, d int) {
	n = min(max(n, 0), MaxWorkers)
	if d != ws.d {
		clear(ws.workers)
		ws.d = d
	}
	for len(ws.workers) < n {
		ws.workers = append(ws.workers, nil)
	}
}

// worker returns the scratch of worker w, creating it on first use.
func (ws *Workspace) worker(w int) *worker {
	wk := ws.workers[w]
	if wk == nil {
		wk = newWorker(ws.d, ws.splits)
		ws.workers[w] = wk
	}
	return wk
}

// RunPrefill computes the attention of p into out; pool supplies the
// goroutines. The query-major path (runQueryMajor: every tile under
// PathQuery, under PathAuto the tiles the cost model of cost.go gives it)
// walks query tiles; the KV-major path (runKVMajor, over the other tiles'
// rows), described here, computes the per-slot partials of every scheduled
// work item, then combines them into out.
//
// Long calls run in query windows, so that the partials
// ([TopK][TotalQ][HQ][D], 2 GiB of BF16 at 32K tokens with topK 16 and 16
// heads) do not grow with the call: for each window of W consecutive
// queries (see windowQueries) the workers compute the part of every work
// item whose queries fall in the window (prefillTask), then combine the
// window's queries, and the next window reuses the buffer. Every partial
// row and every combined row is computed exactly as with one window, so the
// results do not depend on W. The fused form of the KV-major path
// (kvfused.go: small windows, each combined by the worker that finishes
// its last work item) gives the same bits; it is selectable for
// measurements (Workspace.combine) and not the default.
func RunPrefill(p *Prefill, ws *Workspace, pool *Pool, out *Output) {
	ws.ensure(pool.Workers(), p.D)
	ws.mixed = false
	ws.bf16 = exactBF16Call(p)
	if path := p.path(); path != PathKV {
		ws.Partials.vec = vecLevel()
		p.Q.vec, p.K.vec, p.V.vec = ws.Partials.vec, ws.Partials.vec, ws.Partials.vec
		q, kv := ws.runQueryMajor(p, pool, out, path == PathAuto)
		if path == PathQuery || q && !kv {
			prefillRuns[PathQuery].Add(1)
			return
		}
		if q {
			// Both kinds of tiles: the KV-major part computes the rest.
			prefillRuns[PathQuery].Add(1)
			ws.mixed = true
		}
	}
	ws.runKVMajor(p, pool, out)
	ws.mixed = false
}

// runKVMajor is RunPrefill's KV-major path (over the rows of the tiles
// left to it when ws.mixed).
func (ws *Workspace) runKVMajor(p *Prefill, pool *Pool, out *Output) {
	prefillRuns[PathKV].Add(1)
	slots := maxSlots(p)
	ws.Partials.vec = vecLevel()
	p.Q.vec, p.K.vec, p.V.vec = ws.Partials.vec, ws.Partials.vec, ws.Partials.vec
	ws.kvOperands(p)
	ws.pf, ws.po = p, out
	mode := ws.combine
	if mode == combineDefault {
		mode = defaultCombine
	}
	if mode == combineFused && ws.cacheFits(p) {
		w := fusedWindow(p, slots, pool.Workers())
		if ws.fixedWin > 0 {
			w = ws.fixedWin
		}
		ws.runFused(p, pool, slots, w)
		ws.pf, ws.po = nil, nil
		return
	}
	w := windowQueries(p, slots)
	if ws.fixedWin > 0 {
		w = ws.fixedWin
	}
	ws.Partials.Ensure(p.Partial, p.D, slots*w*p.HQ, p.InvT > 0)
	// A window's partial rows are read back by the combine only after the
	// whole window's work items: beyond the caches, their stores bypass
	// them (no read for ownership of each line, no eviction of the blocks
	// and query rows the items reuse).
	ws.Partials.stream = slots*w*p.HQ*p.D*p.Partial.Size() >= streamPartialBytes
	ws.win = w
	for w0 := 0; w0 < p.TotalQ; w0 += w {
		ws.w0, ws.w1 = w0, min(p.TotalQ, w0+w)
		t0 := time.Now() // for phaseClock: two clock reads, nothing next to a window's work
		if n := ws.windowTasks(p); n > 0 {
			ws.next.Store(0)
			pool.RunN(n, ws.prefillItem)
		}
		t1 := time.Now()
		ws.next.Store(0)
		pool.RunN(ws.combineTasks(), ws.combineRows)
		if phaseClock != nil {
			phaseClock(t1.Sub(t0), time.Since(t1))
		}
	}
	ws.pf, ws.po = nil, nil
}

// phaseClock, when set (by benchmarks only; nil otherwise), is given the
// wall time of each query window's two phases: the work items (partials)
// and the combine. CPU profiles are no substitute: on a virtual machine
// -cpuprofile inflates the store-heavy combine several times over.
var phaseClock func(items, combine time.Duration)

// The parts of a work item that itemClock times.
const (
	partLoad   = iota // K/V block decode into the worker's block
	partSetQ          // per tile: Reset, query rows, valid counts and destinations
	partUpdate        // per tile: the next tile's prefetch hints and Acc.Update
	partStore         // per tile: FinishLSE and the partial rows' stores
	itemParts
)

// itemClock, when set (by benchmarks only; nil otherwise), is given the
// wall time of each part of each work item, from the worker running it
// (concurrently from several workers). Unset, each lap is one nil check.
var itemClock func(part int, d time.Duration)

// lap gives itemClock the time since *t as part and restarts *t.
func lap(part int, t *time.Time) {
	if itemClock != nil {
		now := time.Now()
		itemClock(part, now.Sub(*t))
		*t = now
	}
}

// MaxPartialBytes bounds the partial outputs one prefill call keeps at a
// time (the query window of RunPrefill): 256 MiB.
const MaxPartialBytes = 256 << 20

// streamPartialBytes is the size of a query window's partials from which
// prefill stores them non-temporally (Partials.stream): 16 MiB, beyond the
// L2 caches and half of a typical L3, so cached rows would be evicted
// before the combine reads them. Streaming lowers the stores' share of the
// work items by about 3 points and gains 1-3 points of peak per call,
// although the combine, which then finds none of its rows in L3, grows by
// about 1.5 points: compare store% and combine% of
// `go test ./kernels/attn -run '^$' -bench 'PrefillPhases/tier=avx512bf16'`
// with this constant at 16 MiB and above the window size.
const streamPartialBytes = 16 << 20

// minWindow is the smallest query window: windows end in a barrier (all
// tasks done, then the combine), and a window must hold enough work for
// every worker, also in the first, causally short windows.
const minWindow = 1024

// maxSlots returns the largest split count of the schedule (at most TopK, at
// least 1): the partial slots a call uses, sized from the data rather than
// from the declared TopK.
func maxSlots(p *Prefill) int {
	n := int32(1)
	for _, c := range p.Sched.SplitCounts {
		n = max(n, c)
	}
	return min(int(n), max(p.TopK, 1))
}

// windowQueries returns the query window W of a prefill call with slots
// partial slots per (query, head): all queries when their partials fit in
// MaxPartialBytes, else the largest window that
// fits, raised to minWindow queries as long as that stays within 4x the
// cap (at least one query). The windows are as large as the cap allows
// because small windows (64-256 queries, partials in cache) are not faster
// end to end: every window reloads its K/V blocks and ends in a barrier,
// which costs more the more workers wait at it. The fused form
// (kvfused.go), which has neither cost, is not faster either.
func windowQueries(p *Prefill, slots int) int {
	perQuery := max(slots*p.HQ*p.D*p.Partial.Size(), 1)
	w := MaxPartialBytes / perQuery
	if w < minWindow {
		w = min(minWindow, 4*MaxPartialBytes/perQuery)
	}
	return max(min(w, p.TotalQ), 1)
}

// prefillTask is the part of work item item whose queries lie in the
// current window: entries [e0, e1) of the item's CSR row range.
// win is the task's window in the fused form (runFused), which lists the
// tasks of every window at once; item -1 marks a window's combine-only
// task (a window without work).
type prefillTask struct{ item, e0, e1, win int32 }

// itemWindow returns where work item i's queries that lie in the window
// [ws.w0, ws.w1) sit among its CSR entries: entries [base+lo, base+hi) of
// QIdx and QSplit (lo == hi when none does).
func (ws *Workspace) itemWindow(p *Prefill, i int) (base, lo, hi int) {
	c := p.CSR
	m := p.Sched.Metadata[i*6 : i*6+6]
	h, row, qBegin, qCount, b := int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4])
	if int(p.CuQ[b]) >= ws.w1 || int(p.CuQ[b+1]) <= ws.w0 {
		return 0, 0, 0
	}
	base = h*c.Stride + int(c.RowPtr[h*(c.TotalRows+1)+row]) + qBegin
	qs := c.QIdx[base : base+qCount] // batch-local, strictly ascending
	lo, _ = slices.BinarySearch(qs, int32(ws.w0)-p.CuQ[b])
	hi, _ = slices.BinarySearch(qs, int32(ws.w1)-p.CuQ[b])
	return base, lo, hi
}

// windowTasks lists the tasks of the window [ws.w0, ws.w1), largest first
// (so that the last tasks to start are short and the workers finish
// together; the order changes no result), and returns their number.
func (ws *Workspace) windowTasks(p *Prefill) int {
	ws.tasks = ws.tasks[:0]
	for i := 0; i < int(p.Sched.WorkCount); i++ {
		if base, lo, hi := ws.itemWindow(p, i); lo < hi && ws.itemHasKVRow(p, i, base, lo, hi) {
			qBegin := int(p.Sched.Metadata[i*6+2])
			ws.tasks = append(ws.tasks, prefillTask{item: int32(i), e0: int32(qBegin + lo), e1: int32(qBegin + hi)})
		}
	}
	slices.SortStableFunc(ws.tasks, func(a, b prefillTask) int {
		return cmp.Compare(b.e1-b.e0, a.e1-a.e0)
	})
	return len(ws.tasks)
}

// itemHasKVRow reports whether some query of entries [base+lo, base+hi)
// of work item i is one the KV-major part computes (kvRow).
func (ws *Workspace) itemHasKVRow(p *Prefill, i, base, lo, hi int) bool {
	if !ws.mixed {
		return true
	}
	h, b := int(p.Sched.Metadata[i*6]), int(p.Sched.Metadata[i*6+4])
	for _, q := range p.CSR.QIdx[base+lo : base+hi] {
		if ws.kvRow(h, b, int(q)) {
			return true
		}
	}
	return false
}

// runPrefillItems takes the window's tasks from the shared counter until
// none is left.
func (ws *Workspace) runPrefillItems(w int) {
	wk := ws.worker(w).blockKernel()
	n := int64(len(ws.tasks))
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		ws.runTask(wk, ws.tasks[i], ws.w0, 0)
	}
}

// runTask runs task t of the window that starts at query w0, whose
// partial rows start at row pbase (prefillItemRun).
func (ws *Workspace) runTask(wk *worker, t prefillTask, w0, pbase int) {
	m := ws.pf.Sched.Metadata[int(t.item)*6 : int(t.item)*6+6]
	ws.prefillItemRun(wk, int(m[0]), int(m[1]), int(t.e0), int(t.e1-t.e0), int(m[4]), int(m[5]), w0, pbase)
}

// prefillItemRun computes work item (h, row, qBegin, qCount, b, j): the
// block j of sequence b for KV head h against the queries of CSR row row
// in [qBegin, qBegin+qCount). The queries lie in the window that starts at
// query w0, whose partial rows start at row pbase of the partials (slot s
// of query gq, query head hq at row pbase + (s*ws.win + gq-w0)*HQ + hq).
func (ws *Workspace) prefillItemRun(wk *worker, h, row, qBegin, qCount, b, j, w0, pbase int) {
	p := ws.pf
	seqK := int(p.SeqK[b])
	t0 := j * p.BlkKV
	n := min(p.BlkKV, seqK-t0)
	if n <= 0 {
		n = 0
	}
	var clk time.Time
	if itemClock != nil {
		clk = time.Now()
	}
	blk := wk.blk
	var vf float32 // the factor V's overflow guard leaves to the rows
	if c := ws.cachedBlock(p, h, b, j); c != nil {
		blk, vf = c.blk, c.vf
	} else {
		vf = ws.loadBlock(p, h, b, j, wk.kbuf, wk.vbuf, wk.blk)
	}
	lap(partLoad, &clk)

	qpk := p.HQ / p.Hkv
	seqQ := int(p.CuQ[b+1] - p.CuQ[b])
	qBase := int(p.CuQ[b])
	scale := ws.kvScale
	perTile := maxTileRows / qpk
	c := p.CSR
	base := h*c.Stride + int(c.RowPtr[h*(c.TotalRows+1)+row]) + qBegin
	for e0 := 0; e0 < qCount; {
		// The next perTile entries whose rows this part computes (all of
		// them unless a query-major part took some tiles: kvRow).
		kept := wk.kept[:0]
		for ; e0 < qCount && len(kept) < perTile; e0++ {
			if ws.kvRow(h, b, int(c.QIdx[base+e0])) {
				kept = append(kept, int32(e0))
			}
		}
		cnt := len(kept)
		if cnt == 0 {
			break
		}
		m := cnt * qpk
		wk.acc.SetBF16Products(ws.bf16)
		wk.acc.Reset(m, scale, p.PV, p.InvT)
		for e, ke := range kept {
			idx := base + int(ke)
			q := int(c.QIdx[idx])
			slot := int(p.Sched.QSplit[idx] >> 24)
			gq := qBase + q
			v := int32(visible(q, seqQ, seqK, p.Causal, t0, n))
			// The query's qpk heads of KV head h are consecutive rows of Q
			// and of the accumulator: one call for all of them.
			p.Q.setQRows(wk.acc, e*qpk, gq*p.HQ+h*qpk, qpk)
			for g := 0; g < qpk; g++ {
				rr := e*qpk + g
				wk.valid[rr] = v
				wk.dst[rr] = int32(pbase + (slot*ws.win+gq-w0)*p.HQ + h*qpk + g)
			}
		}
		lap(partSetQ, &clk)
		if n > 0 {
			// While the tile computes, prefetch the query rows of the
			// next tile (gathered by query index, the tile's DRAM misses).
			hs := wk.hints[:0]
			for e := e0; e < min(qCount, e0+perTile); e++ {
				gq := qBase + int(c.QIdx[base+e])
				if ptr, nb := p.Q.storage(gq*p.HQ+h*qpk, qpk); ptr != nil {
					hs = append(hs, tile.Hint{Addr: ptr, Bytes: nb})
				}
			}
			wk.acc.Prefetch(hs)
			wk.acc.Update(blk, wk.valid[:m])
		}
		lap(partUpdate, &clk)
		wk.acc.FinishLSE(wk.lse[:m], wk.tlse[:m], wk.inv[:m])
		pt := &ws.Partials
		if vf != 1 {
			for r := range m {
				wk.inv[r] *= vf
			}
		}
		pt.storeRows(wk.dst[:m], wk.acc.ORows(0, m), wk.inv[:m], wk.tmp)
		for r := 0; r < m; r++ {
			i := int(wk.dst[r])
			pt.LSE[i] = wk.lse[r]
			if p.InvT > 0 {
				pt.TLSE[i] = wk.tlse[r]
			}
		}
		lap(partStore, &clk)
	}
}

// visible returns how many leading keys of the block starting at token t0
// (n keys) batch-local query q may see: keys t < seqK and, when causal,
// t <= q + seqK - seqQ (bottom-right alignment).
func visible(q, seqQ, seqK int, causal bool, t0, n int) int {
	lim := seqK
	if causal {
		lim = min(lim, q+seqK-seqQ+1)
	}
	return max(0, min(n, lim-t0))
}

// combineChunk is the number of query rows one combine task handles.
const combineChunk = 16

// runCombine merges the partial slots of every (query, head) of the
// current window (contract §5), combineChunk queries per task.
func (ws *Workspace) runCombine(w int) {
	wk := ws.combiner(w)
	tasks := int64(ws.combineTasks())
	for {
		t := ws.next.Add(1) - 1
		if t >= tasks {
			return
		}
		q0 := ws.w0 + int(t)*combineChunk
		ws.combineQueries(wk, q0, min(ws.w1, q0+combineChunk), ws.w0, 0)
	}
}

// combiner returns worker w's scratch with room for the combine's slot
// weights (allocated once).
func (ws *Workspace) combiner(w int) *worker {
	wk := ws.worker(w)
	if k := ws.pf.TopK; cap(wk.ws) < k {
		wk.ws = make([]float32, k)
		wk.ls = make([]float32, k)
	}
	return wk
}

// combineQueries merges the partial slots of every head of queries [q0,
// q1) of the window that starts at query w0 and whose partial rows start
// at row base (prefillItemRun's layout) into the output. Each output row
// merges its slots in increasing slot order (combineRow), whoever calls
// it and whenever: the bits do not depend on the window or the worker.
func (ws *Workspace) combineQueries(wk *worker, q0, q1, w0, base int) {
	p, out := ws.pf, ws.po
	qpk := p.HQ / p.Hkv
	pt := &ws.Partials
	plane := ws.win * p.HQ // partial rows of one slot
	for gq := q0; gq < q1; gq++ {
		b := -1 // the sequence of gq when a query-major part ran
		if ws.mixed {
			b, _ = slices.BinarySearch(p.CuQ, int32(gq)+1)
			if b--; b < 0 || b >= len(p.CuQ)-1 || gq >= int(p.CuQ[b+1]) {
				b = -1 // outside every sequence: the KV-major part's
			}
		}
		for hq := 0; hq < p.HQ; hq++ {
			if b >= 0 && !ws.kvRow(hq/qpk, b, gq-int(p.CuQ[b])) {
				continue // written by a query-major tile
			}
			ns := int(p.Sched.SplitCounts[gq*p.Hkv+hq/qpk])
			ns = min(ns, p.TopK)
			row := gq*p.HQ + hq              // output row
			prow := base + (gq-w0)*p.HQ + hq // partial row within a slot
			ls := wk.ls[:ns]
			for s := range ls {
				ls[s] = pt.LSE[s*plane+prow]
			}
			combineRow(pt, ls, wk.ws[:ns], plane, prow, p.D, ws.kvOut, wk, out.O[row*p.D:(row+1)*p.D], &out.LSE[row])
			if out.TLSE != nil {
				if p.InvT > 0 {
					for s := range ls {
						ls[s] = pt.TLSE[s*plane+prow]
					}
					out.TLSE[row] = mergeTLSE(ls, wk.ws[:ns], pt.vec)
				} else {
					out.TLSE[row] = out.LSE[row]
				}
			}
		}
	}
}

// combineTasks is the number of combine tasks of the current window.
func (ws *Workspace) combineTasks() int {
	return (ws.w1 - ws.w0 + combineChunk - 1) / combineChunk
}

// combineRow merges the slots of one output row: partial row s*plane+row of
// slot s, weights from ls. It writes the BF16 output and the merged LSE.
func combineRow(pt *Partials, ls, ws []float32, plane, row, d int, outScale float32, wk *worker, o []lowp.BFloat16, lse *float32) {
	l, ok := mergeLSE(ls, ws, pt.vec)
	acc := wk.accO[:d]
	if ok {
		pt.sumSlots(acc, ws, row, plane, wk.tmp)
	} else {
		clear(acc)
	}
	storeBF16(o, acc, outScale, pt.vec)
	*lse = l
}

// Release frees the workspace's partial buffers now instead of when the
// workspace becomes unreachable (large ones are mappings outside the Go
// heap, which the garbage collector does not count). The workspace stays
// usable: the next run allocates again. It must not be called during a
// run that uses the workspace.
func (ws *Workspace) Release() { ws.Partials.release() }

// Reserve sizes the float32 partial buffers for rows partial rows of head
// dimension d and the per-worker combine scratch for up to splits slots, so
// that later runs of at most that size do not allocate.
func (ws *Workspace) Reserve(d, rows, splits int) {
	ws.Partials.Ensure(PartialF32, d, rows, false)
	ws.splits = max(ws.splits, splits)
	for _, wk := range ws.workers {
		if wk != nil && cap(wk.ls) < splits {
			wk.ls = make([]float32, splits)
			wk.ws = make([]float32, splits)
		}
	}
}
