package grad

import (
	"math"

	"github.com/sparseattn/msa/kernels/attn"
)

// TemperatureLSE computes tlse ([TotalQ][HQ]) = ln sum_t exp(s_t / T) over
// the keys each (query, head) row sees, with s_t = Scale * (q . k_t) as in
// Forward and invT = 1/T. Scores are float32 (the forward's score code);
// the running maximum and sum are float64. Rows that see no key, and
// query rows outside every sequence, get -inf. The result is bit-identical
// for any number of workers. It is forward-only: no gradient flows from
// the temperature LSE.
func (ws *Workspace) TemperatureLSE(p *Problem, q, k []float32, invT float64, tlse []float32) error {
	if err := ws.prep.Prepare(p); err != nil {
		return err
	}
	return ws.TemperatureLSEPrepared(&ws.prep, q, k, invT, tlse)
}

// TemperatureLSEPrepared is TemperatureLSE on a prepared problem (see
// Prepared), without the per-call set-up.
func (ws *Workspace) TemperatureLSEPrepared(pp *Prepared, q, k []float32, invT float64, tlse []float32) error {
	p, dv, err := pp.run()
	if err != nil {
		return err
	}
	if err := p.checkTensors(
		tensorArg{name: "q", x: q, kind: kindQ}, tensorArg{name: "k", x: k, kind: kindKV},
		tensorArg{name: "tlse", x: tlse, kind: kindRow}); err != nil {
		return err
	}
	if math.IsNaN(invT) || math.IsInf(invT, 0) || invT <= 0 {
		return errorf("1/T = %v: must be finite and > 0", invT)
	}
	ws.ensure(dv.qpk, p.BlkKV, p.D)
	ws.tl = temperatureCall{pp: pp, q: q, k: k, tlse: tlse, invT: invT}
	ws.parallel((p.TotalQ+queryChunk-1)/queryChunk, &ws.tl)
	ws.tl = temperatureCall{} // keep no reference to the caller's tensors
	return nil
}

// temperatureCall holds the arguments of one TemperatureLSE run.
type temperatureCall struct {
	pp         *Prepared
	q, k, tlse []float32
	invT       float64
}

// item computes query chunk c (queryChunk rows, every KV head).
func (tc *temperatureCall) item(wk *worker, c int) {
	p := &tc.pp.p
	for gq := c * queryChunk; gq < min(p.TotalQ, (c+1)*queryChunk); gq++ {
		for h := 0; h < p.Hkv; h++ {
			tc.row(wk, gq, h)
		}
	}
}

// row computes the temperature LSE of global query row gq for the query
// heads of KV head h: two passes over the query's blocks (the maximum,
// then the sum), in ascending block order.
func (tc *temperatureCall) row(wk *worker, gq, h int) {
	p, dv := &tc.pp.p, &tc.pp.dv
	q, k, invT, tlse := tc.q, tc.k, tc.invT, tc.tlse
	d, qpk, ld := p.D, dv.qpk, wk.ld
	row0 := gq*p.HQ + h*qpk
	mx, sum := wk.mx64[:qpk], wk.sum64[:qpk]
	for r := range mx {
		mx[r], sum[r] = math.Inf(-1), 0
	}
	if b := int(dv.qBatch[gq]); b >= 0 {
		qr := q[row0*d : (row0+qpk)*d]
		seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(dv.seqK[b])
		i := gq - int(p.CuQ[b])
		scale := float32(p.Scale)
		cnt := wk.cnt[:qpk]
		for pass := 0; pass < 2; pass++ {
			for _, r := range tc.pp.queryBlocks(h, gq) {
				t0 := int(dv.rows.Block[r]) * p.BlkKV
				n := visible(i, seqQ, seqK, p.Causal, t0, p.BlkKV)
				if n == 0 {
					continue
				}
				kb := dv.blockKV(k, d, b, h, t0, n, wk.kb)
				for j := range cnt {
					cnt[j] = int32(n)
				}
				scoresNT(wk.simd, wk.s, ld, qr, qpk, kb, d, cnt, scale)
				for g := 0; g < qpk; g++ {
					for _, x := range wk.s[g*ld : g*ld+n] {
						y := float64(x) * invT
						if pass == 0 {
							mx[g] = max(mx[g], y)
						} else if !math.IsInf(mx[g], 0) {
							sum[g] += math.Exp(y - mx[g])
						}
					}
				}
			}
		}
	}
	for g := 0; g < qpk; g++ {
		if !(sum[g] > 0) || math.IsInf(mx[g], 0) {
			tlse[row0+g] = float32(math.Inf(-1))
			continue
		}
		tlse[row0+g] = float32(mx[g] + math.Log(sum[g]))
	}
}

// SetPool makes the workspace run its next calls on pool (nil: on the
// calling goroutine). Buffers are kept; only the per-worker scratch is
// resized when the worker count changes.
func (ws *Workspace) SetPool(pool *attn.Pool) {
	if pool == nil {
		pool = attn.NewPool(1)
	}
	ws.pool = pool
}
