package graphtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradCase is one attention problem for the gradient tests: float32 q, k,
// v (dense or paged with a shuffled page table and a page shared by two
// sequences), a q2k selection and a fixed dO (the loss is sum(O * W)).
type gradCase struct {
	name                  string
	seqQ, seqK            []int
	hq, hkv, d, topK, blk int
	causal, paged         bool
	q, k, v, w            *tensor.Dense
	q2k, cuQ, cuK         *tensor.Dense
	pageTable, seqused    *tensor.Dense
}

// newGradCase draws the data of a case.
func newGradCase(rng *rand.Rand, name string, seqQ, seqK []int, hq, hkv, d, topK, blk int, causal, paged bool) *gradCase {
	c := &gradCase{name: name, seqQ: seqQ, seqK: seqK, hq: hq, hkv: hkv, d: d, topK: topK, blk: blk, causal: causal, paged: paged}
	totalQ := 0
	for _, n := range seqQ {
		totalQ += n
	}
	c.q = f32([]int{totalQ, hq, d}, randF32(rng, totalQ*hq*d, 1))
	c.w = f32([]int{totalQ, hq, d}, randF32(rng, totalQ*hq*d, 1))
	c.q2k = i32([]int{hkv, totalQ, topK}, randQ2K(rng, hkv, topK, blk, seqQ, seqK))
	c.cuQ = i32([]int{len(seqQ) + 1}, prefix(seqQ))
	c.cuK = i32([]int{len(seqK) + 1}, prefix(seqK))
	if !paged {
		totalK := int(prefix(seqK)[len(seqK)])
		c.k = f32([]int{totalK, hkv, d}, randF32(rng, totalK*hkv*d, 1))
		c.v = f32([]int{totalK, hkv, d}, randF32(rng, totalK*hkv*d, 1))
		return c
	}
	cols := 0
	for _, n := range seqK {
		cols = max(cols, (n+blk-1)/blk)
	}
	pages := len(seqK)*cols + 1
	perm := rng.Perm(pages)
	pt := make([]int32, len(seqK)*cols)
	for i := range pt {
		pt[i] = int32(perm[i])
	}
	pt[cols] = pt[0] // sequence 1 shares sequence 0's first page
	c.pageTable = i32([]int{len(seqK), cols}, pt)
	c.k = f32([]int{pages, hkv, blk, d}, randF32(rng, pages*hkv*blk*d, 1))
	c.v = f32([]int{pages, hkv, blk, d}, randF32(rng, pages*hkv*blk*d, 1))
	return c
}

// withSeqused gives a paged case seqused_k = its key lengths (shorter than
// the page table's capacity, so the last used page is partly beyond it).
func withSeqused(c *gradCase) *gradCase {
	su := make([]int32, len(c.seqK))
	for b, n := range c.seqK {
		su[b] = int32(n)
	}
	c.seqused = i32([]int{len(su)}, su)
	return c
}

// maxSeqK returns the longest key sequence.
func (c *gradCase) maxSeqK() int {
	m := 1
	for _, n := range c.seqK {
		m = max(m, n)
	}
	return m
}

// eager returns the eager gradients of sum(O * W).
func (c *gradCase) eager(t *testing.T) *op.Gradients { return c.eagerLSE(t, nil, true) }

// eagerLSE returns the eager gradients of sum(O * W) + sum(LSE * wl)
// (withO false: of sum(LSE * wl) alone, dOut = 0; wl nil: no LSE term).
func (c *gradCase) eagerLSE(t *testing.T, wl *tensor.Dense, withO bool) *op.Gradients {
	t.Helper()
	rp, qi, err := op.K2QCSRFunc(c.q2k, c.cuQ, c.cuK, c.blk)
	must(t, err)
	args := op.SparseArgs{CuSeqlensQ: c.cuQ, CuSeqlensK: c.cuK, BlkKV: c.blk, Causal: c.causal,
		Workers: 2}
	if c.paged {
		args.PageTable, args.SeqUsedK = c.pageTable, c.seqused
	}
	res, err := op.SparseAttentionFunc(c.q, c.k, c.v, rp, qi, c.topK, args)
	must(t, err)
	dOut := c.w
	if !withO {
		dOut = f32(c.w.Shape(), make([]float32, c.w.Shape().TotalSize()))
	}
	var dLSE tensor.Tensor // nil interface, not a typed nil, when wl is nil
	if wl != nil {
		dLSE = wl
	}
	gr, err := op.SparseAttentionBackwardFunc(c.q, c.k, c.v, res.Out, res.LSE, dOut, dLSE, rp, qi, c.topK, args)
	must(t, err)
	return gr
}

// graph builds cost = sum(SparseAttention(q, k, v) * W) with q, k, v as
// float32 variables (cast to BFloat16 around the attention when bf16).
func (c *gradCase) graph(t *testing.T, bf16 bool) (g *G.ExprGraph, cost *G.Node, qkv G.Nodes) {
	t.Helper()
	g = G.NewGraph()
	q := G.NewTensor(g, tensor.Float32, 3, G.WithShape(c.q.Shape()...), G.WithName("q"), G.WithValue(c.q.Clone()))
	k := G.NewTensor(g, tensor.Float32, c.k.Dims(), G.WithShape(c.k.Shape()...), G.WithName("k"), G.WithValue(c.k.Clone()))
	v := G.NewTensor(g, tensor.Float32, c.v.Dims(), G.WithShape(c.v.Shape()...), G.WithName("v"), G.WithValue(c.v.Clone()))
	w := G.NewConstant(c.w.Clone(), G.WithName("w"))
	q2k, cuQ, cuK := input(g, "q2k", c.q2k), input(g, "cu_q", c.cuQ), input(g, "cu_k", c.cuK)
	csr, err := op.K2QCSR(q2k, cuQ, cuK, op.BlkKV(c.blk), op.MaxSeqlenK(c.maxSeqK()))
	must(t, err)
	sched, err := op.FwdSchedule(csr, cuQ, cuK, op.QheadPerKV(c.hq/c.hkv), op.Workers(2))
	must(t, err)
	opts := []op.Option{op.Workers(2)}
	if c.causal {
		opts = append(opts, op.Causal())
	}
	if c.paged {
		var su *G.Node
		if c.seqused != nil {
			su = input(g, "seqused_k", c.seqused)
		}
		opts = append(opts, op.Paged(input(g, "page_table", c.pageTable), su))
	}
	aq, ak, av := q, k, v
	if bf16 {
		aq, err = op.CastToBF16(q)
		must(t, err)
		ak, err = op.CastToBF16(k)
		must(t, err)
		av, err = op.CastToBF16(v)
		must(t, err)
	}
	out, err := op.SparseAttention(aq, ak, av, csr, sched, cuQ, cuK, opts...)
	must(t, err)
	if bf16 {
		out, err = op.CastFromBF16(out)
		must(t, err)
	}
	prod, err := G.HadamardProd(out, w)
	must(t, err)
	cost, err = G.Sum(prod)
	must(t, err)
	return g, cost, G.Nodes{q, k, v}
}

// gradCases are the graph gradient problems: ragged batches with an
// empty sequence, GQA 1 and 4, causal and not, dense and paged.
func gradCases() []*gradCase {
	rng := rand.New(rand.NewPCG(13, 17))
	return []*gradCase{
		newGradCase(rng, "dense_causal_g4", []int{40, 0, 25}, []int{70, 9, 50}, 8, 2, 16, 3, 16, true, false),
		newGradCase(rng, "dense_g1", []int{33, 20}, []int{64, 40}, 2, 2, 8, 2, 8, false, false),
		newGradCase(rng, "paged_causal_g2", []int{30, 17}, []int{64, 48}, 4, 2, 16, 2, 16, true, true),
		withSeqused(newGradCase(rng, "paged_seqused_g4", []int{20, 0, 11}, []int{45, 3, 30}, 4, 1, 32, 3, 16, false, true)),
	}
}

// gradValues returns the float32 gradients of nodes.
func gradValues(t *testing.T, nodes G.Nodes) [][]float32 {
	t.Helper()
	out := make([][]float32, len(nodes))
	for i, n := range nodes {
		gv, err := n.Grad()
		must(t, err)
		out[i] = append([]float32(nil), gv.(*tensor.Dense).Data().([]float32)...)
	}
	return out
}

// TestTrainGradMatchesEager checks that G.Grad + TapeMachine and a
// LispMachine's backprop give exactly the eager backward's dQ, dK, dV
// (same kernels, same worker count: bit-identical), for dense and paged
// K/V (a shared page accumulates both sequences' gradients).
func TestTrainGradMatchesEager(t *testing.T) {
	for _, c := range gradCases() {
		want := c.eager(t)
		wants := []*tensor.Dense{want.DQ, want.DK, want.DV}
		for _, machine := range []string{"tape", "lisp"} {
			t.Run(c.name+"/"+machine, func(t *testing.T) {
				g, cost, qkv := c.graph(t, false)
				m := gradMachine(t, machine, g, cost, qkv)
				defer m.Close()
				for run := 0; run < 2; run++ { // a second run must not accumulate stale state
					must(t, m.RunAll())
					got := gradValues(t, qkv)
					for i, name := range []string{"dQ", "dK", "dV"} {
						w := wants[i].Data().([]float32)
						for j := range w {
							if math.Float32bits(w[j]) != math.Float32bits(got[i][j]) {
								t.Fatalf("run %d: %s[%d] = %v, eager %v", run, name, j, got[i][j], w[j])
							}
						}
					}
					if machine == "lisp" {
						m.Close()
						g, cost, qkv = c.graph(t, false)
						_ = cost
						m = G.NewLispMachine(g)
					} else {
						m.Reset()
						for _, n := range qkv { // what a solver's Step does
							gv, err := n.Grad()
							must(t, err)
							gv.(*tensor.Dense).Zero()
						}
					}
				}
			})
		}
	}
}

// TestTrainGradBF16StraightThrough differentiates through CastToBF16 ->
// BFloat16 SparseAttention -> CastFromBF16 (straight-through casts) with
// both machines; the gradients match the float32 eager backward within
// BF16 rounding (1e-2 of the largest gradient).
func TestTrainGradBF16StraightThrough(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	c := newGradCase(rng, "bf16", []int{40, 0, 25}, []int{70, 9, 50}, 4, 2, 64, 3, 16, true, false)
	want := c.eager(t)
	for _, machine := range []string{"tape", "lisp"} {
		t.Run(machine, func(t *testing.T) {
			g, cost, qkv := c.graph(t, true)
			m := gradMachine(t, machine, g, cost, qkv)
			defer m.Close()
			must(t, m.RunAll())
			checkBF16Grads(t, want, gradValues(t, qkv))
		})
	}
}

// TestTrainGradErrors: G.Grad through a TemperatureLSE node fails with an
// *op.ForwardOnlyError naming it; an FP8 SparseAttention's SymDiff fails
// naming the op and its dtype; a LispMachine backprop through a graph whose
// LSE reaches the loss with a zero gradient succeeds and matches the eager
// backward.
func TestTrainGradErrors(t *testing.T) {
	c := gradCases()[0]
	g, cost, qkv := c.graph(t, false)
	attn := attentionNode(t, g)
	tlse, err := op.TemperatureLSE(attn)
	must(t, err)
	tCost, err := G.Sum(tlse)
	must(t, err)
	_, err = G.Grad(tCost, qkv...)
	var fo *op.ForwardOnlyError
	if err == nil || !strings.Contains(err.Error(), "op: TemperatureLSE is forward-only") { // Gorgonia's SymDiffError hides the cause
		t.Fatalf("G.Grad through TemperatureLSE: %v (want a ForwardOnlyError naming TemperatureLSE)", err)
	}

	// The LSE reaches the loss with a zero gradient (loss + 0*sum(LSE)): a
	// LispMachine differentiates every node, and must pass the LSE.
	g2, cost2, qkv2 := c.graph(t, false)
	for _, n := range g2.AllNodes() {
		if strings.HasPrefix(fmt.Sprint(n.Op()), "SparseAttention{") {
			l, err := op.LSE(n)
			must(t, err)
			ls, err := G.Sum(l)
			must(t, err)
			zero, err := G.Mul(ls, G.NewConstant(float32(0)))
			must(t, err)
			_, err = G.Add(cost2, zero)
			must(t, err)
		}
	}
	m := G.NewLispMachine(g2)
	defer m.Close()
	must(t, m.RunAll())
	got := gradValues(t, qkv2)
	want := c.eager(t)
	if w := want.DQ.Data().([]float32); math.Float32bits(w[0]) != math.Float32bits(got[0][0]) {
		t.Fatalf("lisp with an unused LSE: dQ[0] = %v, eager %v", got[0][0], w[0])
	}
	_ = cost

	// FP8 inputs: forward-only, named.
	g3 := G.NewGraph()
	e4 := func(name string, x *tensor.Dense) *G.Node {
		d, err := op.NewE4M3(x.Data().([]float32), x.Shape()...)
		must(t, err)
		return input(g3, name, d)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	q8 := e4("q", f32([]int{8, 2, 64}, randF32(rng, 8*2*64, 1)))
	k8 := e4("k", f32([]int{16, 1, 64}, randF32(rng, 16*64, 1)))
	v8 := e4("v", f32([]int{16, 1, 64}, randF32(rng, 16*64, 1)))
	q2k := input(g3, "q2k", i32([]int{1, 8, 1}, []int32{0, 0, 0, 0, 1, 1, 1, 1}))
	cu := input(g3, "cu_q", i32([]int{2}, []int32{0, 8}))
	cuk := input(g3, "cu_k", i32([]int{2}, []int32{0, 16}))
	csr, err := op.K2QCSR(q2k, cu, cuk, op.BlkKV(8), op.MaxSeqlenK(16))
	must(t, err)
	sched, err := op.FwdSchedule(csr, cu, cuk, op.QheadPerKV(2), op.Workers(1))
	must(t, err)
	out8, err := op.SparseAttention(q8, k8, v8, csr, sched, cu, cuk, op.Workers(1))
	must(t, err)
	_, err = out8.Op().(G.SDOp).SymDiff(G.Nodes{q8, k8, v8, csr, sched, cu, cuk}, out8, out8)
	if !errors.As(err, &fo) || !strings.Contains(fo.Op, "SparseAttention") || !strings.Contains(fo.Op, "float8_e4m3fn") {
		t.Fatalf("FP8 SymDiff: %v (want a ForwardOnlyError naming SparseAttention and float8)", err)
	}
}

// attentionNode returns the SparseAttention node of g.
func attentionNode(t *testing.T, g *G.ExprGraph) *G.Node {
	t.Helper()
	for _, n := range g.AllNodes() {
		if strings.HasPrefix(fmt.Sprint(n.Op()), "SparseAttention{") {
			return n
		}
	}
	t.Fatal("no attention node")
	return nil
}

// TestTrainGradThroughLSE differentiates losses that use the attention's
// LSE node: sum(O*W) + sum(LSE*WL), and 0*sum(O*W) + sum(LSE*WL), with G.Grad + TapeMachine and with a LispMachine. The
// gradients must be bit-identical to the eager backward given dOut = W (or
// zero) and dLSE = WL: the LSE's gradient reaches the same kernel call.
func TestTrainGradThroughLSE(t *testing.T) {
	for _, c := range gradCases() {
		totalQ := c.q.Shape()[0]
		rng := rand.New(rand.NewPCG(21, uint64(totalQ)))
		wl := f32([]int{totalQ, c.hq}, randF32(rng, totalQ*c.hq, 1))
		for _, withO := range []bool{true, false} {
			want := c.eagerLSE(t, wl, withO)
			for _, machine := range []string{"tape", "lisp"} {
				name := fmt.Sprintf("%s/withO=%v/%s", c.name, withO, machine)
				t.Run(name, func(t *testing.T) {
					build := func() (*G.ExprGraph, G.Nodes, *G.Node) {
						g, cost, qkv := c.graph(t, false)
						lse, err := op.LSE(attentionNode(t, g))
						must(t, err)
						prod, err := G.HadamardProd(lse, G.NewConstant(wl.Clone(), G.WithName("wl")))
						must(t, err)
						ls, err := G.Sum(prod)
						must(t, err)
						if !withO {
							// Keep sum(O*W) in the loss with weight 0: a
							// LispMachine backpropagates from every root.
							cost, err = G.Mul(cost, G.NewConstant(float32(0)))
							must(t, err)
						}
						cost, err = G.Add(cost, ls)
						must(t, err)
						return g, qkv, cost
					}
					g, qkv, cost := build()
					m := gradMachine(t, machine, g, cost, qkv)
					defer func() { m.Close() }()
					for run := 0; run < 2; run++ {
						must(t, m.RunAll())
						got := gradValues(t, qkv)
						for i, w := range []*tensor.Dense{want.DQ, want.DK, want.DV} {
							wv := w.Data().([]float32)
							for j := range wv {
								if math.Float32bits(wv[j]) != math.Float32bits(got[i][j]) {
									t.Fatalf("run %d: %s[%d] = %v, eager %v", run, []string{"dQ", "dK", "dV"}[i], j, got[i][j], wv[j])
								}
							}
						}
						if machine == "tape" {
							m.Reset()
							for _, n := range qkv {
								gv, err := n.Grad()
								must(t, err)
								gv.(*tensor.Dense).Zero()
							}
						} else {
							m.Close()
							g, qkv, _ = build()
							m = G.NewLispMachine(g)
						}
					}
				})
			}
		}
	}
}

// TestTrainGradLSEBF16 uses the LSE of a BFloat16 attention node (between
// casts) in the loss: G.Grad fails with an *op.ArgError naming the LSE and
// the dtype (the symbolic sum of O's gradients would be BFloat16, which
// Gorgonia cannot add); a LispMachine's backward, which passes the LSE
// gradient through the node's state, matches the float32 eager backward
// with dLSE within BF16 rounding (1e-2 of the largest gradient).
func TestTrainGradLSEBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	c := newGradCase(rng, "bf16", []int{40, 0, 25}, []int{70, 9, 50}, 4, 2, 64, 3, 16, true, false)
	totalQ := c.q.Shape()[0]
	ones := make([]float32, totalQ*c.hq)
	for i := range ones {
		ones[i] = 1
	}
	want := c.eagerLSE(t, f32([]int{totalQ, c.hq}, ones), true)
	build := func() (*G.ExprGraph, *G.Node, G.Nodes) {
		g, cost, qkv := c.graph(t, true)
		lse, err := op.LSE(attentionNode(t, g))
		must(t, err)
		ls, err := G.Sum(lse)
		must(t, err)
		cost, err = G.Add(cost, ls)
		must(t, err)
		return g, cost, qkv
	}
	_, cost, qkv := build()
	_, err := G.Grad(cost, qkv...)
	if err == nil || !strings.Contains(err.Error(), "LSE.SymDiff") || !strings.Contains(err.Error(), "bfloat16") {
		t.Fatalf("G.Grad through a BFloat16 LSE: %v (want an ArgError naming LSE.SymDiff and bfloat16)", err)
	}
	g, _, qkv := build()
	m := G.NewLispMachine(g)
	defer m.Close()
	must(t, m.RunAll())
	checkBF16Grads(t, want, gradValues(t, qkv))
}

// checkBF16Grads compares gradients computed through BF16 nodes with the
// float32 eager ones: BF16 rounding of q, k, v, O and the gradients
// bounds the error by a few bf16 ulps (2^-8 relative) of the largest
// gradient, so 1e-2 of it is the tolerance.
func checkBF16Grads(t *testing.T, want *op.Gradients, got [][]float32) {
	t.Helper()
	for i, w := range []*tensor.Dense{want.DQ, want.DK, want.DV} {
		wv := w.Data().([]float32)
		var norm, worst float64
		for j := range wv {
			norm = max(norm, math.Abs(float64(wv[j])))
			worst = max(worst, math.Abs(float64(wv[j]-got[i][j])))
		}
		name := []string{"dQ", "dK", "dV"}[i]
		if !(worst <= 1e-2*norm) {
			t.Errorf("%s: max error %.3g vs max |grad| %.3g", name, worst, norm)
		}
		t.Logf("%s: max error %.3g (%.2g of max |grad|)", name, worst, worst/norm)
	}
}

// gradMachine returns the machine that computes the gradients of cost with
// respect to qkv: "tape" runs G.Grad and a TapeMachine bound to their dual
// values, "lisp" a LispMachine (backprop on every run).
func gradMachine(t *testing.T, machine string, g *G.ExprGraph, cost *G.Node, qkv G.Nodes) G.VM {
	t.Helper()
	if machine == "tape" {
		_, err := G.Grad(cost, qkv...)
		must(t, err)
		return G.NewTapeMachine(g, G.BindDualValues(qkv...))
	}
	return G.NewLispMachine(g)
}
