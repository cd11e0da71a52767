package tile

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// loadBlockGeneric packs k into the transposed layout and keeps v.
func loadBlockGeneric(b *Block, n int, k, v []float32) {
	kt, d := b.kt, b.d
	for i := 0; i < n; i++ {
		row := k[i*d : (i+1)*d]
		for c, x := range row {
			kt[c*BlockN+i] = x
		}
	}
	// Zero the unused key columns so kernels may compute full-width rows.
	if n < BlockN {
		for c := 0; c < d; c++ {
			clear(kt[c*BlockN+n : (c+1)*BlockN])
		}
	}
	b.setV(n, v)
}

// foldRow is the online-softmax step of one row, shared by the portable
// Acc and Lanes code: s are the row's scaled base-2 scores of its visible
// keys, v their value rows ([len(s)][d], row-major), o the row's
// unnormalised output (len d) and mx, sum, tsum its running state. It
// rescales o and the sums by alpha = exp2(mx - mx'), adds p = exp2(s - mx')
// (rounded as round) times each value row, and returns alpha.
func foldRow(s, v []float32, d int, o []float32, mx, sum, tsum *float32, temp bool, invT float32, round Round) float32 {
	m := *mx
	for _, x := range s {
		if x > m {
			m = x
		}
	}
	alpha := float32(math.Exp2(float64(*mx - m)))
	if alpha != 1 {
		for c := range o {
			o[c] *= alpha
		}
	}
	*sum *= alpha
	if temp {
		*tsum *= float32(math.Exp2(float64(*mx-m) * float64(invT)))
	}
	*mx = m
	var ps, ts float32
	for i, x := range s {
		p := float32(math.Exp2(float64(x - m)))
		ps += p
		if temp {
			ts += float32(math.Exp2(float64(x-m) * float64(invT)))
		}
		switch round {
		case RoundBF16:
			p = lowp.BF16(p).Float32()
		case RoundE4M3:
			p = lowp.E4M3Sat(p).Float32()
		}
		// No skip for p == 0: like the SIMD tiers, a key the row reads
		// contributes p*v even when p underflowed, so a NaN or Inf in v
		// propagates the same way on every tier.
		vr := v[i*d : (i+1)*d]
		for c, vv := range vr {
			o[c] += p * vv
		}
	}
	*sum += ps
	*tsum += ts
	return alpha
}

// updateGeneric is the reference implementation of Acc.Update.
func updateGeneric(a *Acc, b *Block, valid []int32) {
	d := a.d
	for r := 0; r < a.m; r++ {
		n := int(valid[r])
		if n <= 0 {
			continue
		}
		q := a.Q(r)
		s := a.s[r*BlockN : r*BlockN+n]
		for i := range s {
			s[i] = 0
		}
		for c := 0; c < d; c++ {
			qc := q[c]
			kc := b.kt[c*BlockN : c*BlockN+n]
			for i, kv := range kc {
				s[i] += qc * kv
			}
		}
		for i := range s {
			s[i] *= a.scale
		}
		foldRow(s, b.v, d, a.O(r), &a.mx[r], &a.sum[r], &a.tsum[r], a.temp, a.invT, a.round)
		// The keys of the block the row may not see have weight 0; the SIMD
		// tiers multiply them in, so 0*NaN and 0*Inf reach o there: do the
		// same (a no-op for finite values).
		o := a.O(r)
		for i := n; i < b.n; i++ {
			for c, vv := range b.v[i*d : (i+1)*d] {
				o[c] += 0 * vv
			}
		}
	}
}
