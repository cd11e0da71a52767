package tile

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// loadBlockGeneric packs k into the transposed layout and copies v.
func loadBlockGeneric(kt, vd []float32, n, d int, k, v []float32) {
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
	copy(vd[:n*d], v[:n*d])
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
		mx := a.mx[r]
		for _, x := range s {
			if x > mx {
				mx = x
			}
		}
		alpha := float32(math.Exp2(float64(a.mx[r] - mx)))
		o := a.O(r)
		if alpha != 1 {
			for c := range o {
				o[c] *= alpha
			}
		}
		a.sum[r] *= alpha
		if a.temp {
			a.tsum[r] *= float32(math.Exp2(float64(a.mx[r]-mx) * float64(a.invT)))
		}
		a.mx[r] = mx
		var sum, tsum float32
		for i, x := range s {
			p := float32(math.Exp2(float64(x - mx)))
			sum += p
			if a.temp {
				tsum += float32(math.Exp2(float64(x-mx) * float64(a.invT)))
			}
			switch a.round {
			case RoundBF16:
				p = lowp.BF16(p).Float32()
			case RoundE4M3:
				p = lowp.E4M3Sat(p).Float32()
			}
			if p == 0 {
				continue
			}
			vr := b.v[i*d : (i+1)*d]
			for c, vv := range vr {
				o[c] += p * vv
			}
		}
		a.sum[r] += sum
		a.tsum[r] += tsum
	}
}
