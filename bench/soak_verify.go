package main

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// soakTolerance bounds the error of a decode output element O against the
// float64 reference: |got - want| <= rtol |want| + atol max|v|.
//
// The float32 result before the output's BF16 rounding differs from the
// exact one by delta: the P.V sum and the normalisation over n <= keys
// terms by at most n u max|v| (u = 2^-24, recursive summation, weights
// summing to 1); a logit s = q.k / sqrt(D) by at most D u m^2 / sqrt(D)
// from the dot product plus u |s| <= u sqrt(D) m^2 from the scaling (m:
// the largest |value| the random data can take, bf16Table's), and a
// weight moves relatively by twice a logit's error (its own logit and the
// normalising sum), so O by 4 sqrt(D) m^2 u max|v|; exp and the split-KV
// rescaling add a few u. Rounding to BF16 then errs by at most its unit
// roundoff 2^-8 of |O + delta|, so |got - want| <= 2^-8 |want| +
// (1 + 2^-8) delta: rtol 2^-8, atol (1 + 2^-8)(n + 4 sqrt(D) m^2 + 8) u.
// The bf16 tiers round P to BF16 before P.V (tile.BF16Products): each
// weight errs by 2^-8 of itself, the sum by 2^-8 max|v| more.
func soakTolerance(sh soakShape) tolerance {
	const u = 1.0 / (1 << 24)
	tables()
	m := 0.0
	for _, x := range bf16Table {
		m = math.Max(m, math.Abs(bf16Val(x)))
	}
	n := float64(sh.promptMax + sh.genMax)
	t := tolerance{rtol: 1.0 / 256, atol: (1 + 1.0/256) * (n + 4*math.Sqrt(float64(sh.d))*m*m + 8) * u}
	if tile.BF16Products() {
		t.atol += 1.0 / 256
	}
	return t
}

// verifyDecode checks every request's output of the last decode step's
// last layer against the float64 reference over the request's pages (up
// to its seqused_k), within soakTolerance: pages are recycled
// between requests all the time, so a stale page table or a mixed-up page
// would show here. It must run before the next step overwrites the page
// table and the output (finish releases pages but writes nothing).
func (l *soakLoop) verifyDecode(ck *checker) {
	sh := l.sh
	if l.lastB == 0 {
		return
	}
	cols, layer, qpk := sh.maxCols(), sh.layers-1, sh.hq/sh.hkv
	kr := bf16Rows(l.kc[layer].Data().([]lowp.BFloat16))
	vr := bf16Rows(l.vc[layer].Data().([]lowp.BFloat16))
	qr := bf16Rows(l.lastQ.Data().([]lowp.BFloat16))
	scale := 1 / math.Sqrt(float64(sh.d))
	got := make([]float32, sh.d)
	for b := 0; b < l.lastB; b++ {
		n := int(l.su[b])
		keys, vals := make([][]float64, n), make([][]float64, n)
		for h := 0; h < sh.hkv; h++ {
			for t := 0; t < n; t++ {
				r := (int(l.pt[b*cols+t/sh.page])*sh.hkv+h)*sh.page + t%sh.page
				keys[t], vals[t] = kr.row(r, sh.d), vr.row(r, sh.d)
			}
			maxV := maxAbs(vals)
			for head := h * qpk; head < (h+1)*qpk; head++ {
				want := refAttention(qr.row(b*sh.hq+head, sh.d), keys, vals, scale)
				for i := range got {
					got[i] = l.out[(b*sh.hq+head)*sh.d+i].Float32()
				}
				ck.row(fmt.Sprintf("decode O[batch row %d, head %d] (context %d)", b, head, n), got, want, maxV)
			}
		}
	}
}
