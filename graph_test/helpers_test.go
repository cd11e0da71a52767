package graphtest

import (
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// randBF16 returns a BF16 tensor of the given shape with N(0,1) values.
func randBF16(rng *rand.Rand, shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	data := make([]lowp.BFloat16, n)
	for i := range data {
		data[i] = lowp.BF16(float32(rng.NormFloat64()))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
}

// i32 returns an int32 tensor.
func i32(shape []int, v []int32) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// input adds an input node holding t.
func input(g *G.ExprGraph, name string, t *tensor.Dense) *G.Node {
	n := G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name))
	if err := G.Let(n, t); err != nil {
		panic(err)
	}
	return n
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sameBits fails unless a and b have identical storage bytes.
func sameBits(t testing.TB, what string, a, b *tensor.Dense) {
	t.Helper()
	if !a.Shape().Eq(b.Shape()) {
		t.Fatalf("%s: shape %v vs %v", what, a.Shape(), b.Shape())
	}
	ra, rb := a.Header.Raw, b.Header.Raw
	if len(ra) != len(rb) {
		t.Fatalf("%s: %d vs %d bytes", what, len(ra), len(rb))
	}
	for i := range ra {
		if ra[i] != rb[i] {
			t.Fatalf("%s: differs at byte %d", what, i)
		}
	}
}

// randQ2K returns q2k_indices [hkv][totalQ][topK] with distinct random
// blocks per list (-1 padded) for sequences of the given lengths.
func randQ2K(rng *rand.Rand, hkv, topK, blk int, seqQ, seqK []int) []int32 {
	totalQ := 0
	for _, n := range seqQ {
		totalQ += n
	}
	out := make([]int32, hkv*totalQ*topK)
	for i := range out {
		out[i] = -1
	}
	for h := 0; h < hkv; h++ {
		gq := 0
		for b := range seqQ {
			nb := (seqK[b] + blk - 1) / blk
			for i := 0; i < seqQ[b]; i++ {
				list := out[(h*totalQ+gq)*topK : (h*totalQ+gq+1)*topK]
				n := min(nb, topK)
				for k, j := range rng.Perm(nb)[:n] {
					list[k] = int32(j)
				}
				gq++
			}
		}
	}
	return out
}

func prefix(lens []int) []int32 {
	cu := make([]int32, len(lens)+1)
	for i, n := range lens {
		cu[i+1] = cu[i] + int32(n)
	}
	return cu
}

// newMachine returns a TapeMachine ("tape") or a forward-only LispMachine
// ("lisp") for g.
func newMachine(g *G.ExprGraph, kind string) G.VM {
	if kind == "tape" {
		return G.NewTapeMachine(g)
	}
	return G.NewLispMachine(g, G.ExecuteFwdOnly())
}

// resetMachine prepares m for another run. A TapeMachine is Reset. A
// LispMachine is replaced: in gorgonia v0.9.18 lispMachine.Reset moves the
// forward cursor to the last node while RunAll walks forward from it, so
// after Reset only the final node would run again and every other node
// would keep its stale value.
func resetMachine(g *G.ExprGraph, m G.VM, kind string) G.VM {
	if kind == "tape" {
		m.Reset()
		return m
	}
	m.Close()
	return newMachine(g, kind)
}
