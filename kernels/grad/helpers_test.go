package grad

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/plan"
)

// shape describes one generated test problem.
type shape struct {
	seqQ, seqK []int // per sequence; seqK are the key lengths (seqused_k when paged)
	hq, hkv    int
	d, topK    int
	blk        int
	causal     bool
	paged      bool
	pageSize   int
	shared     bool    // paged: sequence 1 reuses sequence 0's first page
	pad        float64 // probability of turning a selected slot into -1
	qOffset    int     // query rows before cuQ[0] (outside every sequence)
	seed       uint64
}

func (s shape) String() string {
	mode := "dense"
	if s.paged {
		mode = fmt.Sprintf("paged%d", s.pageSize)
		if s.shared {
			mode += "shared"
		}
	}
	return fmt.Sprintf("q%v_k%v_g%d_hkv%d_d%d_top%d_blk%d_causal%v_%s", s.seqQ, s.seqK, s.hq/s.hkv, s.hkv, s.d, s.topK, s.blk, s.causal, mode)
}

// instance is a generated problem with float64 data (every value exactly
// representable in float32, so the float32 kernels see the same inputs).
type instance struct {
	p       *Problem
	q2k     []int32 // [Hkv][TotalQ][topK]
	q, k, v []float64
	dO      []float64
	dLSE    []float64
}

// f32 rounds a float64 to float32 and back.
func f32(x float64) float64 { return float64(float32(x)) }

func randVec(r *rand.Rand, n int, amp float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = f32(amp * (2*r.Float64() - 1))
	}
	return x
}

// newInstance builds a problem of shape s with random data.
func newInstance(t testing.TB, s shape) *instance {
	t.Helper()
	r := rand.New(rand.NewPCG(s.seed, 7))
	nb := len(s.seqQ)
	cuQ := make([]int32, nb+1)
	cuK := make([]int32, nb+1)
	cuQ[0] = int32(s.qOffset)
	for b := 0; b < nb; b++ {
		cuQ[b+1] = cuQ[b] + int32(s.seqQ[b])
		cuK[b+1] = cuK[b] + int32(s.seqK[b])
	}
	totalQ := int(cuQ[nb]) + 1 // one more row after the last sequence
	p := &Problem{
		TotalQ: totalQ, HQ: s.hq, Hkv: s.hkv, D: s.d, CuQ: cuQ, CuK: cuK,
		BlkKV: s.blk, TopK: s.topK, Causal: s.causal, Scale: 1 / math.Sqrt(float64(s.d)),
	}
	if s.paged {
		p.Paged, p.PageSize = true, s.pageSize
		p.SeqUsedK = make([]int32, nb)
		for b := 0; b < nb; b++ {
			p.SeqUsedK[b] = int32(s.seqK[b])
			p.PTCols = max(p.PTCols, (s.seqK[b]+s.pageSize-1)/s.pageSize)
		}
		p.PTCols++ // a spare column pointing to an unused page
		p.NumPages = nb*p.PTCols + 2
		perm := r.Perm(p.NumPages)
		p.PageTable = make([]int32, nb*p.PTCols)
		for i := range p.PageTable {
			p.PageTable[i] = int32(perm[i])
		}
		if s.shared && nb > 1 {
			p.PageTable[p.PTCols] = p.PageTable[0]
		}
	} else {
		p.TotalK = int(cuK[nb]) + 3 // rows after the last sequence get no gradient
	}
	inst := &instance{p: p}
	inst.q2k = make([]int32, s.hkv*totalQ*s.topK)
	for i := range inst.q2k {
		inst.q2k[i] = -1
	}
	for h := 0; h < s.hkv; h++ {
		for b := 0; b < nb; b++ {
			nblk := (s.seqK[b] + s.blk - 1) / s.blk
			for q := int(cuQ[b]); q < int(cuQ[b+1]); q++ {
				list := inst.q2k[(h*totalQ+q)*s.topK : (h*totalQ+q+1)*s.topK]
				perm := r.Perm(nblk)
				for j := 0; j < min(s.topK, nblk); j++ {
					if r.Float64() >= s.pad {
						list[j] = int32(perm[j])
					}
				}
				r.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
			}
		}
	}
	csr, err := plan.BuildK2QCSR(nil, inst.q2k, s.hkv, totalQ, s.topK, cuQ, cuK, s.blk)
	if err != nil {
		t.Fatal(err)
	}
	p.CSR = csr
	kvRows := p.TotalK * s.hkv
	if s.paged {
		kvRows = p.NumPages * s.hkv * s.pageSize
	}
	inst.q = randVec(r, totalQ*s.hq*s.d, 1)
	inst.k = randVec(r, kvRows*s.d, 1)
	inst.v = randVec(r, kvRows*s.d, 1)
	inst.dO = randVec(r, totalQ*s.hq*s.d, 1)
	inst.dLSE = randVec(r, totalQ*s.hq, 1)
	return inst
}

// toF32 converts a float64 slice to float32.
func toF32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// run32 runs the float32 Forward and Backward of inst on a pool of n
// workers (dLSE is passed when withLSE).
func run32(t testing.TB, inst *instance, n int, withLSE bool) (o, lse, dq, dk, dv []float32) {
	t.Helper()
	pool := attn.NewPool(n)
	defer pool.Close()
	ws := NewWorkspace(pool)
	p := inst.p
	q, k, v, dO := toF32(inst.q), toF32(inst.k), toF32(inst.v), toF32(inst.dO)
	var dLSE []float32
	if withLSE {
		dLSE = toF32(inst.dLSE)
	}
	o = make([]float32, len(q))
	lse = make([]float32, p.TotalQ*p.HQ)
	if err := ws.Forward(p, q, k, v, o, lse); err != nil {
		t.Fatal(err)
	}
	dq = make([]float32, len(q))
	dk, dv = make([]float32, len(k)), make([]float32, len(v))
	for i := range dk { // garbage that Backward must overwrite
		dk[i], dv[i] = float32(math.NaN()), 7
	}
	if err := ws.Backward(p, q, k, v, o, lse, dO, dLSE, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	return o, lse, dq, dk, dv
}

// errStat is the largest error of got against want, relative to the
// largest |want| (a norm-wise relative error, robust for gradients that
// cancel to near zero).
func errStat(got []float32, want []float64) (maxAbs, rel float64) {
	var norm float64
	for _, w := range want {
		norm = max(norm, math.Abs(w))
	}
	for i, w := range want {
		g := float64(got[i])
		if math.IsInf(w, -1) && math.IsInf(g, -1) {
			continue
		}
		maxAbs = max(maxAbs, math.Abs(g-w))
		if math.IsNaN(g) || math.IsInf(g, 0) {
			maxAbs = math.Inf(1)
		}
	}
	if norm == 0 {
		return maxAbs, maxAbs
	}
	return maxAbs, maxAbs / norm
}
