package graphtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestDecodeLoopGraph runs a multi-layer decode loop in one TapeMachine (and
// again in a LispMachine):
// one DecodeSchedule node shared by every layer's DecodeAttention node,
// several steps, seqused_k growing each step through gorgonia.Let. Every
// layer's output and LSE must equal the eager DecodeAttentionFunc.
func TestDecodeLoopGraph(t *testing.T) {
	for _, machine := range []string{"tape", "lisp"} {
		t.Run(machine, func(t *testing.T) { decodeLoop(t, machine) })
	}
}

func decodeLoop(t *testing.T, machine string) {
	rng := rand.New(rand.NewPCG(4, 4))
	const (
		batch, seqlenQ, hq, hkv, d, pageSize, layers, steps = 3, 2, 8, 2, 64, 16, 3, 4
		cols                                                = 12
	)
	numPages := batch * cols
	pt := make([]int32, batch*cols)
	for i, p := range rng.Perm(numPages) {
		pt[i] = int32(p)
	}
	used := []int32{20, 1, 100}
	ptT := i32([]int{batch, cols}, pt)
	usedT := i32([]int{batch}, append([]int32{}, used...))

	g := G.NewGraph()
	ptN := input(g, "page_table", ptT)
	usedN := input(g, "seqused_k", usedT)
	sched, err := op.DecodeSchedule(ptN, usedN, op.Heads(hq, hkv), op.PageSize(pageSize), op.SeqlenQ(seqlenQ), op.Workers(2), op.FixedSplitSize(2))
	must(t, err)
	type layer struct {
		q, k, v      *tensor.Dense
		qn, out, lse *G.Node
	}
	ls := make([]layer, layers)
	for i := range ls {
		l := &ls[i]
		l.q = randBF16(rng, batch*seqlenQ, hq, d)
		l.k = randBF16(rng, numPages, hkv, pageSize, d)
		l.v = randBF16(rng, numPages, hkv, pageSize, d)
		// Input names must be unique: Gorgonia merges input nodes with the
		// same name, type and shape into one.
		l.qn = input(g, fmt.Sprintf("q%d", i), l.q)
		kn, vn := input(g, fmt.Sprintf("k%d", i), l.k), input(g, fmt.Sprintf("v%d", i), l.v)
		out, err := op.DecodeAttention(l.qn, kn, vn, ptN, usedN, sched, nil)
		must(t, err)
		l.out = out
		l.lse, err = op.LSE(out)
		must(t, err)
	}
	m := newMachine(g, machine)
	defer func() { m.Close() }()
	for step := 0; step < steps; step++ {
		for b := range used {
			used[b] += int32(1 + step*7) // the cache grows by this step's tokens
		}
		must(t, G.Let(usedN, i32([]int{batch}, append([]int32{}, used...))))
		for i := range ls { // new queries every step
			ls[i].q = randBF16(rng, batch*seqlenQ, hq, d)
			must(t, G.Let(ls[i].qn, ls[i].q))
		}
		must(t, m.RunAll())
		for i, l := range ls {
			want, err := op.DecodeAttentionFunc(l.q, l.k, l.v, nil, op.DecodeArgs{
				PageTable: ptT, SeqUsedK: i32([]int{batch}, append([]int32{}, used...)), SeqlenQ: seqlenQ,
				MaxSeqlenK: cols * pageSize, Workers: 2, FixedSplitSize: 2})
			must(t, err)
			sameBits(t, "decode out", l.out.Value().(*tensor.Dense), want.Out)
			sameBits(t, "decode lse", l.lse.Value().(*tensor.Dense), want.LSE)
			if step == steps-1 && i == 0 {
				o := l.out.Value().(*tensor.Dense).Data().([]lowp.BFloat16)
				if o[0] == 0 && o[1] == 0 {
					t.Fatal("decode output is zero")
				}
			}
		}
		m = resetMachine(g, m, machine)
	}
}
