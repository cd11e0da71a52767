package grad

import "math"

// The float64 reference: dense masked attention over the selected blocks,
// computed from q2k_indices directly (not from the CSR), with its own K/V
// addressing.

// refKeys returns the K/V rows (element offset / D) of the keys (query row
// gq, query head hq) sees, in ascending q2k order.
func (in *instance) refKeys(gq, hq int) []int {
	p := in.p
	nb := len(p.CuQ) - 1
	b := -1
	for s := 0; s < nb; s++ {
		if gq >= int(p.CuQ[s]) && gq < int(p.CuQ[s+1]) {
			b = s
		}
	}
	if b < 0 {
		return nil
	}
	h := hq / (p.HQ / p.Hkv)
	i := gq - int(p.CuQ[b])
	seqQ := int(p.CuQ[b+1] - p.CuQ[b])
	seqK := int(p.CuK[b+1] - p.CuK[b])
	if p.Paged {
		seqK = int(p.SeqUsedK[b])
	}
	var rows []int
	for _, j := range in.q2k[(h*p.TotalQ+gq)*p.TopK : (h*p.TotalQ+gq+1)*p.TopK] {
		if j < 0 {
			continue
		}
		for t := int(j) * p.BlkKV; t < (int(j)+1)*p.BlkKV; t++ {
			if t >= seqK || (p.Causal && t > i+seqK-seqQ) {
				continue
			}
			if p.Paged {
				page := int(p.PageTable[b*p.PTCols+t/p.PageSize])
				rows = append(rows, (page*p.Hkv+h)*p.PageSize+t%p.PageSize)
			} else {
				rows = append(rows, (int(p.CuK[b])+t)*p.Hkv+h)
			}
		}
	}
	return rows
}

// refResult holds the reference outputs and gradients.
type refResult struct {
	o, lse     []float64
	dq, dk, dv []float64
}

// reference computes the forward of (q, k, v) and, when dO != nil, the
// backward for the loss sum(dO*O) + sum(dLSE*LSE) over rows with a finite
// LSE (dLSE may be nil).
func (in *instance) reference(q, k, v, dO, dLSE []float64) *refResult {
	p := in.p
	d := p.D
	res := &refResult{o: make([]float64, len(q)), lse: make([]float64, p.TotalQ*p.HQ)}
	if dO != nil {
		res.dq, res.dk, res.dv = make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	}
	for gq := 0; gq < p.TotalQ; gq++ {
		for hq := 0; hq < p.HQ; hq++ {
			row := gq*p.HQ + hq
			keys := in.refKeys(gq, hq)
			qr := q[row*d : (row+1)*d]
			if len(keys) == 0 {
				res.lse[row] = math.Inf(-1)
				continue
			}
			s := make([]float64, len(keys))
			mx := math.Inf(-1)
			for n, kr := range keys {
				var x float64
				for c := 0; c < d; c++ {
					x += qr[c] * k[kr*d+c]
				}
				s[n] = p.Scale * x
				mx = math.Max(mx, s[n])
			}
			var sum float64
			for _, x := range s {
				sum += math.Exp(x - mx)
			}
			lse := mx + math.Log(sum)
			res.lse[row] = lse
			o := res.o[row*d : (row+1)*d]
			pr := make([]float64, len(keys))
			for n, kr := range keys {
				pr[n] = math.Exp(s[n] - lse)
				for c := 0; c < d; c++ {
					o[c] += pr[n] * v[kr*d+c]
				}
			}
			if dO == nil {
				continue
			}
			do := dO[row*d : (row+1)*d]
			var delta float64
			for c := 0; c < d; c++ {
				delta += do[c] * o[c]
			}
			dl := 0.0
			if dLSE != nil {
				dl = dLSE[row]
			}
			for n, kr := range keys {
				var dp float64
				for c := 0; c < d; c++ {
					dp += do[c] * v[kr*d+c]
				}
				ds := pr[n] * (dp - delta + dl)
				for c := 0; c < d; c++ {
					res.dq[row*d+c] += p.Scale * ds * k[kr*d+c]
					res.dk[kr*d+c] += p.Scale * ds * qr[c]
					res.dv[kr*d+c] += pr[n] * do[c]
				}
			}
		}
	}
	return res
}

// loss is sum(dO*O) + sum(dLSE*LSE) over rows with a finite LSE, whose
// gradient the backward computes.
func (in *instance) loss(q, k, v []float64, withLSE bool) float64 {
	r := in.reference(q, k, v, nil, nil)
	var l float64
	for i, o := range r.o {
		l += in.dO[i] * o
	}
	if withLSE {
		for i, x := range r.lse {
			if !math.IsInf(x, -1) {
				l += in.dLSE[i] * x
			}
		}
	}
	return l
}
