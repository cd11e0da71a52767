package op

import (
	"math"
)

// refCase is a sparse attention problem in plain float64, independent of
// the CSR, the schedule and the kernels: each query attends the keys of the
// blocks its q2k list names.
type refCase struct {
	batch       int
	hq, hkv, d  int
	cuQ         []int32
	seqK        []int       // effective key length per sequence
	q           [][]float64 // [total_q*Hq][D]
	k, v        func(b, h, t int) []float64
	q2k         []int32 // [Hkv][total_q][topK]
	topK, blk   int
	causal      bool
	scale       float64
	temperature float64
	outScale    float64
}

// refOut holds reference outputs: O [total_q*Hq][D], LSE and TLSE.
type refOut struct {
	o         [][]float64
	lse, tlse []float64
}

// referenceSparse computes block-sparse attention the slow, obvious way.
func referenceSparse(rc *refCase) refOut {
	totalQ := int(rc.cuQ[len(rc.cuQ)-1])
	qpk := rc.hq / rc.hkv
	out := refOut{o: make([][]float64, len(rc.q)), lse: make([]float64, len(rc.q)), tlse: make([]float64, len(rc.q))}
	for i := range out.o {
		out.o[i] = make([]float64, rc.d)
		out.lse[i] = math.Inf(-1)
		out.tlse[i] = math.Inf(-1)
	}
	for b := 0; b < rc.batch; b++ {
		seqQ := int(rc.cuQ[b+1] - rc.cuQ[b])
		for qi := 0; qi < seqQ; qi++ {
			gq := int(rc.cuQ[b]) + qi
			for hq := 0; hq < rc.hq; hq++ {
				h := hq / qpk
				var keys []int
				for _, j := range rc.q2k[(h*totalQ+gq)*rc.topK : (h*totalQ+gq+1)*rc.topK] {
					if j < 0 {
						continue
					}
					for t := int(j) * rc.blk; t < (int(j)+1)*rc.blk; t++ {
						if t >= rc.seqK[b] {
							break
						}
						if rc.causal && t > qi+rc.seqK[b]-seqQ {
							break
						}
						keys = append(keys, t)
					}
				}
				row := gq*rc.hq + hq
				refRow(rc, out, row, rc.q[row], keys, func(t int) ([]float64, []float64) {
					return rc.k(b, h, t), rc.v(b, h, t)
				})
			}
		}
	}
	return out
}

// refRow is the softmax attention of one query row over keys.
func refRow(rc *refCase, out refOut, row int, q []float64, keys []int, kv func(t int) ([]float64, []float64)) {
	if len(keys) == 0 {
		return
	}
	s := make([]float64, len(keys))
	m := math.Inf(-1)
	for i, t := range keys {
		k, _ := kv(t)
		dot := 0.0
		for c := range q {
			dot += q[c] * k[c]
		}
		s[i] = rc.scale * dot
		m = math.Max(m, s[i])
	}
	sum, tsum := 0.0, 0.0
	temp := rc.temperature
	if temp == 0 {
		temp = 1
	}
	for _, x := range s {
		sum += math.Exp(x - m)
		tsum += math.Exp((x - m) / temp)
	}
	os := rc.outScale
	if os == 0 {
		os = 1
	}
	for i, t := range keys {
		_, v := kv(t)
		w := math.Exp(s[i]-m) / sum
		for c := range v {
			out.o[row][c] += w * v[c] * os
		}
	}
	out.lse[row] = m + math.Log(sum)
	out.tlse[row] = m/temp + math.Log(tsum)
}
