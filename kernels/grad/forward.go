package grad

import "math"

// Forward computes the float32 block-sparse attention forward: o
// ([TotalQ][HQ][D]) and the natural-log lse ([TotalQ][HQ]) from q, k and v
// (see the package doc for the definitions and Problem for the layouts).
// Probabilities, sums and outputs stay in float32 (scores, P and the
// O accumulation in float32; LSE = max + ln(sum) in float64, stored as
// float32). Rows that see no key, and query rows outside every sequence,
// get O = 0 and LSE = -inf.
//
// Every (query, KV head) runs an online softmax over its selected blocks in
// ascending block order, so results are bit-identical for any number of
// workers. Forward returns an error, and writes nothing, when p or a tensor
// length is inconsistent.
func (ws *Workspace) Forward(p *Problem, q, k, v, o, lse []float32) error {
	if err := ws.prep.Prepare(p); err != nil {
		return err
	}
	return ws.ForwardPrepared(&ws.prep, q, k, v, o, lse)
}

// ForwardPrepared is Forward on a prepared problem (see Prepared): the
// same results, bit for bit, without the per-call set-up; once ws has run
// a problem of the same shapes it allocates nothing.
func (ws *Workspace) ForwardPrepared(pp *Prepared, q, k, v, o, lse []float32) error {
	p, dv, err := pp.run()
	if err != nil {
		return err
	}
	if err := p.checkTensors(
		tensorArg{name: "q", x: q, kind: kindQ}, tensorArg{name: "k", x: k, kind: kindKV},
		tensorArg{name: "v", x: v, kind: kindKV}, tensorArg{name: "o", x: o, kind: kindQ},
		tensorArg{name: "lse", x: lse, kind: kindRow}); err != nil {
		return err
	}
	ws.ensure(dv.qpk, p.BlkKV, p.D)
	kt, _, tsz := ws.transposeBlocks(p, dv, k, nil)
	ws.fwd = forwardCall{pp: pp, q: q, k: k, v: v, o: o, lse: lse, kt: kt, tsz: tsz}
	ws.parallel((p.TotalQ+queryChunk-1)/queryChunk, &ws.fwd)
	ws.fwd = forwardCall{} // keep no reference to the caller's tensors
	return nil
}

// forwardCall holds the arguments of one forward run. kt holds the
// transposed K blocks (transposeBlocks) on the SIMD tiers, else nil.
type forwardCall struct {
	pp                  *Prepared
	q, k, v, o, lse, kt []float32
	tsz                 int
}

// item computes query chunk c (queryChunk rows, every KV head).
func (fc *forwardCall) item(wk *worker, c int) {
	p := &fc.pp.p
	for gq := c * queryChunk; gq < min(p.TotalQ, (c+1)*queryChunk); gq++ {
		for h := 0; h < p.Hkv; h++ {
			fc.row(wk, gq, h)
		}
	}
}

// row computes O and LSE of global query row gq for the query heads of KV
// head h.
func (fc *forwardCall) row(wk *worker, gq, h int) {
	p, dv := &fc.pp.p, &fc.pp.dv
	q, k, v, o, lse, kt, tsz := fc.q, fc.k, fc.v, fc.o, fc.lse, fc.kt, fc.tsz
	d, qpk := p.D, dv.qpk
	row0 := gq*p.HQ + h*qpk // first (query, head) row of the group
	ninf := float32(math.Inf(-1))
	for r := 0; r < qpk; r++ {
		wk.mx[r], wk.sum[r] = ninf, 0
	}
	acc := wk.acc[:qpk*d]
	clear(acc)
	if b := int(dv.qBatch[gq]); b >= 0 {
		qr := q[row0*d : (row0+qpk)*d]
		seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(dv.seqK[b])
		i := gq - int(p.CuQ[b])
		scale := float32(p.Scale)
		cnt := wk.cnt[:qpk]
		for _, r := range fc.pp.queryBlocks(h, gq) {
			t0 := int(dv.rows.Block[r]) * p.BlkKV
			n := visible(i, seqQ, seqK, p.Causal, t0, p.BlkKV)
			if n == 0 {
				continue
			}
			vb := dv.blockKV(v, d, b, h, t0, n, wk.vb)
			for j := range cnt {
				cnt[j] = int32(n)
			}
			if kt != nil {
				wk.scoresT(wk.s, wk.ld, qr, qpk, blockTOf(kt, tsz, p, h, int(r)), wk.ld, n, d)
				wk.onlineSoftmax(qpk, cnt, scale)                       // scale applied inside
				wk.gemmRow(acc, d, wk.s, wk.ld, vb, d, qpk, d, n, true) // O += P V
				continue
			}
			kb := dv.blockKV(k, d, b, h, t0, n, wk.kb)
			scoresNT(wk.simd, wk.s, wk.ld, qr, qpk, kb, d, cnt, scale)
			wk.onlineSoftmax(qpk, cnt, 1) // scores already scaled
			accNN(acc, qpk, wk.s, wk.ld, vb, d, cnt)
		}
	}
	for r := 0; r < qpk; r++ {
		out := o[(row0+r)*d : (row0+r+1)*d]
		s := wk.sum[r]
		if !(s > 0) || math.IsInf(float64(wk.mx[r]), -1) {
			clear(out)
			lse[row0+r] = ninf
			continue
		}
		f := 1 / s
		for c, x := range acc[r*d : (r+1)*d] {
			out[c] = x * f
		}
		lse[row0+r] = float32(float64(wk.mx[r]) + math.Log(float64(s)))
	}
}
