package attn

import (
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/tile"
)

// keyWalk is one query tile's pass over the keys of one sequence and KV
// head, shared by decode and the query-major prefill: the tile's rows are
// the qpk query heads of tokens consecutive tokens, and the online softmax
// runs over every key in [KBegin, KEnd) (Sel nil: dense decode) or over the
// union of the blocks the tokens selected, in ascending block order, each
// row masked to the blocks its token selected. Token i sees keys t <
// Lim[i] (the causal limit, at most the sequence's key count).
type keyWalk struct {
	K, V         *Operand
	KV           *KVLayout
	B, H         int // sequence (request) and KV head
	KBegin, KEnd int // the keys the walk may read
	Tokens, QPK  int
	Q            *Operand // query rows: token i, head g at row QRow+i*QStep+g
	QRow, QStep  int
	Lim          []int32 // [Tokens] causal limit of each token
	// Sel holds the tokens' block lists: token i's at Sel[i*SelStride:]
	// [:TopK], -1 for unused entries; nil walks every key.
	Sel       []int32
	SelStride int
	TopK      int
	BlkKV     int
	Scale     float32    // softmax_scale * log2(e)
	Round     tile.Round // P rounding before P.V
	InvT      float32    // 1/T to track the temperature sum, 0 for none
	Staged    bool       // decode K/V chunks on demand (kvStager), not whole blocks
	BF16      bool       // run the bf16 twin's products (rowAcc.bf16Products): a prefill call with bf16 products
}

// walk runs w on the worker's accumulator and returns it with the rows'
// LSEs in wk.lse, temperature LSEs in wk.tlse (w.InvT > 0) and normalising
// factors in wk.inv, and the factor every row's normalised O still needs
// (V's overflow guard and the e4m3 fold of the staging).
func (wk *worker) walk(w *keyWalk) (rowAcc, float32) {
	d := w.K.D
	m := w.Tokens * w.QPK
	ra := wk.decodeAcc(tile.LanesSIMD(d))
	bounded := vBounded(w.V)
	// AVX2 stages e4m3fn K and V folded (e4m3Fold) for the lane
	// accumulator, and its lane kernels read the chunks offered raw the
	// same way (tile.RawE4M3Div256): the factor goes back into the score
	// scale (unless that would overflow it) and into the output's
	// normalising factor.
	scale := w.Scale
	_, lanes := ra.(*lanesAcc)
	foldK := lanes && w.Staged && w.K.foldsE4M3() && !math.IsInf(float64(scale*e4m3Fold), 0)
	foldV := lanes && w.Staged && w.V.foldsE4M3()
	if foldK {
		scale *= e4m3Fold
	}
	oFold := float32(1)
	if foldV {
		oFold = e4m3Fold
	}
	ra.bf16Products(w.BF16)
	ra.reset(m, scale, w.Round, w.InvT)
	vs := &wk.vs // the V overflow guard of this tile's accumulation
	*vs = vScale{}
	for i := 0; i < w.Tokens; i++ {
		ra.setQRows(w.Q, i*w.QPK, w.QRow+i*w.QStep, w.QPK, wk.tmp)
	}
	// K and V are decoded inside the update (the accumulators'
	// updateStaged: tile.Lanes.UpdateStaged asks for a few rows at a time,
	// so the float32 rows stay in cache; the block accumulator takes whole
	// blocks), V's overflow guard scanning each decoded chunk unless V is
	// bounded (kvStager). Unstaged (tests) decodes whole blocks first and
	// guards them with vScale.block.
	// next is the first token of the span after this one (-1: none), whose
	// K/V the update prefetches.
	span := func(t0, t1 int, j int32, next int) {
		n := t1 - t0
		if !w.Staged {
			loadKV(w.K, w.V, w.KV, w.B, w.H, t0, n, wk.kbuf, wk.vbuf)
		}
		any := false
		for i := 0; i < w.Tokens; i++ {
			v := int32(0)
			if j < 0 || slices.Contains(w.Sel[i*w.SelStride:][:w.TopK], j) {
				v = int32(max(0, min(n, int(w.Lim[i])-t0)))
			}
			for g := 0; g < w.QPK; g++ {
				wk.valid[i*w.QPK+g] = v
			}
			any = any || v > 0
		}
		switch {
		case !any:
		case w.Staged:
			if next >= 0 {
				prefetchNext(ra, w.K, w.V, w.KV, w.B, w.H, next, min(tile.BlockN, w.KEnd-next), foldK)
			}
			wk.stage = kvStager{k: w.K, v: w.V, l: w.KV, b: w.B, h: w.H, t0: t0, kbuf: wk.kbuf, vbuf: wk.vbuf, vs: vs, acc: ra, scan: !bounded, foldK: foldK, foldV: foldV}
			ra.updateStaged(&wk.stage, n, wk.valid[:m])
		default:
			vs.block(wk.vbuf[:n*d], ra, w.V)
			ra.update(wk.kbuf[:n*d], wk.vbuf[:n*d], n, wk.valid[:m])
		}
	}
	if w.Sel == nil {
		for t := w.KBegin; t < w.KEnd; t += tile.BlockN {
			next := t + tile.BlockN
			if next >= w.KEnd {
				next = -1
			}
			span(t, min(w.KEnd, t+tile.BlockN), -1, next)
		}
	} else {
		blocks := wk.unionBlocks(w)
		for x, j := range blocks {
			lo := max(w.KBegin, int(j)*w.BlkKV)
			hi := min(w.KEnd, (int(j)+1)*w.BlkKV)
			for t := lo; t < hi; t += tile.BlockN {
				next := t + tile.BlockN
				if next >= hi {
					next = -1
					if x+1 < len(blocks) {
						if nl := max(w.KBegin, int(blocks[x+1])*w.BlkKV); nl < w.KEnd {
							next = nl
						}
					}
				}
				span(t, min(hi, t+tile.BlockN), j, next)
			}
		}
	}
	var tlse []float32
	if w.InvT > 0 {
		tlse = wk.tlse[:m]
	}
	ra.finishLSE(wk.lse[:m], tlse, wk.inv[:m])
	return ra, vs.factor() * oFold
}

// unionBlocks returns the union of the blocks w's tokens selected,
// ascending, in the worker's block buffer. Blocks that start at or after
// every token's causal limit are left out: no row of the tile sees a key
// of them.
func (wk *worker) unionBlocks(w *keyWalk) []int32 {
	lim := int32(0)
	for _, l := range w.Lim[:w.Tokens] {
		lim = max(lim, l)
	}
	blocks := wk.blocks[:0]
	for i := 0; i < w.Tokens; i++ {
		for _, j := range w.Sel[i*w.SelStride:][:w.TopK] {
			if j >= 0 && int64(j)*int64(w.BlkKV) < int64(lim) && !slices.Contains(blocks, j) {
				blocks = append(blocks, j)
			}
		}
	}
	slices.Sort(blocks)
	wk.blocks = blocks[:0]
	return blocks
}
