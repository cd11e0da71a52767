package attn

import (
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/tile"
)

// The query-major prefill path.
//
// One task computes one query tile of one KV head: the qpk query heads of
// up to qmTileTokens consecutive tokens of one sequence (16 rows, one
// group of tile.Lanes lanes, at qpk <= 16). It walks the union of the
// blocks those tokens selected in ascending block order (keyWalk, the walk
// sparse decode runs), each row masked to its token's blocks and causal
// limit, keeps the online softmax across blocks and writes O and the LSEs
// once: no partials and no combine. Each task writes its own output rows,
// so the results do not depend on the worker count.
//
// The tokens' block lists come from the CSR: for a query window of W
// tokens, every CSR entry (query q, block j) of the window is scattered to
// slot QSplit's slot of q's row in a [Hkv][W][slots] table (the slot is
// the block's rank among the query's blocks, so each row lists its blocks
// ascending, -1 after the last). Windows end at tile ends. Beyond the
// workers' scratch the path needs that table (qmSelBytes bounds it), the
// K/V block cache where K/V are not read in place (qmcache.go,
// qmCacheBytes) and, under auto, the per-tile choices (qmchoice.go).

// qmSelBytes bounds the block table of one query window: 4 MiB.
const qmSelBytes = 4 << 20

// qmWindowOverride, when positive (tests only), replaces the window
// qmWindow computes.
var qmWindowOverride int

// qmFloat32Lanes, when true (tests and benchmarks only), keeps the active
// tier's float32 kernels on the query-major path where a call would ask
// for bf16 products (queryTile), to compare both.
var qmFloat32Lanes bool

// qmNoBF16Scores, when true (tests and benchmarks only), keeps the float32
// Q.K kernels where the query-major path would ask for VDPBF16PS scores
// on exact bf16 operands (runQueryItems), to compare both.
var qmNoBF16Scores bool

// qmTask is one query tile: tokens [gq, gq+n) of sequence b, KV head h.
type qmTask struct{ gq, n, b, h int32 }

// qmTileTokens returns the tokens of one query tile: as many as fill the
// 16 lanes of one tile.Lanes group (one token from qpk = 16 on).
func qmTileTokens(qpk int) int { return max(1, 16/qpk) }

// qmWindow returns the query window of the query-major path: the largest
// number of tokens whose block table (Hkv*W*slots int32, W rounded up to
// the end of a tile: W + tokens - 1 rows) and task list (at most Hkv*W
// tasks of 16 bytes) each fit qmSelBytes, at least one tile.
func qmWindow(p *Prefill, slots int) int {
	tok := qmTileTokens(p.HQ / p.Hkv)
	w := qmSelBytes/(4*p.Hkv*max(slots, 4)) - (tok - 1)
	if qmWindowOverride > 0 {
		w = qmWindowOverride
	}
	return max(min(w, p.TotalQ), tok, 1)
}

// tileEnd returns x moved up to the end of the query tile that holds
// token x (tiles are cut from each sequence's first token): x itself at a
// tile boundary, outside every sequence or at p.TotalQ.
func tileEnd(p *Prefill, x, tok int) int {
	b, _ := slices.BinarySearch(p.CuQ, int32(x)+1)
	b-- // the last sequence that starts at or before x
	if b < 0 || b >= len(p.CuQ)-1 || x >= int(p.CuQ[b+1]) {
		return x
	}
	off := x - int(p.CuQ[b])
	return min(int(p.CuQ[b+1]), int(p.CuQ[b])+(off+tok-1)/tok*tok)
}

// runQueryMajor runs the query-major tiles of p: every tile (auto false,
// PathQuery), or those the cost model gives the query-major path (auto,
// PathAuto), recording each tile's choice for the KV-major part
// (ws.kvRow). It returns whether some tile ran query-major and whether
// some tile was left to the KV-major path.
func (ws *Workspace) runQueryMajor(p *Prefill, pool *Pool, out *Output, auto bool) (anyQuery, anyKV bool) {
	slots := maxSlots(p)
	w := qmWindow(p, slots)
	tok := qmTileTokens(p.HQ / p.Hkv)
	ws.win, ws.slots = w+tok-1, slots
	ws.sel = grow(ws.sel, p.Hkv*ws.win*slots)
	ws.pf, ws.po = p, out
	ws.auto = auto
	if auto {
		ws.startChoices(p, tok)
	}
	c := &ws.cache
	c.start(p, p.Scale*math.Log2E)
	for w0 := 0; w0 < p.TotalQ; w0 = ws.w1 {
		// Windows end at tile ends, so that a tile's lists are whole.
		ws.w0, ws.w1 = w0, tileEnd(p, min(p.TotalQ, w0+w), tok)
		ws.scatterWindow(p)
		if auto {
			q, kv := ws.chooseWindow(p, tok)
			anyQuery, anyKV = anyQuery || q, anyKV || kv
			if !q {
				continue
			}
		} else {
			anyQuery = anyQuery || ws.w1 > ws.w0
		}
		if !c.use {
			ws.runQueryTiles(p, pool, 0, p.Hkv)
			continue
		}
		// KV heads in groups whose visited blocks fit the cache: convert
		// the group's blocks, then run its tiles.
		ws.markWindow(p)
		for h0 := 0; h0 < p.Hkv; h0 = c.h1 {
			c.group(p, h0)
			if n := len(c.todo); n > 0 {
				ws.next.Store(0)
				pool.RunN(n, ws.cacheItems)
			}
			ws.runQueryTiles(p, pool, c.h0, c.h1)
		}
		c.on = false
	}
	ws.pf, ws.po = nil, nil
	return anyQuery, anyKV
}

// runQueryTiles runs the window's query tiles of KV heads [h0, h1).
func (ws *Workspace) runQueryTiles(p *Prefill, pool *Pool, h0, h1 int) {
	if n := ws.queryTasks(p, h0, h1); n > 0 {
		ws.next.Store(0)
		pool.RunN(n, ws.queryItems)
	}
}

// scatterWindow fills the block table of the window [ws.w0, ws.w1) from
// the schedule's work items, which cover every CSR entry once.
func (ws *Workspace) scatterWindow(p *Prefill) {
	s := p.Sched
	sel := ws.sel[:p.Hkv*ws.win*ws.slots]
	for i := range sel {
		sel[i] = -1
	}
	for i := 0; i < int(s.WorkCount); i++ {
		base, lo, hi := ws.itemWindow(p, i)
		m := s.Metadata[i*6 : i*6+6]
		h, b, j := int(m[0]), int(m[4]), m[5]
		for e := lo; e < hi; e++ {
			x := p.Sched.QSplit[base+e]
			gq := int(p.CuQ[b]+(x&(1<<24-1))) - ws.w0
			sel[(h*ws.win+gq)*ws.slots+int(x>>24)] = j
		}
	}
}

// queryTasks lists the query tiles of the window [ws.w0, ws.w1) and KV
// heads [h0, h1) that run query-major: each sequence's tokens in the
// window cut into tiles from the sequence's first (the window starts at a
// tile boundary), for every KV head. The last tiles are listed first:
// under a causal mask they see the most keys, and starting with them lets
// the workers finish together.
func (ws *Workspace) queryTasks(p *Prefill, h0, h1 int) int {
	tok := qmTileTokens(p.HQ / p.Hkv)
	ws.qtasks = ws.qtasks[:0]
	for b := len(p.CuQ) - 2; b >= 0; b-- {
		lo, hi := max(ws.w0, int(p.CuQ[b])), min(ws.w1, int(p.CuQ[b+1]))
		if lo >= hi {
			continue
		}
		for t := lo + (hi-lo-1)/tok*tok; t >= lo; t -= tok {
			for h := h0; h < h1; h++ {
				if ws.auto && ws.tileKV[ws.tileIndex(h, b, t-int(p.CuQ[b]))] {
					continue
				}
				ws.qtasks = append(ws.qtasks, qmTask{int32(t), int32(min(tok, hi-t)), int32(b), int32(h)})
			}
		}
	}
	return len(ws.qtasks)
}

// runQueryItems takes the window's tiles from the shared counter until
// none is left.
func (ws *Workspace) runQueryItems(w int) {
	wk := ws.worker(w).buffers()
	// The accumulator before any tile, as runDecodeItems: later runs
	// allocate nothing whichever worker takes what.
	qpk := ws.pf.HQ / ws.pf.Hkv
	acc := wk.reserveAcc(tile.LanesSIMD(ws.pf.D), qmTileTokens(qpk)*qpk)
	// The tiles take the call's precision (keyWalk.BF16: the bf16 twin's
	// lane kernels for a call with bf16 products, as the KV-major path's
	// block kernel); decode, which shares the worker's accumulators, asks
	// for the active tier's again.
	// On the avx512 tier without a bf16 twin (MSA_CPU_TIER=avx512) Q.K runs
	// on VDPBF16PS where the CPU has it and Q and K are bf16 values
	// already (bf16ScoresCall, tile.Lanes.SetBF16Scores: the same exact
	// products, summed in float32 in another order, at twice the float32
	// kernels' rate); lane groups that run bf16 products ignore it.
	if la, ok := acc.(*lanesAcc); ok && bf16ScoresCall(ws.pf) {
		la.bf16Scores(true)
		defer la.bf16Scores(false)
	}
	n := int64(len(ws.qtasks))
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		ws.queryTile(wk, ws.qtasks[i])
	}
}

// bf16Scores asks every lane group for VDPBF16PS scores on exact bf16
// operands from its next Reset on (on), or for the float32 ones again.
func (a *lanesAcc) bf16Scores(on bool) {
	a.scores = on
	for _, g := range a.g {
		if g != nil {
			g.SetBF16Scores(on)
		}
	}
}

// bf16Products asks every lane group for the bf16 twin's products from
// its next Reset on (on), or for the active tier's lane kernels again.
func (a *lanesAcc) bf16Products(on bool) {
	a.products = on
	for _, g := range a.g {
		if g != nil {
			g.SetBF16Products(on)
		}
	}
}

// queryTile computes one query tile and writes its O, LSE and TLSE rows.
func (ws *Workspace) queryTile(wk *worker, t qmTask) {
	p, out := ws.pf, ws.po
	b, h, gq, n := int(t.b), int(t.h), int(t.gq), int(t.n)
	qpk := p.HQ / p.Hkv
	seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(p.SeqK[b])
	lim := wk.lim[:n]
	for i := range lim {
		l := seqK
		if p.Causal {
			// Bottom-right aligned, as visible: t <= q + seqK - seqQ.
			l = min(l, gq+i-int(p.CuQ[b])+seqK-seqQ+1)
		}
		lim[i] = int32(max(l, 0))
	}
	kw := keyWalk{
		K: &p.K, V: &p.V, KV: &p.KV, B: b, H: h, KBegin: 0, KEnd: seqK,
		Tokens: n, QPK: qpk, Q: &p.Q, QRow: gq*p.HQ + h*qpk, QStep: p.HQ,
		Lim: lim, Sel: ws.sel[(h*ws.win+gq-ws.w0)*ws.slots:], SelStride: ws.slots, TopK: ws.slots,
		BlkKV: p.BlkKV, Scale: p.Scale * math.Log2E, Round: p.PV, InvT: p.InvT, Staged: !ws.noStage,
		BF16: ws.bf16 && !qmFloat32Lanes,
	}
	vf := float32(1)
	if c := &ws.cache; c.on {
		// Head h's blocks, converted once for the window (qmcache.go).
		c.layout(&wk.qmKV, h, len(p.CuQ)-1, p.BlkKV)
		kw.K, kw.V, kw.KV, kw.H = &c.k, &c.v, &wk.qmKV, 0
		kw.Scale *= c.kFactor
		vf = c.vFactor
	}
	ra, f := wk.walk(&kw)
	f *= p.OutputScale * vf
	for r := 0; r < n*qpk; r++ {
		row := (gq+r/qpk)*p.HQ + h*qpk + r%qpk
		encodeRow(out, row, p.D, ra.o(r), wk.inv[r]*f, wk.lse[r], ws.Partials.vec)
		if out.TLSE != nil {
			if p.InvT > 0 {
				out.TLSE[row] = wk.tlse[r]
			} else {
				out.TLSE[row] = wk.lse[r]
			}
		}
	}
}
