package attn

import (
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
)

// Decode describes one paged decode call: q row b*SeqlenQ+i of request b is
// at key position SeqUsed[b] - SeqlenQ + i and sees keys t <= that position.
type Decode struct {
	Q       Operand              // [Batch*SeqlenQ, HQ, D] rows
	K, V    Operand              // paged token rows addressed through KV
	KV      KVLayout             // where K/V token rows live (paged for decode)
	Batch   int                  // number of requests
	SeqlenQ int                  // query tokens per request
	HQ, Hkv int                  // query heads and KV heads (HQ % Hkv == 0)
	D       int                  // head dimension
	SeqUsed []int32              // [Batch] keys in use per request (seqused_k)
	Scale   float32              // softmax_scale applied to Q.K
	PV      tile.Round           // rounding of P before P.V (the contract's pv dtype)
	Sched   *plan.DecodeSchedule // the split-KV schedule planned for this step
	// Sparse decode: Q2K [Hkv][Batch*SeqlenQ][TopK] block ids of BlkKV
	// tokens (-1 unused). Nil selects dense decode.
	Q2K   []int32
	TopK  int // entries per query in Q2K
	BlkKV int // tokens per sparse block
}

// RunDecode computes decode attention into out (TLSE unused). With a split
// schedule it writes float32 partials to ws.Partials and combines them.
// The partials are laid out by this step's split counts (DecodePartialRows),
// not by the schedule's o_indptr, so that a fixed-capacity schedule, whose
// o_indptr reserves room for the longest sequence the page table allows,
// costs only what this step uses.
func RunDecode(p *Decode, ws *Workspace, pool *Pool, out *Output) {
	ws.ensure(pool.Workers(), p.D)
	if p.Sched.SplitKV {
		ws.decOff = decodeOffsets(ws.decOff, p.Sched)
		ws.Partials.Ensure(PartialF32, p.D, int(ws.decOff[p.Batch])*p.HQ, false)
	}
	ws.Partials.vec = vecLevel()
	p.Q.vec, p.K.vec, p.V.vec = ws.Partials.vec, ws.Partials.vec, ws.Partials.vec
	ws.pd, ws.po = p, out
	ws.next.Store(0)
	pool.RunN(p.Sched.WorkCount, ws.decodeItem)
	if p.Sched.SplitKV {
		ws.next.Store(0)
		pool.RunN(p.Batch*p.SeqlenQ, ws.decodeCombine)
	}
	ws.pd, ws.po = nil, nil
}

// DecodePartialRows returns the partial rows RunDecode uses for schedule s
// (0 without split-KV): sum_b SplitCounts[b]*QStride. The float32 partials
// take 4*(D+1)*HQ bytes per row; Workspace.Reserve(d, rows*HQ, s.MaxSplits)
// with this rows makes later runs of s allocation-free.
func DecodePartialRows(s *plan.DecodeSchedule) int {
	if !s.SplitKV {
		return 0
	}
	n := 0
	for _, c := range s.SplitCounts {
		n += int(c) * s.QStride
	}
	return n
}

// decodeOffsets returns off[b] = sum over b' < b of SplitCounts[b']*QStride
// (B+1 entries) in dst's storage: the first partial row of request b.
func decodeOffsets(dst []int32, s *plan.DecodeSchedule) []int32 {
	dst = grow(dst, len(s.SplitCounts)+1)
	dst[0] = 0
	for b, c := range s.SplitCounts {
		dst[b+1] = dst[b] + c*int32(s.QStride)
	}
	return dst
}

// partialRow is the partial row of (request b, split c, query i).
func (ws *Workspace) partialRow(b, c, i int) int {
	return int(ws.decOff[b]) + c*ws.pd.Sched.QStride + i
}

func (ws *Workspace) runDecodeItems(w int) {
	p := ws.pd
	s := p.Sched
	wk := ws.worker(w).compute()
	// The accumulator too, before any item: a worker started for this run
	// gets its scratch now even when the others take every item, so that
	// the next runs allocate nothing whichever worker takes what.
	wk.decodeAcc(tile.LanesSIMD(p.D))
	n := int64(s.WorkCount)
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		if s.Valid[i] == 0 {
			continue
		}
		ws.decodeItemRun(wk, int(i))
	}
}

// decodeItemRun computes item i: one request, query tile, KV chunk and KV
// head.
func (ws *Workspace) decodeItemRun(wk *worker, i int) {
	p := ws.pd
	s := p.Sched
	b := int(s.Request[i])
	used := int(p.SeqUsed[b])
	ps := p.KV.PageSize
	pb, pe := s.ItemPages(i, int32(used))
	kBegin, kEnd := pb*ps, min(used, pe*ps)
	q0, q1 := s.ItemQueries(i)
	qpk := p.HQ / p.Hkv
	perTile := maxTileRows / qpk
	for a := q0; a < q1; a += perTile {
		ws.decodeTile(wk, b, int(s.KVHead[i]), a, min(q1, a+perTile), int(s.KVTile[i]), kBegin, kEnd, used)
	}
}

// decodeTile runs queries [a, z) of request b on KV head h over keys
// [kBegin, kEnd).
func (ws *Workspace) decodeTile(wk *worker, b, h, a, z, c, kBegin, kEnd, used int) {
	p := ws.pd
	d := p.D
	qpk := p.HQ / p.Hkv
	m := (z - a) * qpk
	totalQ := p.Batch * p.SeqlenQ
	ra := wk.decodeAcc(tile.LanesSIMD(d))
	bounded := vBounded(&p.V)
	staged := !ws.noStage
	// AVX2 stages e4m3fn K and V folded (e4m3Fold) for the lane
	// accumulator, and its lane kernels read the chunks offered raw the
	// same way (tile.RawE4M3Div256): the factor goes back into the score
	// scale (unless that would overflow it) and into the output's
	// normalising factor.
	scale := p.Scale * math.Log2E
	_, lanes := ra.(*lanesAcc)
	foldK := lanes && staged && p.K.foldsE4M3() && !math.IsInf(float64(scale*e4m3Fold), 0)
	foldV := lanes && staged && p.V.foldsE4M3()
	if foldK {
		scale *= e4m3Fold
	}
	oFold := float32(1)
	if foldV {
		oFold = e4m3Fold
	}
	ra.reset(m, scale, p.PV)
	vs := &wk.vs // the V overflow guard of this tile's accumulation
	*vs = vScale{}
	for i := a; i < z; i++ {
		gq := b*p.SeqlenQ + i
		for g := 0; g < qpk; g++ {
			p.Q.DecodeRow(wk.tmp, gq*p.HQ+h*qpk+g)
			ra.setQ((i-a)*qpk+g, wk.tmp[:d])
		}
	}
	// K and V are decoded inside the update (the accumulators'
	// updateStaged: tile.Lanes.UpdateStaged asks for a few rows at a time,
	// so the float32 rows stay in cache; the block accumulator takes whole
	// blocks), V's overflow guard scanning each decoded chunk unless V is
	// bounded (kvStager). noStage (tests) decodes whole blocks first and
	// guards them with vScale.block.
	// limit(i): keys t < used - SeqlenQ + i + 1 are visible to query i.
	// next is the first token of the span after this one (-1: none), whose
	// K/V the update prefetches.
	span := func(t0, t1 int, sel func(i int) bool, next int) {
		n := t1 - t0
		if !staged {
			loadKV(&p.K, &p.V, &p.KV, b, h, t0, n, wk.kbuf, wk.vbuf)
		}
		any := false
		for i := a; i < z; i++ {
			v := int32(0)
			if sel == nil || sel(i) {
				lim := used - p.SeqlenQ + i + 1
				v = int32(max(0, min(n, lim-t0)))
			}
			for g := 0; g < qpk; g++ {
				wk.valid[(i-a)*qpk+g] = v
			}
			any = any || v > 0
		}
		switch {
		case !any:
		case staged:
			if next >= 0 {
				prefetchNext(ra, &p.K, &p.V, &p.KV, b, h, next, min(tile.BlockN, kEnd-next), foldK)
			}
			wk.stage = kvStager{k: &p.K, v: &p.V, l: &p.KV, b: b, h: h, t0: t0, kbuf: wk.kbuf, vbuf: wk.vbuf, vs: vs, acc: ra, scan: !bounded, foldK: foldK, foldV: foldV}
			ra.updateStaged(&wk.stage, n, wk.valid[:m])
		default:
			vs.block(wk.vbuf[:n*d], ra, &p.V)
			ra.update(wk.kbuf[:n*d], wk.vbuf[:n*d], n, wk.valid[:m])
		}
	}
	if p.Q2K == nil {
		for t := kBegin; t < kEnd; t += tile.BlockN {
			next := t + tile.BlockN
			if next >= kEnd {
				next = -1
			}
			span(t, min(kEnd, t+tile.BlockN), nil, next)
		}
	} else {
		// Union of the blocks the tile's queries selected, ascending.
		blocks := wk.dst[:0]
		for i := a; i < z; i++ {
			sel := p.Q2K[(h*totalQ+b*p.SeqlenQ+i)*p.TopK:][:p.TopK]
			for _, j := range sel {
				if j >= 0 && !slices.Contains(blocks, j) {
					blocks = append(blocks, j)
				}
			}
		}
		slices.Sort(blocks)
		for x, j := range blocks {
			lo := max(kBegin, int(j)*p.BlkKV)
			hi := min(kEnd, (int(j)+1)*p.BlkKV)
			selects := func(i int) bool {
				return slices.Contains(p.Q2K[(h*totalQ+b*p.SeqlenQ+i)*p.TopK:][:p.TopK], j)
			}
			for t := lo; t < hi; t += tile.BlockN {
				next := t + tile.BlockN
				if next >= hi {
					next = -1
					if x+1 < len(blocks) {
						if nl := max(kBegin, int(blocks[x+1])*p.BlkKV); nl < kEnd {
							next = nl
						}
					}
				}
				span(t, min(hi, t+tile.BlockN), selects, next)
			}
		}
		wk.dst = blocks[:0]
	}
	ra.finishLSE(wk.lse[:m], wk.inv[:m])
	vf := vs.factor()
	s := p.Sched
	for i := a; i < z; i++ {
		for g := 0; g < qpk; g++ {
			r := (i-a)*qpk + g
			hq := h*qpk + g
			if s.SplitKV {
				pr := ws.partialRow(b, c, i)*p.HQ + hq
				ws.Partials.store(pr, ra.o(r), wk.inv[r]*vf*oFold, wk.tmp)
				ws.Partials.LSE[pr] = wk.lse[r]
			} else {
				row := (b*p.SeqlenQ+i)*p.HQ + hq
				encodeRow(ws.po, row, d, ra.o(r), wk.inv[r]*vf*oFold, wk.lse[r], ws.Partials.vec)
			}
		}
	}
}

// runDecodeCombine merges the KV splits of every (request, query, head).
func (ws *Workspace) runDecodeCombine(w int) {
	p, out := ws.pd, ws.po
	s := p.Sched
	wk := ws.worker(w)
	tasks := int64(p.Batch * p.SeqlenQ)
	for {
		t := ws.next.Add(1) - 1
		if t >= tasks {
			return
		}
		b, i := int(t)/p.SeqlenQ, int(t)%p.SeqlenQ
		ns := int(s.SplitCounts[b])
		if cap(wk.ls) < ns {
			wk.ls = make([]float32, ns)
			wk.ws = make([]float32, ns)
		}
		for hq := 0; hq < p.HQ; hq++ {
			ls := wk.ls[:ns]
			for c := range ls {
				ls[c] = ws.Partials.LSE[ws.partialRow(b, c, i)*p.HQ+hq]
			}
			l, ok := mergeLSE(ls, wk.ws[:ns], ws.Partials.vec)
			acc := wk.accO[:p.D]
			if ok {
				// Split c's row is QStride*HQ rows after split c-1's.
				ws.Partials.sumSlots(acc, wk.ws[:ns], ws.partialRow(b, 0, i)*p.HQ+hq, p.Sched.QStride*p.HQ, wk.tmp)
			} else {
				clear(acc)
			}
			encodeRow(out, (b*p.SeqlenQ+i)*p.HQ+hq, p.D, acc, 1, l, ws.Partials.vec)
		}
	}
}

func encodeRow(out *Output, row, d int, o []float32, scale, lse float32, lv vec) {
	storeBF16(out.O[row*d:(row+1)*d], o, scale, lv)
	if out.LSE != nil {
		out.LSE[row] = lse
	}
}

// decodeAcc returns the accumulator decode tiles use: tile.Lanes when it
// has SIMD kernels for this tier and d (tile.LanesSIMD: no K transpose per
// block for a handful of rows), the block kernel otherwise (it beats the
// portable lanes code).
func (wk *worker) decodeAcc(lanes bool) rowAcc {
	if lanes {
		if wk.lanes == nil {
			wk.lanes = newLanesAcc(wk.d)
		}
		return wk.lanes
	}
	if wk.block == nil {
		wk.block = &blockAcc{acc: wk.acc, blk: wk.blk}
	}
	return wk.block
}
