package op

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// sparseSpec describes one randomly generated sparse prefill problem.
type sparseSpec struct {
	seed        uint64
	seqQ, seqK  []int // per sequence; seqK is the effective key length
	hq, hkv, d  int
	topK, blk   int
	causal      bool
	paged       bool
	trim        bool   // paged: extra page-table columns beyond the used pages (-1 filled)
	qDt, kvDt   string // "bf16", "e4m3", "nvfp4" (kv only)
	partial     tensor.Dtype
	pv          tensor.Dtype // explicit pv_dtype (zero = default)
	temperature float64
	scale       float64
	kGlobal     float32 // nvfp4 K global scale (0 = none)
	vGlobal     float32 // nvfp4 V global scale (0 = none)
}

func (s sparseSpec) String() string {
	return fmt.Sprintf("seed=%d seqQ=%v seqK=%v hq=%d hkv=%d d=%d topK=%d causal=%v paged=%v q=%s kv=%s partial=%v pv=%v T=%v",
		s.seed, s.seqQ, s.seqK, s.hq, s.hkv, s.d, s.topK, s.causal, s.paged, s.qDt, s.kvDt, validate.DtypeName(s.partial), validate.DtypeName(s.pv), s.temperature)
}

// sparseProblem holds the generated tensors and the reference inputs.
type sparseProblem struct {
	q, k, v            *tensor.Dense
	kScale, vScale     *tensor.Dense
	kGlobal, vGlobal   *tensor.Dense
	q2k, cuQ, cuK      *tensor.Dense
	pageTable, seqused *tensor.Dense
	ref                refCase
	maxV               float64
}

// quantize stores x in dtype dt and returns the tensor data and the decoded values.
func quantize(rng *rand.Rand, n int, dt string, amp float64) (any, []float64) {
	vals := make([]float64, n)
	switch dt {
	case "bf16":
		s := make([]lowp.BFloat16, n)
		for i := range s {
			s[i] = lowp.BF16(float32(rng.NormFloat64() * amp))
			vals[i] = float64(s[i].Float32())
		}
		return s, vals
	case "e4m3":
		s := make([]lowp.Float8E4M3FN, n)
		for i := range s {
			s[i] = lowp.E4M3Sat(float32(rng.NormFloat64() * amp))
			vals[i] = float64(s[i].Float32())
		}
		return s, vals
	}
	panic("quantize: " + dt)
}

func buildSparse(s sparseSpec) *sparseProblem {
	rng := rand.New(rand.NewPCG(s.seed, 7))
	B := len(s.seqQ)
	cuQ := make([]int32, B+1)
	cuK := make([]int32, B+1)
	for b := 0; b < B; b++ {
		cuQ[b+1] = cuQ[b] + int32(s.seqQ[b])
		cuK[b+1] = cuK[b] + int32(s.seqK[b])
	}
	totalQ, totalK := int(cuQ[B]), int(cuK[B])
	d := s.d
	pr := &sparseProblem{}
	pr.cuQ = tensor.New(tensor.WithShape(B+1), tensor.WithBacking(cuQ))
	pr.cuK = tensor.New(tensor.WithShape(B+1), tensor.WithBacking(cuK))

	// Q.
	qdata, qv := quantize(rng, totalQ*s.hq*d, s.qDt, 1)
	pr.q = tensor.New(tensor.WithShape(totalQ, s.hq, d), tensor.WithBacking(qdata))

	// K/V storage rows: dense row (cuK[b]+t)*Hkv+h, paged (page*Hkv+h)*ps+i.
	var rowOf func(b, h, t int) int
	var kvShape []int
	var storeRows int
	if !s.paged {
		rowOf = func(b, h, t int) int { return (int(cuK[b])+t)*s.hkv + h }
		kvShape = []int{totalK, s.hkv, d}
		storeRows = totalK * s.hkv
	} else {
		ps := s.blk
		cols := 0
		used := make([]int, B)
		for b := 0; b < B; b++ {
			used[b] = (s.seqK[b] + ps - 1) / ps
			cols = max(cols, used[b])
		}
		if s.trim {
			cols += 2
		}
		cols = max(cols, 1)
		numPages := 0
		for _, u := range used {
			numPages += u
		}
		numPages += 3 // unused pages
		perm := rng.Perm(numPages)
		pt := make([]int32, B*max(cols, 1))
		for i := range pt {
			pt[i] = -1
		}
		next := 0
		for b := 0; b < B; b++ {
			for j := 0; j < used[b]; j++ {
				pt[b*cols+j] = int32(perm[next])
				next++
			}
		}
		pr.pageTable = tensor.New(tensor.WithShape(B, cols), tensor.WithBacking(pt))
		su := make([]int32, B)
		for b := range su {
			su[b] = int32(s.seqK[b])
		}
		pr.seqused = tensor.New(tensor.WithShape(B), tensor.WithBacking(su))
		rowOf = func(b, h, t int) int { return (int(pt[b*cols+t/ps])*s.hkv+h)*ps + t%ps }
		kvShape = []int{numPages, s.hkv, ps, d}
		storeRows = numPages * s.hkv * ps
	}
	var kv, vv []float64
	if s.kvDt == "nvfp4" {
		kf := make([]float32, storeRows*d)
		vf := make([]float32, storeRows*d)
		for i := range kf {
			kf[i] = float32(rng.NormFloat64())
			vf[i] = float32(rng.NormFloat64())
		}
		kg, vg := s.kGlobal, s.vGlobal
		qz := func(x []float32, g float32) (*tensor.Dense, *tensor.Dense, []float64) {
			gs := g
			if gs == 0 {
				gs = 1
			}
			packed, scales, err := lowp.QuantizeNVFP4(x, storeRows, d, gs)
			if err != nil {
				panic(err)
			}
			pshape := append(append([]int{}, kvShape[:len(kvShape)-1]...), d/2)
			prow, pcol := lowp.Scale128x4Shape(storeRows, d/16)
			dec := make([]float64, storeRows*d)
			row := make([]float32, d)
			for r := 0; r < storeRows; r++ {
				lowp.DequantizeNVFP4Row(row, packed, scales, r, d, gs)
				for c := range row {
					dec[r*d+c] = float64(row[c])
				}
			}
			return tensor.New(tensor.WithShape(pshape...), tensor.WithBacking(packed)),
				tensor.New(tensor.WithShape(prow, pcol), tensor.WithBacking(scales)), dec
		}
		pr.k, pr.kScale, kv = qz(kf, kg)
		var vdec []float64
		pr.v, pr.vScale, vdec = qz(vf, vg)
		vv = vdec
		if kg != 0 {
			pr.kGlobal = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{kg}))
		}
		if vg != 0 {
			pr.vGlobal = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{vg}))
			// The kernel decodes V without its global scale and applies it in
			// the combine; the reference folds it into outScale instead.
			for i := range vv {
				vv[i] /= float64(vg)
			}
		}
	} else {
		kd, kvals := quantize(rng, storeRows*d, s.kvDt, 1)
		vd, vvals := quantize(rng, storeRows*d, s.kvDt, 1)
		pr.k = tensor.New(tensor.WithShape(kvShape...), tensor.WithBacking(kd))
		pr.v = tensor.New(tensor.WithShape(kvShape...), tensor.WithBacking(vd))
		kv, vv = kvals, vvals
	}
	for _, x := range vv {
		pr.maxV = math.Max(pr.maxV, math.Abs(x))
	}

	// q2k: distinct blocks in random order, random -1 padding; some lists
	// entirely future blocks (all masked when causal).
	q2k := make([]int32, s.hkv*totalQ*s.topK)
	for i := range q2k {
		q2k[i] = -1
	}
	for h := 0; h < s.hkv; h++ {
		for b := 0; b < B; b++ {
			nb := (s.seqK[b] + s.blk - 1) / s.blk
			for qi := 0; qi < s.seqQ[b]; qi++ {
				gq := int(cuQ[b]) + qi
				list := q2k[(h*totalQ+gq)*s.topK : (h*totalQ+gq+1)*s.topK]
				if nb == 0 {
					continue
				}
				n := rng.IntN(min(nb, s.topK) + 1)
				perm := rng.Perm(nb)[:n]
				slots := rng.Perm(s.topK)[:n]
				for i, j := range perm {
					list[slots[i]] = int32(j)
				}
			}
		}
	}
	pr.q2k = tensor.New(tensor.WithShape(s.hkv, totalQ, s.topK), tensor.WithBacking(q2k))

	seqK := append([]int{}, s.seqK...)
	qrows := make([][]float64, totalQ*s.hq)
	for i := range qrows {
		qrows[i] = qv[i*d : (i+1)*d]
	}
	scale := s.scale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(d))
	}
	outScale := 1.0
	if s.kvDt == "nvfp4" && s.vGlobal != 0 {
		outScale = float64(s.vGlobal)
	}
	pr.ref = refCase{
		batch: B, hq: s.hq, hkv: s.hkv, d: d, cuQ: cuQ, seqK: seqK, q: qrows,
		k:   func(b, h, t int) []float64 { r := rowOf(b, h, t); return kv[r*d : (r+1)*d] },
		v:   func(b, h, t int) []float64 { r := rowOf(b, h, t); return vv[r*d : (r+1)*d] },
		q2k: q2k, topK: s.topK, blk: s.blk, causal: s.causal, scale: scale,
		temperature: s.temperature, outScale: outScale,
	}
	pr.maxV *= outScale
	return pr
}
