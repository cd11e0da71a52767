package graphtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
)

// Graph benchmarks at small sizes: the same graphs as `go run ./bench`'s
// graph group (bench/graph_build.go), for `go test -bench`. CI runs them
// with -benchtime=1x so they keep compiling and passing; the bench program
// has the full sizes, the node profile and the eager comparison.
//
//	go test ./graph_test -run '^$' -bench Graph -benchmem
//
// Each reports tokens/s (prefill: T tokens per run; decode: one token per
// request per step) and, through ReportAllocs, allocations and bytes per
// run or step.

// Benchmark shapes: the model's head layout (Hq 16, Hkv 1, D 128) with a
// small d_model and short sequences.
const (
	bModel, bHq, bHkv, bD = 256, 16, 1, 128
	bBlk, bTopK, bWorkers = 128, 4, 2
)

// benchLayer builds one prefill layer over T tokens (see
// buildSparseBlock; here with the residual) and returns the graph, the
// input node and the output.
func benchLayer(b *testing.B, T int) (*G.ExprGraph, *G.Node, *G.Node) {
	rng := rand.New(rand.NewPCG(3, 3))
	dm := blockDims{bModel, bHq, bHkv, bD}
	g := G.NewGraph()
	x := input(g, "x", f32([]int{T, bModel}, randF32(rng, T*bModel, 1)))
	cu := input(g, "cu_seqlens", i32([]int{2}, []int32{0, int32(T)}))
	w := addWeights(g, "", dm, newWeights(rng, dm))
	q, err := project(x, w.wq, T, bHq, bD)
	must(b, err)
	k, err := project(x, w.wk, T, bHkv, bD)
	must(b, err)
	v, err := project(x, w.wv, T, bHkv, bD)
	must(b, err)
	scores, err := op.BlockScores(q, k, cu, cu, op.BlkKV(bBlk), op.MaxSeqlenK(T), op.Causal(), op.Workers(bWorkers))
	must(b, err)
	q2k, err := op.TopKBlocks(scores, op.TopK(bTopK), op.KeepFirst(), op.KeepLast())
	must(b, err)
	csr, err := op.K2QCSR(q2k, cu, cu, op.BlkKV(bBlk), op.MaxSeqlenK(T))
	must(b, err)
	sched, err := op.FwdSchedule(csr, cu, cu, op.QheadPerKV(bHq/bHkv), op.Workers(bWorkers))
	must(b, err)
	o, err := op.SparseAttention(q, k, v, csr, sched, cu, cu, op.Causal(), op.Workers(bWorkers))
	must(b, err)
	y, err := outProject(o, w.wo, T, bHq, bD)
	must(b, err)
	out, err := G.Add(x, y)
	must(b, err)
	return g, x, out
}

// BenchmarkGraphPrefillLayer runs one sparse-attention layer (projections,
// casts, BlockScores, TopKBlocks, K2QCSR, FwdSchedule, SparseAttention,
// output projection, residual) over 1024 tokens in a reused TapeMachine
// (Let, RunAll, Reset) and in a LispMachine (created per run, untimed:
// see resetMachine).
func BenchmarkGraphPrefillLayer(b *testing.B) {
	const T = 1024
	for _, machine := range []string{"tape", "lisp"} {
		b.Run(machine, func(b *testing.B) {
			g, x, out := benchLayer(b, T)
			// The residual add runs in place on x's tensor: let a fresh copy
			// of the input every run.
			src := randF32(rand.New(rand.NewPCG(5, 5)), T*bModel, 1)
			buf := f32([]int{T, bModel}, make([]float32, T*bModel))
			m := newMachine(g, machine)
			defer func() { m.Close() }()
			step := func() {
				copy(buf.Data().([]float32), src)
				must(b, G.Let(x, buf))
			}
			step()
			must(b, m.RunAll()) // warm-up
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				m = resetMachine(g, m, machine)
				step()
				b.StartTimer()
				must(b, m.RunAll())
			}
			b.StopTimer()
			if out.Value() == nil {
				b.Fatal("no output")
			}
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkGraphDecodeStep runs one decode step of a 2-layer model (per
// layer: projections, casts, WritePagedKV of K and V into the paged BF16
// caches, DecodeAttention, output projection, residual; one DecodeSchedule)
// for 4 requests at a 1024- and a 2048-token context (pages of 64) in a
// reused TapeMachine: per
// step, seqused_k grows by one (in place), x is let, RunAll, Reset, and
// the updated caches are let back into the cache inputs.
func BenchmarkGraphDecodeStep(b *testing.B) {
	for _, ctx := range []int{1024, 2048} {
		b.Run(fmt.Sprintf("ctx%d", ctx), func(b *testing.B) { decodeStep(b, ctx) })
	}
}

func decodeStep(b *testing.B, ctx int) {
	const (
		batch, layers, pageSize = 4, 2, 64
		maxSteps                = 256
	)
	rng := rand.New(rand.NewPCG(9, 9))
	dm := blockDims{bModel, bHq, bHkv, bD}
	cols := (ctx + maxSteps + pageSize - 1) / pageSize
	numPages := batch * cols
	pt := make([]int32, numPages)
	for i, p := range rng.Perm(numPages) {
		pt[i] = int32(p)
	}
	used := make([]int32, batch)
	usedT := i32([]int{batch}, used)
	g := G.NewGraph()
	src := randF32(rng, batch*bModel, 1)
	buf := f32([]int{batch, bModel}, make([]float32, batch*bModel))
	x0 := input(g, "x", buf)
	ptN := input(g, "page_table", i32([]int{batch, cols}, pt))
	usedN := input(g, "seqused_k", usedT)
	sched, err := op.DecodeSchedule(ptN, usedN, op.Heads(bHq, bHkv), op.PageSize(pageSize), op.SeqlenQ(1), op.Workers(bWorkers))
	must(b, err)
	cacheIn := make([][2]*G.Node, layers)
	cacheOut := make([][2]*G.Node, layers)
	x := x0
	for l := 0; l < layers; l++ {
		w := addWeights(g, fmt.Sprintf("l%d.", l), dm, newWeights(rng, dm))
		q, err := project(x, w.wq, batch, bHq, bD)
		must(b, err)
		for kv, wm := range []*G.Node{w.wk, w.wv} {
			nw, err := project(x, wm, batch, bHkv, bD)
			must(b, err)
			cacheIn[l][kv] = input(g, fmt.Sprintf("l%d.cache%d", l, kv), randBF16(rng, numPages, bHkv, pageSize, bD))
			cacheOut[l][kv], err = op.WritePagedKV(cacheIn[l][kv], nw, ptN, usedN, op.SeqlenQ(1))
			must(b, err)
		}
		o, err := op.DecodeAttention(q, cacheOut[l][0], cacheOut[l][1], ptN, usedN, sched, nil)
		must(b, err)
		y, err := outProject(o, w.wo, batch, bHq, bD)
		must(b, err)
		if x, err = G.Add(x, y); err != nil {
			b.Fatal(err)
		}
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	for i := range used {
		used[i] = int32(ctx)
	}
	step := func() {
		if int(used[0]) >= cols*pageSize {
			for i := range used {
				used[i] = int32(ctx)
			}
		}
		for i := range used {
			used[i]++
		}
		must(b, G.Let(usedN, usedT))
		copy(buf.Data().([]float32), src) // the residual add ran in place on x
		must(b, G.Let(x0, buf))
		must(b, m.RunAll())
		m.Reset()
		for l := range cacheOut {
			for kv := 0; kv < 2; kv++ {
				must(b, G.Let(cacheIn[l][kv], cacheOut[l][kv].Value()))
			}
		}
	}
	step() // warm-up
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step()
	}
	b.StopTimer()
	if x.Value() == nil {
		b.Fatal("no output")
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "tokens/s")
}
