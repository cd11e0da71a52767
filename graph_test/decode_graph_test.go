package graphtest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestDecodeLoopGraph runs a multi-layer decode loop in one TapeMachine (and
// again in a LispMachine), with BF16 and with float32 q, k, v:
// one DecodeSchedule node shared by every layer's DecodeAttention node,
// several steps, seqused_k growing each step through gorgonia.Let. Every
// layer's output and LSE must equal the eager DecodeAttentionFunc.
func TestDecodeLoopGraph(t *testing.T) {
	for _, machine := range []string{"tape", "lisp"} {
		for _, dt := range []tensor.Dtype{op.BFloat16, tensor.Float32} {
			t.Run(machine+"/"+dt.String(), func(t *testing.T) { decodeLoop(t, machine, dt) })
		}
	}
}

// randOf returns a random tensor of dtype dt: BFloat16 or float32.
func randOf(rng *rand.Rand, dt tensor.Dtype, shape ...int) *tensor.Dense {
	x := randBF16(rng, shape...)
	if dt != tensor.Float32 {
		return x
	}
	src := x.Data().([]lowp.BFloat16)
	data := make([]float32, len(src))
	for i, b := range src {
		data[i] = b.Float32() + float32(rng.NormFloat64())*0x1p-10 // below BF16's spacing
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
}

func decodeLoop(t *testing.T, machine string, dt tensor.Dtype) {
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
		l.q = randOf(rng, dt, batch*seqlenQ, hq, d)
		l.k = randOf(rng, dt, numPages, hkv, pageSize, d)
		l.v = randOf(rng, dt, numPages, hkv, pageSize, d)
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
			ls[i].q = randOf(rng, dt, batch*seqlenQ, hq, d)
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
			if o := l.out.Value().(*tensor.Dense); o.Dtype() != dt { // Out keeps q's dtype (BF16 or float32)
				t.Fatalf("decode out dtype %v for %v q, k, v", o.Dtype(), dt)
			}
			if step == steps-1 && i == 0 {
				if o := l.out.Value().(*tensor.Dense).Header.Raw; !slices.ContainsFunc(o[:8], func(b byte) bool { return b != 0 }) {
					t.Fatal("decode output is zero")
				}
			}
		}
		m = resetMachine(g, m, machine)
	}
}
