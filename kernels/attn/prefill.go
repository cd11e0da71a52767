package attn

import (
	"cmp"
	"math"
	"slices"
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
)

// maxTileRows is the number of (query, head) rows one Acc pass computes.
const maxTileRows = 128

// Prefill describes one sparse prefill call. Every index in it has been
// validated by the caller (package op); Run trusts them.
type Prefill struct {
	Q       Operand // [TotalQ, HQ, D] rows
	K, V    Operand // token rows addressed through KV
	KV      KVLayout
	TotalQ  int
	HQ, Hkv int
	D       int
	CuQ     []int32 // [B+1]
	SeqK    []int32 // [B] effective key length of each sequence
	BlkKV   int     // keys per block, <= tile.BlockN
	Causal  bool
	Scale   float32 // softmax_scale
	InvT    float32 // 1/T for temperature LSE partials; 0 = none
	PV      tile.Round
	TopK    int
	CSR     *plan.CSR
	Sched   *plan.FwdSchedule
	Partial PartialDtype
	// OutputScale multiplies O in the combine (the NVFP4 V global scale);
	// 1 when absent.
	OutputScale float32
}

// Output receives the combined results. O is [TotalQ, HQ, D] BF16, LSE and
// TLSE are [TotalQ, HQ]; TLSE may be nil.
type Output struct {
	O    []lowp.BFloat16
	LSE  []float32
	TLSE []float32
}

// worker holds one goroutine's scratch buffers.
type worker struct {
	d     int
	kbuf  []float32 // [BlockN][d]
	vbuf  []float32 // [BlockN][d]
	blk   *tile.Block
	acc   *tile.Acc
	valid []int32
	lse   []float32
	tlse  []float32
	inv   []float32 // per-row normalisation factors (Acc.FinishLSE)
	lanes *lanesAcc // decode accumulators (AVX-512), created on first use
	block *blockAcc // decode accumulator over acc/blk otherwise
	dst   []int32   // partial row of each Acc row (prefill) or output row (decode)
	ws    []float32
	ls    []float32
	tmp   []float32
	accO  []float32
}

func newWorker(d int) *worker {
	return &worker{
		d:    d,
		kbuf: make([]float32, tile.BlockN*d), vbuf: make([]float32, tile.BlockN*d),
		blk: tile.NewBlock(d), acc: tile.NewAcc(maxTileRows, d),
		valid: make([]int32, maxTileRows), lse: make([]float32, maxTileRows),
		tlse: make([]float32, maxTileRows), dst: make([]int32, maxTileRows), inv: make([]float32, maxTileRows),
		tmp: make([]float32, d), accO: make([]float32, d),
	}
}

// Workspace holds reusable buffers: per-worker scratch and the partials.
type Workspace struct {
	workers  []*worker
	Partials Partials
	order    []int32 // prefill items, largest first
	next     atomic.Int64
	// prefill / decode of the current call
	pf *Prefill
	pd *Decode
	po *Output
	// bound entry points, created once so Run does not allocate
	prefillItem, combineRows, decodeItem, decodeCombine func(int)
}

// NewWorkspace returns a workspace for n workers and head dimension d.
func NewWorkspace(n, d int) *Workspace {
	ws := &Workspace{}
	ws.ensure(n, d)
	ws.prefillItem = ws.runPrefillItems
	ws.combineRows = ws.runCombine
	ws.decodeItem = ws.runDecodeItems
	ws.decodeCombine = ws.runDecodeCombine
	return ws
}

func (ws *Workspace) ensure(n, d int) {
	if len(ws.workers) >= n && (n == 0 || ws.workers[0].d == d) {
		return
	}
	ws.workers = make([]*worker, n)
	for i := range ws.workers {
		ws.workers[i] = newWorker(d)
	}
}

// RunPrefill computes the per-slot partials of every scheduled work item,
// then combines them into out. pool supplies the goroutines.
func RunPrefill(p *Prefill, ws *Workspace, pool *Pool, out *Output) {
	ws.ensure(pool.Workers(), p.D)
	rows := p.TopK * p.TotalQ * p.HQ
	ws.Partials.Ensure(p.Partial, p.D, rows, p.InvT > 0)
	ws.Partials.simd = vecAVX512()
	p.Q.simd, p.K.simd, p.V.simd = ws.Partials.simd, ws.Partials.simd, ws.Partials.simd
	ws.pf, ws.po = p, out
	ws.orderItems(p.Sched)
	ws.next.Store(0)
	pool.Run(ws.prefillItem)
	ws.next.Store(0)
	pool.Run(ws.combineRows)
	ws.pf, ws.po = nil, nil
}

// runPrefillItems takes work items from the shared counter until none is left.
func (ws *Workspace) runPrefillItems(w int) {
	p := ws.pf
	wk := ws.workers[w]
	n := int64(p.Sched.WorkCount)
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		j := int64(ws.order[i])
		m := p.Sched.Metadata[j*6 : j*6+6]
		ws.prefillItemRun(wk, int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]))
	}
}

// prefillItemRun computes work item (h, row, qBegin, qCount, b, j): the
// block j of sequence b for KV head h against the queries of CSR row row
// in [qBegin, qBegin+qCount).
func (ws *Workspace) prefillItemRun(wk *worker, h, row, qBegin, qCount, b, j int) {
	p := ws.pf
	d := p.D
	seqK := int(p.SeqK[b])
	t0 := j * p.BlkKV
	n := min(p.BlkKV, seqK-t0)
	if n <= 0 {
		n = 0
	}
	loadKV(&p.K, &p.V, &p.KV, b, h, t0, n, wk.kbuf, wk.vbuf)
	wk.blk.Load(n, wk.kbuf[:n*d], wk.vbuf[:n*d])

	qpk := p.HQ / p.Hkv
	seqQ := int(p.CuQ[b+1] - p.CuQ[b])
	qBase := int(p.CuQ[b])
	scale := p.Scale * math.Log2E
	perTile := maxTileRows / qpk
	c := p.CSR
	base := h*c.Stride + int(c.RowPtr[h*(c.TotalRows+1)+row]) + qBegin
	for e0 := 0; e0 < qCount; e0 += perTile {
		cnt := min(perTile, qCount-e0)
		m := cnt * qpk
		wk.acc.Reset(m, scale, p.PV, p.InvT)
		for e := 0; e < cnt; e++ {
			idx := base + e0 + e
			q := int(c.QIdx[idx])
			slot := int(p.Sched.QSplit[idx] >> 24)
			gq := qBase + q
			v := int32(visible(q, seqQ, seqK, p.Causal, t0, n))
			// The query's qpk heads of KV head h are consecutive rows of Q
			// and of the accumulator: one decode call for all of them.
			p.Q.DecodeRows(wk.acc.QRows(e*qpk, qpk), gq*p.HQ+h*qpk, qpk)
			for g := 0; g < qpk; g++ {
				rr := e*qpk + g
				wk.valid[rr] = v
				wk.dst[rr] = int32((slot*p.TotalQ+gq)*p.HQ + h*qpk + g)
			}
		}
		if n > 0 {
			wk.acc.Update(wk.blk, wk.valid[:m])
		}
		wk.acc.FinishLSE(wk.lse[:m], wk.tlse[:m], wk.inv[:m])
		pt := &ws.Partials
		for r := 0; r < m; r++ {
			i := int(wk.dst[r])
			pt.store(i, wk.acc.O(r), wk.inv[r], wk.tmp)
			pt.LSE[i] = wk.lse[r]
			if p.InvT > 0 {
				pt.TLSE[i] = wk.tlse[r]
			}
		}
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

// runCombine merges the partial slots of every (query, head) (SPEC 5).
func (ws *Workspace) runCombine(w int) {
	p, out := ws.pf, ws.po
	wk := ws.workers[w]
	if cap(wk.ws) < p.TopK {
		wk.ws = make([]float32, p.TopK)
		wk.ls = make([]float32, p.TopK)
	}
	qpk := p.HQ / p.Hkv
	tasks := int64((p.TotalQ + combineChunk - 1) / combineChunk)
	pt := &ws.Partials
	plane := p.TotalQ * p.HQ
	for {
		t := ws.next.Add(1) - 1
		if t >= tasks {
			return
		}
		for gq := int(t) * combineChunk; gq < min(p.TotalQ, int(t+1)*combineChunk); gq++ {
			for hq := 0; hq < p.HQ; hq++ {
				ns := int(p.Sched.SplitCounts[gq*p.Hkv+hq/qpk])
				ns = min(ns, p.TopK)
				row := gq*p.HQ + hq
				ls := wk.ls[:ns]
				for s := range ls {
					ls[s] = pt.LSE[s*plane+row]
				}
				combineRow(pt, ls, wk.ws[:ns], plane, row, p.D, p.OutputScale, wk, out.O[row*p.D:(row+1)*p.D], &out.LSE[row])
				if out.TLSE != nil {
					if p.InvT > 0 {
						for s := range ls {
							ls[s] = pt.TLSE[s*plane+row]
						}
						l, ok := mergeLSE(ls, wk.ws[:ns])
						if !ok {
							l = float32(math.Inf(-1))
						}
						out.TLSE[row] = l
					} else {
						out.TLSE[row] = out.LSE[row]
					}
				}
			}
		}
	}
}

// combineRow merges the slots of one output row: partial row s*plane+row of
// slot s, weights from ls. It writes the BF16 output and the merged LSE.
func combineRow(pt *Partials, ls, ws []float32, plane, row, d int, outScale float32, wk *worker, o []lowp.BFloat16, lse *float32) {
	l, ok := mergeLSE(ls, ws)
	acc := wk.accO[:d]
	clear(acc)
	if ok {
		for s, w := range ws {
			if w != 0 {
				pt.axpy(acc, w, s*plane+row, wk.tmp)
			}
		}
	}
	storeBF16(o, acc, outScale, pt.simd)
	*lse = l
}

// Reserve sizes the float32 partial buffers for rows partial rows of head
// dimension d and the per-worker combine scratch for up to splits slots, so
// that later runs of at most that size do not allocate.
func (ws *Workspace) Reserve(d, rows, splits int) {
	ws.Partials.Ensure(PartialF32, d, rows, false)
	for _, wk := range ws.workers {
		if cap(wk.ls) < splits {
			wk.ls = make([]float32, splits)
			wk.ws = make([]float32, splits)
		}
	}
}

// orderItems sorts the valid work items by decreasing query count (longest
// processing time first), so that the last items to start are short and the
// workers finish together. Ties keep schedule order; the order changes no
// result (every item writes its own slots).
func (ws *Workspace) orderItems(s *plan.FwdSchedule) {
	n := int(s.WorkCount)
	ws.order = grow(ws.order, n)
	for i := range ws.order {
		ws.order[i] = int32(i)
	}
	slices.SortStableFunc(ws.order, func(a, b int32) int {
		return cmp.Compare(s.Metadata[int(b)*6+plan.MetaQCount], s.Metadata[int(a)*6+plan.MetaQCount])
	})
}
