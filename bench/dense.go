package main

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The dense baseline is ordinary attention written with Gorgonia's own ops
// on float32 and run by a TapeMachine, for one (query group, KV head) at a
// time:
//
//	S = (Q * scale) x K^T      G.Mul (scalar), G.Transpose, G.Mul (matmul)
//	S = S + M                  G.Add, M = 0 / -Inf causal mask (prefill only)
//	P = exp(S - max_row S)     G.Max, G.BroadcastSub, G.Exp
//	P = P / sum_row P          G.Sum, G.BroadcastHadamardDiv
//	O = P x V                  G.Mul (matmul)
//
// It computes every (query, key) product, masked or not: O(T^2) time and
// memory per head.

type denseGraph struct {
	g       *G.ExprGraph
	q, k, v *G.Node
	out     *G.Node
	vm      G.VM
}

func newDenseGraph(m, n, d int, causal bool, scale float64) (dg *denseGraph, err error) {
	defer func() {
		if e := recover(); e != nil {
			err = fmt.Errorf("building the Gorgonia dense graph: %v", e)
		}
	}()
	g := G.NewGraph()
	q := G.NewMatrix(g, tensor.Float32, G.WithShape(m, d), G.WithName("q"))
	k := G.NewMatrix(g, tensor.Float32, G.WithShape(n, d), G.WithName("k"))
	v := G.NewMatrix(g, tensor.Float32, G.WithShape(n, d), G.WithName("v"))
	qs := G.Must(G.Mul(q, G.NewConstant(float32(scale), G.WithName("scale"))))
	s := G.Must(G.Mul(qs, G.Must(G.Transpose(k))))
	if causal {
		// Bottom-right aligned: query i sees keys t <= i + n - m.
		mk := make([]float32, m*n)
		neg := float32(math.Inf(-1))
		for i := 0; i < m; i++ {
			for t := i + n - m + 1; t < n; t++ {
				mk[i*n+t] = neg
			}
		}
		mask := G.NewMatrix(g, tensor.Float32, G.WithShape(m, n), G.WithName("mask"),
			G.WithValue(tensor.New(tensor.WithShape(m, n), tensor.WithBacking(mk))))
		s = G.Must(G.Add(s, mask))
	}
	mx := G.Must(G.Max(s, 1))
	e := G.Must(G.Exp(G.Must(G.BroadcastSub(s, mx, nil, []byte{1}))))
	z := G.Must(G.Sum(e, 1))
	p := G.Must(G.BroadcastHadamardDiv(e, z, nil, []byte{1}))
	out := G.Must(G.Mul(p, v))
	return &denseGraph{g: g, q: q, k: k, v: v, out: out, vm: G.NewTapeMachine(g)}, nil
}

func (dg *denseGraph) run(q, k, v *tensor.Dense) error {
	for _, b := range []struct {
		n *G.Node
		t *tensor.Dense
	}{{dg.q, q}, {dg.k, k}, {dg.v, v}} {
		if err := G.Let(b.n, b.t); err != nil {
			return err
		}
	}
	err := dg.vm.RunAll()
	dg.vm.Reset()
	return err
}

func (dg *denseGraph) output() []float32 { return dg.out.Value().Data().([]float32) }

func (dg *denseGraph) close() { dg.vm.Close() }

// f32Matrix decodes rows (via row(i)) into a float32 [len, d] tensor.
func f32Matrix(n, d int, row func(i int) []float64) *tensor.Dense {
	s := make([]float32, n*d)
	for i := 0; i < n; i++ {
		for c, x := range row(i) {
			s[i*d+c] = float32(x)
		}
	}
	return tensor.New(tensor.WithShape(n, d), tensor.WithBacking(s))
}

// denseEntry is a cached baseline measurement.
type denseEntry struct {
	perUnitMS float64 // one head (prefill) or one request's KV head (decode)
	verify    string
	detail    string
	err       error
}

// denseForPrefill times the Gorgonia baseline on cfg.denseHeads query
// heads at Tm = min(T, cfg.denseMax) tokens (the case's own data, first Tm
// tokens) and extrapolates: dense_ms = ms_per_head(Tm) * Hq * (T/Tm)^2.
func denseForPrefill(cfg *config, p *prefillProb, r *result) error {
	if cfg.noDense {
		r.denseNote = "dense baseline off (-dense=false)"
		return nil
	}
	c := p.cs
	T, hq, hkv, d := c.SeqLen, c.HQ, c.HKV, c.D
	tm := min(T, cfg.denseMax)
	nh := min(cfg.denseHeads, hq)
	key := fmt.Sprintf("prefill/%d/%d/%d", tm, nh, d)
	e, ok := cfg.denseCache[key]
	if !ok {
		e = &denseEntry{}
		cfg.denseCache[key] = e
		dg, err := newDenseGraph(tm, tm, d, true, 1/math.Sqrt(float64(d)))
		if err != nil {
			e.err = err
		} else {
			defer dg.close()
			qs := make([]*tensor.Dense, nh)
			for i := range qs {
				qs[i] = f32Matrix(tm, d, func(t int) []float64 { return p.qRows.row(t*hq+i, d) })
			}
			kvh := func(i int) int { return i / (hq / hkv) }
			ks := map[int][2]*tensor.Dense{}
			for i := 0; i < nh; i++ {
				h := kvh(i)
				if _, ok := ks[h]; !ok {
					ks[h] = [2]*tensor.Dense{
						f32Matrix(tm, d, func(t int) []float64 { return p.kRows.row(t*hkv+h, d) }),
						f32Matrix(tm, d, func(t int) []float64 { return p.vRows.row(t*hkv+h, d) }),
					}
				}
			}
			med, _, _, err := timeIt(cfg.denseMinTime, minReps, 20, func() error {
				for i := 0; i < nh; i++ {
					if err := dg.run(qs[i], ks[kvh(i)][0], ks[kvh(i)][1]); err != nil {
						return err
					}
				}
				return nil
			}, nil)
			e.err = err
			e.perUnitMS = ms(med) / float64(nh)
			if err == nil && cfg.verify {
				// The last run left head nh-1's output in the graph.
				i := nh - 1
				h := kvh(i)
				ck := &checker{tol: tolerance{rtol: 1e-3, atol: 1e-4}}
				out := dg.output()
				for _, qi := range sampleRows(tm, 8, c.Blk, 99) {
					var keys, vals [][]float64
					for t := 0; t <= qi; t++ {
						keys = append(keys, p.kRows.row(t*hkv+h, d))
						vals = append(vals, p.vRows.row(t*hkv+h, d))
					}
					want := refAttention(p.qRows.row(qi*hq+i, d), keys, vals, 1/math.Sqrt(float64(d)))
					ck.row(fmt.Sprintf("dense O[q=%d, h=%d]", qi, i), out[qi*d:(qi+1)*d], want, maxAbs(vals))
				}
				e.verify, e.detail = ck.verdict()
			}
		}
	}
	if e.err != nil {
		r.denseNote = "dense baseline failed: " + e.err.Error()
		return nil
	}
	scale := float64(hq) * float64(T) / float64(tm) * float64(T) / float64(tm)
	r.denseMS = e.perUnitMS * scale
	r.denseExtrap = tm != T
	r.denseVerify, r.denseVerifyDetail = e.verify, e.detail
	switch {
	case tm == T && nh == hq:
		r.denseNote = fmt.Sprintf("Gorgonia dense: all %d heads measured at T=%d", hq, T)
	case tm == T:
		r.denseNote = fmt.Sprintf("Gorgonia dense: %d of %d heads measured at T=%d, scaled x%d/%d heads", nh, hq, T, hq, nh)
	default:
		r.denseNote = fmt.Sprintf("Gorgonia dense: %d of %d heads measured at T=%d, scaled x%d/%d heads, extrapolated x(%d/%d)^2", nh, hq, tm, hq, nh, T, tm)
	}
	return nil
}

// denseForDecode times the Gorgonia baseline on the first cfg.denseReqs
// requests (each KV head: its query group [Hq/Hkv, D] against the request's
// T keys, gathered from the pages into float32 outside the timing) and
// scales by B / measured requests.
func denseForDecode(cfg *config, p *decodeProb, r *result) error {
	if cfg.noDense {
		r.denseNote = "dense baseline off (-dense=false)"
		return nil
	}
	c := p.cs
	B, T, hq, hkv, d := c.Batch, c.SeqLen, c.HQ, c.HKV, c.D
	qpk := hq / hkv
	nb := min(B, cfg.denseReqs)
	key := fmt.Sprintf("decode/%d/%d/%d/%d", T, qpk, d, nb)
	e, ok := cfg.denseCache[key]
	if !ok {
		e = &denseEntry{}
		cfg.denseCache[key] = e
		dg, err := newDenseGraph(qpk, T, d, false, 1/math.Sqrt(float64(d)))
		if err != nil {
			e.err = err
		} else {
			defer dg.close()
			type in struct{ q, k, v *tensor.Dense }
			var ins []in
			for b := 0; b < nb; b++ {
				for h := 0; h < hkv; h++ {
					ins = append(ins, in{
						f32Matrix(qpk, d, func(i int) []float64 { return p.qRows.row(b*hq+h*qpk+i, d) }),
						f32Matrix(T, d, func(t int) []float64 { return p.kRows.row(p.kvRow(b, h, t), d) }),
						f32Matrix(T, d, func(t int) []float64 { return p.vRows.row(p.kvRow(b, h, t), d) }),
					})
				}
			}
			med, _, _, err := timeIt(cfg.denseMinTime, minReps, 50, func() error {
				for _, x := range ins {
					if err := dg.run(x.q, x.k, x.v); err != nil {
						return err
					}
				}
				return nil
			}, nil)
			e.err = err
			e.perUnitMS = ms(med) / float64(len(ins))
			if err == nil && cfg.verify {
				b, h := nb-1, hkv-1
				var keys, vals [][]float64
				for t := 0; t < T; t++ {
					keys = append(keys, p.kRows.row(p.kvRow(b, h, t), d))
					vals = append(vals, p.vRows.row(p.kvRow(b, h, t), d))
				}
				ck := &checker{tol: tolerance{rtol: 1e-3, atol: 1e-4}}
				out := dg.output()
				for i := 0; i < qpk; i++ {
					want := refAttention(p.qRows.row(b*hq+h*qpk+i, d), keys, vals, 1/math.Sqrt(float64(d)))
					ck.row(fmt.Sprintf("dense O[b=%d, h=%d]", b, h*qpk+i), out[i*d:(i+1)*d], want, maxAbs(vals))
				}
				e.verify, e.detail = ck.verdict()
			}
		}
	}
	if e.err != nil {
		r.denseNote = "dense baseline failed: " + e.err.Error()
		return nil
	}
	r.denseMS = e.perUnitMS * float64(B*hkv)
	r.denseVerify, r.denseVerifyDetail = e.verify, e.detail
	if nb == B {
		r.denseNote = fmt.Sprintf("Gorgonia dense: all %d requests measured (float32 K/V)", B)
	} else {
		r.denseNote = fmt.Sprintf("Gorgonia dense: %d of %d requests measured (float32 K/V), scaled x%d/%d", nb, B, B, nb)
	}
	return nil
}
