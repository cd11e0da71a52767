package attn

import (
	"math"

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
	wk := ws.worker(w).buffers()
	// The accumulator too, before any item: a worker started for this run
	// gets its scratch now even when the others take every item, so that
	// the next runs allocate nothing whichever worker takes what.
	qpk := p.HQ / p.Hkv
	wk.reserveAcc(tile.LanesSIMD(p.D), qpk*min(p.SeqlenQ, decodeTileQueries(qpk)))
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
	perTile := decodeTileQueries(qpk)
	for a := q0; a < q1; a += perTile {
		ws.decodeTile(wk, b, int(s.KVHead[i]), a, min(q1, a+perTile), int(s.KVTile[i]), kBegin, kEnd, used)
	}
}

// decodeTileQueries is the most query tokens a decode tile holds: as many
// as fill its maxTileRows rows at qpk rows each.
func decodeTileQueries(qpk int) int { return maxTileRows / qpk }

// decodeTile runs queries [a, z) of request b on KV head h over keys
// [kBegin, kEnd).
func (ws *Workspace) decodeTile(wk *worker, b, h, a, z, c, kBegin, kEnd, used int) {
	p := ws.pd
	d := p.D
	qpk := p.HQ / p.Hkv
	totalQ := p.Batch * p.SeqlenQ
	// Query i sees keys t < used - SeqlenQ + i + 1.
	lim := wk.lim[:z-a]
	for i := range lim {
		lim[i] = int32(used - p.SeqlenQ + a + i + 1)
	}
	w := keyWalk{
		K: &p.K, V: &p.V, KV: &p.KV, B: b, H: h, KBegin: kBegin, KEnd: kEnd,
		Tokens: z - a, QPK: qpk, Q: &p.Q, QRow: (b*p.SeqlenQ+a)*p.HQ + h*qpk, QStep: p.HQ,
		Lim: lim, TopK: p.TopK, SelStride: p.TopK, BlkKV: p.BlkKV,
		Scale: p.Scale * math.Log2E, Round: p.PV, Staged: !ws.noStage,
	}
	if p.Q2K != nil {
		w.Sel = p.Q2K[(h*totalQ+b*p.SeqlenQ+a)*p.TopK:]
	}
	ra, f := wk.walk(&w)
	s := p.Sched
	for i := a; i < z; i++ {
		for g := 0; g < qpk; g++ {
			r := (i-a)*qpk + g
			hq := h*qpk + g
			if s.SplitKV {
				pr := ws.partialRow(b, c, i)*p.HQ + hq
				ws.Partials.store(pr, ra.o(r), wk.inv[r]*f, wk.tmp)
				ws.Partials.LSE[pr] = wk.lse[r]
			} else {
				row := (b*p.SeqlenQ+i)*p.HQ + hq
				encodeRow(ws.po, row, d, ra.o(r), wk.inv[r]*f, wk.lse[r], ws.Partials.vec)
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
		wk.blockKernel()
		wk.block = &blockAcc{acc: wk.acc, blk: wk.blk}
	}
	return wk.block
}

// reserveAcc returns decodeAcc(lanes) with room for tiles of up to rows
// rows, so that the tiles that follow allocate nothing.
func (wk *worker) reserveAcc(lanes bool, rows int) rowAcc {
	ra := wk.decodeAcc(lanes)
	if la, ok := ra.(*lanesAcc); ok {
		la.reserve(rows)
	}
	return ra
}
