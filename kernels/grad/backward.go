package grad

import (
	"cmp"
	"slices"
)

// Backward computes dQ, dK and dV from the forward's inputs q, k, v, its
// outputs o and lse (natural log, as Forward returns them) and the
// gradients dO ([TotalQ][HQ][D]) and dLSE ([TotalQ][HQ], nil when the LSE
// output is unused). dQ has the shape of q, dK and dV the shape of k and v
// (dense rows or the page pool); all three are overwritten: elements no
// visible key or query reaches (unselected blocks, tokens past seqlen_k,
// unused pages, query rows outside every sequence) are set to 0.
//
// It runs the two passes of the package doc; the result is bit-identical
// across runs and worker counts. Backward returns an error, and writes
// nothing, when p or a tensor length is inconsistent.
func (ws *Workspace) Backward(p *Problem, q, k, v, o, lse, dO, dLSE, dQ, dK, dV []float32) error {
	if err := ws.prep.Prepare(p); err != nil {
		return err
	}
	return ws.BackwardPrepared(&ws.prep, q, k, v, o, lse, dO, dLSE, dQ, dK, dV)
}

// BackwardPrepared is Backward on a prepared problem (see Prepared),
// without the per-call set-up: a training step prepares its problem once
// for the forward and the backward.
func (ws *Workspace) BackwardPrepared(pp *Prepared, q, k, v, o, lse, dO, dLSE, dQ, dK, dV []float32) error {
	p, dv, err := pp.run()
	if err != nil {
		return err
	}
	if err := p.checkTensors(
		tensorArg{name: "q", x: q, kind: kindQ}, tensorArg{name: "k", x: k, kind: kindKV},
		tensorArg{name: "v", x: v, kind: kindKV}, tensorArg{name: "o", x: o, kind: kindQ},
		tensorArg{name: "lse", x: lse, kind: kindRow}, tensorArg{name: "dO", x: dO, kind: kindQ},
		tensorArg{name: "dLSE", x: dLSE, kind: kindRow, optional: true},
		tensorArg{name: "dQ", x: dQ, kind: kindQ}, tensorArg{name: "dK", x: dK, kind: kindKV},
		tensorArg{name: "dV", x: dV, kind: kindKV}); err != nil {
		return err
	}
	ws.ensure(dv.qpk, p.BlkKV, p.D)
	ws.bw = backwardCall{ws: ws, pp: pp, p: p, dv: dv, q: q, k: k, v: v, o: o, lse: lse, dO: dO, dLSE: dLSE, dQ: dQ, dK: dK, dV: dV}
	defer func() { ws.bw = backwardCall{} }() // keep no reference to the caller's tensors
	bw := &ws.bw

	// Delta - dLSE per (query, head): rowsum(dO * O) in float64.
	nRows := p.TotalQ * p.HQ
	ws.delta = growF32(ws.delta, nRows)
	bw.dlt = ws.delta
	bw.phase = phaseDelta
	ws.parallel((nRows+deltaChunk-1)/deltaChunk, bw)

	// dK/dV: one item per (KV head, CSR row), largest rows first.
	tr := p.CSR.TotalRows
	ws.items = growI32(ws.items, p.Hkv*tr)
	for i := range ws.items {
		ws.items[i] = int32(i)
	}
	rowLen := func(it int32) int32 {
		h, r := int(it)/max(tr, 1), int(it)%max(tr, 1)
		rp := p.CSR.RowPtr[h*(tr+1):]
		return rp[r+1] - rp[r]
	}
	slices.SortStableFunc(ws.items, func(a, b int32) int { return cmp.Compare(rowLen(b), rowLen(a)) })
	bw.kt, bw.vt, bw.tsz = ws.transposeBlocks(p, dv, k, v)
	if p.Paged {
		n := tr * p.Hkv * p.BlkKV * p.D
		ws.stageK, ws.stageV = growF32(ws.stageK, n), growF32(ws.stageV, n)
		bw.outK, bw.outV = ws.stageK, ws.stageV
	} else {
		clear(dK)
		clear(dV)
		bw.outK, bw.outV = dK, dV
	}
	bw.phase = phaseBlocks
	ws.parallel(len(ws.items), bw)
	if p.Paged {
		ws.buildPageRefs(p, dv)
		bw.phase = phaseScatter
		ws.parallel(p.NumPages, bw)
	}

	// dQ: one item per chunk of queries.
	bw.phase = phaseQueries
	ws.parallel((p.TotalQ+queryChunk-1)/queryChunk, bw)
	return nil
}

// deltaChunk is the number of (query, head) rows of one Delta work item.
const deltaChunk = 256

// The phases of a backward run, in order (backwardCall.item).
const (
	phaseDelta   = iota // Delta - dLSE of deltaChunk rows
	phaseBlocks         // dK/dV of one (KV head, CSR row)
	phaseScatter        // paged: one page of dK/dV from the staged blocks
	phaseQueries        // dQ of queryChunk query rows
)

// item runs work item i of the current phase.
func (bw *backwardCall) item(wk *worker, i int) {
	p := bw.p
	switch bw.phase {
	case phaseDelta:
		bw.deltaItem(i)
	case phaseBlocks:
		tr := p.CSR.TotalRows
		it := int(bw.ws.items[i])
		bw.blockItem(wk, it/tr, it%tr)
	case phaseScatter:
		bw.ws.scatterPage(p, bw.dv, bw.dK, bw.dV, i)
	default:
		for gq := i * queryChunk; gq < min(p.TotalQ, (i+1)*queryChunk); gq++ {
			for h := 0; h < p.Hkv; h++ {
				bw.queryItem(wk, gq, h)
			}
		}
	}
}

// deltaItem computes Delta - dLSE = rowsum(dO * O) - dLSE, in float64, of
// (query, head) rows c*deltaChunk onwards.
func (bw *backwardCall) deltaItem(c int) {
	d := bw.p.D
	for r := c * deltaChunk; r < min(len(bw.dlt), (c+1)*deltaChunk); r++ {
		var s float64
		for i, x := range bw.dO[r*d : (r+1)*d] {
			s += float64(x) * float64(bw.o[r*d+i])
		}
		if bw.dLSE != nil {
			s -= float64(bw.dLSE[r])
		}
		bw.dlt[r] = float32(s)
	}
}

// backwardCall holds the arguments of one Backward call.
type backwardCall struct {
	ws                     *Workspace
	phase                  int // the work items parallel runs (phaseDelta, ...)
	o, dLSE                []float32
	pp                     *Prepared
	p                      *Problem
	dv                     *derived
	q, k, v, lse, dO, dlt  []float32
	dQ, dK, dV, outK, outV []float32
	kt, vt                 []float32 // SIMD tiers: transposed blocks (Workspace.kt)
	tsz                    int       // elements per transposed block
}

// blockTs returns the transposed K and V blocks of KV head h, CSR row r
// (nil, nil on the generic tier).
func (bw *backwardCall) blockTs(h, r int) (kt, vt []float32) {
	return blockTOf(bw.kt, bw.tsz, bw.p, h, r), blockTOf(bw.vt, bw.tsz, bw.p, h, r)
}

// rowSetup fills lse, dlt and cnt of tile row t for (query, head) row
// qrow seeing n keys; rows with a non-finite LSE see nothing.
func (bw *backwardCall) rowSetup(wk *worker, t, qrow, n int) {
	l := bw.lse[qrow]
	wk.lse[t], wk.dlt[t] = l, bw.dlt[qrow]
	if !finite(l) {
		n = 0
	}
	wk.cnt[t] = int32(n)
}

// blockItem accumulates dK and dV of CSR row r (one KV block) for KV head h
// over every (query, query head) that selected it, and stores them: into
// dK/dV rows (dense) or the staging buffers (paged).
func (bw *backwardCall) blockItem(wk *worker, h, r int) {
	p, dv := bw.p, bw.dv
	d, qpk := p.D, dv.qpk
	b := int(dv.rows.Batch[r])
	t0 := int(dv.rows.Block[r]) * p.BlkKV
	n := max(0, min(p.BlkKV, int(dv.seqK[b])-t0))
	dk, dvb := wk.dk[:n*d], wk.dv[:n*d]
	clear(dk)
	clear(dvb)
	c := p.CSR
	rp := c.RowPtr[h*(c.TotalRows+1)+r:]
	qs := c.QIdx[h*c.Stride+int(rp[0]) : h*c.Stride+int(rp[1])]
	if n > 0 && len(qs) > 0 {
		kb := bw.dv.blockKV(bw.k, d, b, h, t0, n, wk.kb)
		vb := bw.dv.blockKV(bw.v, d, b, h, t0, n, wk.vb)
		kt, vt := bw.blockTs(h, r)
		seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(dv.seqK[b])
		scale := float32(p.Scale)
		capRows := rowsPerTile(qpk)
		m := 0
		flush := func() {
			if m == 0 {
				return
			}
			wk.gradProbs(wk.tq, wk.tdo, m, kb, vb, kt, vt, n, wk.lse, wk.dlt, wk.cnt, scale)
			if wk.simd {
				// dV += P^T dO, dK += dS^T Q over the keys any row sees.
				nk := maxCount(wk.cnt, m)
				wk.gemmCol(dvb, d, wk.s, wk.ld, wk.tdo, d, nk, d, m, true)
				wk.gemmCol(dk, d, wk.dp, wk.ld, wk.tq, d, nk, d, m, true)
			} else {
				accTN(dvb, n, wk.s, wk.ld, wk.tdo, m, d)
				accTN(dk, n, wk.dp, wk.ld, wk.tq, m, d)
			}
			m = 0
		}
		for _, i := range qs {
			vis := visible(int(i), seqQ, seqK, p.Causal, t0, n)
			if vis == 0 {
				continue
			}
			row0 := (int(p.CuQ[b])+int(i))*p.HQ + h*qpk
			copy(wk.tq[m*d:(m+qpk)*d], bw.q[row0*d:(row0+qpk)*d])
			copy(wk.tdo[m*d:(m+qpk)*d], bw.dO[row0*d:(row0+qpk)*d])
			for g := 0; g < qpk; g++ {
				bw.rowSetup(wk, m+g, row0+g, vis)
			}
			m += qpk
			if m == capRows {
				flush()
			}
		}
		flush()
	}
	if p.Paged {
		off := (r*p.Hkv + h) * p.BlkKV * d
		copy(bw.outK[off:off+n*d], dk)
		copy(bw.outV[off:off+n*d], dvb)
		return
	}
	for i := 0; i < n; {
		row, cnt := dv.kv.Run(b, h, t0+i, n-i)
		copy(bw.outK[row*d:(row+cnt)*d], dk[i*d:(i+cnt)*d])
		copy(bw.outV[row*d:(row+cnt)*d], dvb[i*d:(i+cnt)*d])
		i += cnt
	}
}

// queryItem computes dQ of global query row gq for the query heads of KV
// head h over the query's selected blocks, in ascending block order.
func (bw *backwardCall) queryItem(wk *worker, gq, h int) {
	p, dv := bw.p, bw.dv
	d, qpk := p.D, dv.qpk
	row0 := gq*p.HQ + h*qpk
	acc := wk.acc[:qpk*d]
	clear(acc)
	if b := int(dv.qBatch[gq]); b >= 0 {
		qr := bw.q[row0*d : (row0+qpk)*d]
		dor := bw.dO[row0*d : (row0+qpk)*d]
		seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(dv.seqK[b])
		i := gq - int(p.CuQ[b])
		scale := float32(p.Scale)
		for _, r := range bw.pp.queryBlocks(h, gq) {
			t0 := int(dv.rows.Block[r]) * p.BlkKV
			n := visible(i, seqQ, seqK, p.Causal, t0, p.BlkKV)
			if n == 0 {
				continue
			}
			for g := 0; g < qpk; g++ {
				bw.rowSetup(wk, g, row0+g, n)
			}
			kb := dv.blockKV(bw.k, d, b, h, t0, n, wk.kb)
			vb := dv.blockKV(bw.v, d, b, h, t0, n, wk.vb)
			kt, vt := bw.blockTs(h, int(r))
			wk.gradProbs(qr, dor, qpk, kb, vb, kt, vt, n, wk.lse, wk.dlt, wk.cnt, scale)
			if wk.simd {
				wk.gemmRow(acc, d, wk.dp, wk.ld, kb, d, qpk, d, maxCount(wk.cnt, qpk), true) // dQ += dS K
			} else {
				accNN(acc, qpk, wk.dp, wk.ld, kb, d, wk.cnt)
			}
		}
	}
	copy(bw.dQ[row0*d:(row0+qpk)*d], acc)
}
