package graphtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// cudaBlock is the attention part of a transformer block (prefill and one
// decode step) as one graph: q2k -> K2QCSR -> FwdSchedule -> SparseAttention
// (+ LSE), and page table / seqused_k -> DecodeSchedule -> DecodeAttention
// (+ LSE) -> CastFromBF16. The projections are inputs: Gorgonia's G.Mul on
// its CUDA machine calls cuBLAS (cublasSgemm_v2), which a driver-only
// machine does not have (see kernels/cuda/tagged_build.sh, test shims).
type cudaBlock struct {
	g                            *G.ExprGraph
	out, lse, dout, dlse, dout32 *G.Node
}

// Shapes: prefill of 3 sequences (one empty), GQA 4, D 128, blocks of 64
// keys, topK 4; decode of 3 requests of 5000, 300 and 2100 tokens in pages
// of 64, GQA 8 (with PlanForCUDA the longest request is split so that
// every SM has a chunk).
const (
	cbHq, cbHkv, cbD, cbBlk, cbTopK = 8, 2, 128, 64, 4
	cbDHq, cbDHkv, cbPage           = 16, 2, 64
)

var (
	cbSeqQ, cbSeqK = []int{150, 0, 90}, []int{400, 30, 90}
	cbCtx          = []int32{5000, 300, 2100}
)

type cbInputs struct {
	q, k, v, q2k, cuQ, cuK *tensor.Dense
	dq, kc, vc, pt, su     *tensor.Dense
}

func newCBInputs(seed uint64) cbInputs {
	rng := rand.New(rand.NewPCG(seed, 9))
	totalQ, totalK := 240, 520
	in := cbInputs{
		q: randBF16(rng, totalQ, cbHq, cbD), k: randBF16(rng, totalK, cbHkv, cbD), v: randBF16(rng, totalK, cbHkv, cbD),
		q2k: i32([]int{cbHkv, totalQ, cbTopK}, randQ2K(rng, cbHkv, cbTopK, cbBlk, cbSeqQ, cbSeqK)),
		cuQ: i32([]int{4}, prefix(cbSeqQ)), cuK: i32([]int{4}, prefix(cbSeqK)),
	}
	cols := 0
	for _, c := range cbCtx {
		cols = max(cols, (int(c)+cbPage-1)/cbPage)
	}
	pages := len(cbCtx)*cols + 1
	perm := rng.Perm(pages)
	pt := make([]int32, len(cbCtx)*cols)
	for i := range pt {
		pt[i] = int32(perm[i])
	}
	in.dq = randBF16(rng, len(cbCtx), cbDHq, cbD)
	in.kc, in.vc = randBF16(rng, pages, cbDHkv, cbPage, cbD), randBF16(rng, pages, cbDHkv, cbPage, cbD)
	in.pt, in.su = i32([]int{len(cbCtx), cols}, pt), i32([]int{len(cbCtx)}, append([]int32(nil), cbCtx...))
	return in
}

// buildCUDABlock builds the block; sms > 0 plans the decode for the CUDA
// path of a GPU with that many SMs, 0 for the CPU path.
func buildCUDABlock(t *testing.T, in cbInputs, sms int) *cudaBlock {
	b := &cudaBlock{g: G.NewGraph()}
	g := b.g
	qn, kn, vn := input(g, "q", in.q), input(g, "k", in.k), input(g, "v", in.v)
	q2kn, cuQn, cuKn := input(g, "q2k", in.q2k), input(g, "cu_q", in.cuQ), input(g, "cu_k", in.cuK)
	csr, err := op.K2QCSR(q2kn, cuQn, cuKn, op.BlkKV(cbBlk), op.MaxSeqlenK(400))
	must(t, err)
	sched, err := op.FwdSchedule(csr, cuQn, cuKn, op.QheadPerKV(cbHq/cbHkv), op.Workers(2))
	must(t, err)
	b.out, err = op.SparseAttention(qn, kn, vn, csr, sched, cuQn, cuKn, op.Causal(), op.Workers(2))
	must(t, err)
	b.lse, err = op.LSE(b.out)
	must(t, err)

	dqn, kcn, vcn := input(g, "dq", in.dq), input(g, "kc", in.kc), input(g, "vc", in.vc)
	ptn, sun := input(g, "pt", in.pt), input(g, "su", in.su)
	plan := op.Workers(2)
	if sms > 0 {
		plan = op.PlanForCUDA(sms)
	}
	ds, err := op.DecodeSchedule(ptn, sun, op.Heads(cbDHq, cbDHkv), op.PageSize(cbPage), plan)
	must(t, err)
	b.dout, err = op.DecodeAttention(dqn, kcn, vcn, ptn, sun, ds, nil)
	must(t, err)
	b.dlse, err = op.LSE(b.dout)
	must(t, err)
	b.dout32, err = op.CastFromBF16(b.dout)
	must(t, err)
	return b
}

// runOnHost runs every op node's CPU Do in topological order (the CPU
// graph: a TapeMachine under the cuda tag would place the ops on the GPU)
// and returns the node values.
func runOnHost(g *G.ExprGraph) (map[*G.Node]G.Value, error) {
	sorted, err := G.Sort(g)
	if err != nil {
		return nil, err
	}
	vals := map[*G.Node]G.Value{}
	for i := len(sorted) - 1; i >= 0; i-- {
		n := sorted[i]
		if n.Op() == nil { // an input node
			vals[n] = n.Value()
			continue
		}
		var args []G.Value
		for it := g.From(n.ID()); it.Next(); { // the children, in argument order
			c := it.Node().(*G.Node)
			v, ok := vals[c]
			if !ok {
				return nil, fmt.Errorf("node %v: input %v not computed", n, c)
			}
			args = append(args, v)
		}
		if vals[n], err = n.Op().Do(args...); err != nil {
			return nil, fmt.Errorf("node %v: %w", n, err)
		}
	}
	return vals, nil
}
