package tile

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// lanesUpdateGeneric is Lanes.Update in portable Go on the tile layout of qT and oT:
// per row, the operations of updateGeneric in the same order (so it equals
// the generic Acc tier bit for bit where Go does not fuse multiply-adds).
// Keys >= n are invisible to every row.
func lanesUpdateGeneric(l *Lanes, k, v []float32, n int) {
	d := l.d
	st := &l.st
	invT := float64(st.invT)
	var s [BlockN]float32
	for r := 0; r < l.m; r++ {
		nr := int(st.valid[r])
		st.alpha[r] = 1
		if nr <= 0 {
			continue
		}
		sr := s[:nr]
		clear(sr)
		for c := 0; c < d; c++ {
			qc := l.qT[qIdx(r, c)]
			for i := range sr {
				sr[i] += qc * k[i*d+c]
			}
		}
		for i := range sr {
			sr[i] *= st.scale
		}
		mx := st.mx[r]
		for _, x := range sr {
			if x > mx {
				mx = x
			}
		}
		alpha := float32(math.Exp2(float64(st.mx[r] - mx)))
		st.alpha[r] = alpha
		if alpha != 1 {
			for c := 0; c < d; c++ {
				l.oT[oIdx(r, c)] *= alpha
			}
		}
		st.sum[r] *= alpha
		if l.temp {
			st.tsum[r] *= float32(math.Exp2(float64(st.mx[r]-mx) * invT))
		}
		st.mx[r] = mx
		var sum, tsum float32
		for i, x := range sr {
			p := float32(math.Exp2(float64(x - mx)))
			sum += p
			if l.temp {
				tsum += float32(math.Exp2(float64(x-mx) * invT))
			}
			switch l.round {
			case RoundBF16:
				p = lowp.BF16(p).Float32()
			case RoundE4M3:
				p = lowp.E4M3Sat(p).Float32()
			}
			if p == 0 {
				continue
			}
			vr := v[i*d : (i+1)*d]
			for c, vv := range vr {
				l.oT[oIdx(r, c)] += p * vv
			}
		}
		st.sum[r] += sum
		st.tsum[r] += tsum
	}
}
