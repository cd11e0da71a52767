package graphprof_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sparseattn/msa/bench/graphprof"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Test graph: one sparse-attention layer as a model would write it, small
// enough for a unit test but with every node doing real work (a run takes
// a few tens of milliseconds on one core).
const (
	tT, tModel, tHq, tHkv, tD = 1024, 512, 4, 1, 64
	tBlk, tTopK, tWorkers     = 128, 4, 2
)

type layer struct {
	g      *G.ExprGraph
	x, out *G.Node
	xs     [2]*tensor.Dense
}

func randT(rng *rand.Rand, std float64, shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

func input(t testing.TB, g *G.ExprGraph, name string, v *tensor.Dense) *G.Node {
	n := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
	must(t, G.Let(n, v))
	return n
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func project(t testing.TB, x, w *G.Node, heads int) *G.Node {
	y, err := G.Mul(x, w)
	must(t, err)
	y, err = G.Reshape(y, tensor.Shape{tT, heads, tD})
	must(t, err)
	y, err = op.CastToBF16(y)
	must(t, err)
	return y
}

// buildLayer builds x -> Q/K/V projections -> bf16 -> BlockScores ->
// TopKBlocks -> K2QCSR -> FwdSchedule -> SparseAttention -> float32 ->
// output projection -> residual.
func buildLayer(t testing.TB) *layer {
	rng := rand.New(rand.NewPCG(1, 2))
	l := &layer{g: G.NewGraph()}
	g := l.g
	l.xs = [2]*tensor.Dense{randT(rng, 1, tT, tModel), randT(rng, 1, tT, tModel)}
	l.x = input(t, g, "x", l.xs[0])
	s := 1 / float64(tModel)
	wq := input(t, g, "wq", randT(rng, s, tModel, tHq*tD))
	wk := input(t, g, "wk", randT(rng, s, tModel, tHkv*tD))
	wv := input(t, g, "wv", randT(rng, s, tModel, tHkv*tD))
	wo := input(t, g, "wo", randT(rng, s, tHq*tD, tModel))
	cu := input(t, g, "cu", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, tT})))
	q, k, v := project(t, l.x, wq, tHq), project(t, l.x, wk, tHkv), project(t, l.x, wv, tHkv)
	scores, err := op.BlockScores(q, k, cu, cu, op.BlkKV(tBlk), op.MaxSeqlenK(tT), op.Causal(), op.Workers(tWorkers))
	must(t, err)
	q2k, err := op.TopKBlocks(scores, op.TopK(tTopK), op.KeepFirst(), op.KeepLast())
	must(t, err)
	csr, err := op.K2QCSR(q2k, cu, cu, op.BlkKV(tBlk), op.MaxSeqlenK(tT))
	must(t, err)
	sched, err := op.FwdSchedule(csr, cu, cu, op.QheadPerKV(tHq/tHkv), op.Workers(tWorkers))
	must(t, err)
	o, err := op.SparseAttention(q, k, v, csr, sched, cu, cu, op.Causal(), op.Workers(tWorkers))
	must(t, err)
	o32, err := op.CastFromBF16(o)
	must(t, err)
	o32, err = G.Reshape(o32, tensor.Shape{tT, tHq * tD})
	must(t, err)
	y, err := G.Mul(o32, wo)
	must(t, err)
	l.out, err = G.Add(l.x, y)
	must(t, err)
	return l
}

// runN runs the machine n times the way a serving loop does (Let a new
// input, RunAll under the profiler, Reset).
func runN(t testing.TB, l *layer, m G.VM, p *graphprof.Profiler, n int) {
	for i := 0; i < n; i++ {
		must(t, G.Let(l.x, l.xs[i%2]))
		if p != nil {
			must(t, p.Run(m))
		} else {
			must(t, m.RunAll())
		}
		m.Reset()
	}
}

// coverage profiles runs of the layer (after 2 warm-up runs) and returns
// the node times' sum over the machine's RunAll time, with the report.
func coverage(t *testing.T, runs int, opts ...graphprof.Option) (float64, graphprof.Report) {
	l := buildLayer(t)
	p, err := graphprof.Attach(l.g, opts...)
	must(t, err)
	m := G.NewTapeMachine(l.g)
	defer m.Close()
	runN(t, l, m, p, 2) // warm-up
	p.Reset()
	runN(t, l, m, p, runs)
	r := p.Report()
	if r.Runs != runs {
		t.Fatalf("%d runs recorded, want %d", r.Runs, runs)
	}
	return float64(r.Attributed) / float64(r.Total), r
}

// TestNodeTimesSumToRunAll: the per-node times of a profiled TapeMachine
// must add up to its RunAll time within 5% (the machine's own work between
// the nodes is the rest), summed over 20 runs; every node must be counted
// once per run. On a loaded host a run can be descheduled between two
// nodes, which lands in the machine's share, so the check is tried up to 3
// times and passes on the first attempt within the tolerance. A profiler
// that missed a node kind fails every attempt (see TestCoverageCheckFails).
func TestNodeTimesSumToRunAll(t *testing.T) {
	var ratios []float64
	for attempt := 0; attempt < 3; attempt++ {
		ratio, r := coverage(t, 20)
		ratios = append(ratios, ratio)
		if testing.Verbose() {
			var b bytes.Buffer
			must(t, r.WriteTable(&b))
			t.Log(b.String())
		}
		if len(r.Nodes) < 15 {
			t.Fatalf("%d nodes profiled, want every op node of the layer (>= 15)", len(r.Nodes))
		}
		for _, n := range r.Nodes {
			if n.Calls != int64(r.Runs) {
				t.Fatalf("node %d %s executed %d times in %d runs", n.ID, n.Op, n.Calls, r.Runs)
			}
		}
		if ratio > 1 {
			t.Fatalf("node times sum to %.4f of RunAll: more than the machine's run time", ratio)
		}
		if ratio >= 0.95 {
			var b bytes.Buffer
			must(t, r.WriteTable(&b))
			t.Logf("attempt %d: nodes cover %.2f%% of RunAll\n%s", attempt+1, 100*ratio, b.String())
			for _, kind := range []string{"A × B", "SparseAttention", "BlockScores", "TopKBlocks", "K2QCSR", "FwdSchedule", "Cast", "+", "Reshape"} {
				if !strings.Contains(b.String(), kind) {
					t.Fatalf("kind %q missing from the report", kind)
				}
			}
			return
		}
	}
	t.Fatalf("node times cover %.3f of RunAll in 3 attempts, want >= 0.95", ratios)
}

// TestCoverageCheckFails shows that the 5% check can fail: leaving the
// matrix products unprofiled drops the covered share well below 95%.
func TestCoverageCheckFails(t *testing.T) {
	ratio, r := coverage(t, 5, graphprof.Filter(func(n *G.Node) bool {
		return graphprof.DefaultKind(n.Op()) != "A × B"
	}))
	if r.Skipped != 4 {
		t.Fatalf("%d nodes skipped, want the 4 matrix products", r.Skipped)
	}
	if ratio >= 0.95 {
		t.Fatalf("without the matrix products the nodes still cover %.3f of RunAll: the coverage check could not fail", ratio)
	}
	t.Logf("without the matrix products: %.1f%%", 100*ratio)
}

// TestSameResults: outputs are bit-identical with the profiler attached
// (on and off), in a TapeMachine and a LispMachine, and Detach restores
// the original ops.
func TestSameResults(t *testing.T) {
	l := buildLayer(t)
	run := func(kind string) []float32 {
		var m G.VM
		if kind == "tape" {
			m = G.NewTapeMachine(l.g)
		} else {
			m = G.NewLispMachine(l.g, G.ExecuteFwdOnly())
		}
		defer m.Close()
		must(t, G.Let(l.x, l.xs[1]))
		must(t, m.RunAll())
		return append([]float32(nil), l.out.Value().Data().([]float32)...)
	}
	want := run("tape")
	ops := map[*G.Node]string{}
	for _, n := range l.g.AllNodes() {
		ops[n] = graphprof.DefaultKind(n.Op())
	}
	p, err := graphprof.Attach(l.g, graphprof.Capture())
	must(t, err)
	for _, kind := range []string{"tape", "lisp"} {
		for _, on := range []bool{true, false} {
			if on {
				p.Enable()
			} else {
				p.Disable()
			}
			got := run(kind)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s machine, profiler on=%v: output %d = %v, want %v", kind, on, i, got[i], want[i])
				}
			}
		}
	}
	p.Enable()
	e, err := p.Eager(2)
	must(t, err)
	if len(e.Reps) != 2 || len(e.Nodes) != p.Nodes() || e.Median() <= 0 {
		t.Fatalf("eager: %d reps, %d nodes (want 2, %d), median %v", len(e.Reps), len(e.Nodes), p.Nodes(), e.Median())
	}
	p.Detach()
	for _, n := range l.g.AllNodes() {
		if _, wrapped := n.Op().(interface{ Unwrap() G.Op }); wrapped || graphprof.DefaultKind(n.Op()) != ops[n] {
			t.Fatalf("node %d still wrapped after Detach: %T", n.ID(), n.Op())
		}
	}
	got := run("tape")
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after Detach: output %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestEagerNeedsCapture: Eager without Capture is an error, not a panic.
func TestEagerNeedsCapture(t *testing.T) {
	l := buildLayer(t)
	p, err := graphprof.Attach(l.g)
	must(t, err)
	m := G.NewTapeMachine(l.g)
	defer m.Close()
	runN(t, l, m, p, 1)
	if _, err := p.Eager(1); err == nil {
		t.Fatal("Eager without Capture succeeded")
	}
}

// BenchmarkLayer compares a run of the test layer without the profiler,
// with the profiler attached but off, and on.
func BenchmarkLayer(b *testing.B) {
	for _, mode := range []string{"plain", "off", "on"} {
		b.Run(mode, func(b *testing.B) {
			l := buildLayer(b)
			var p *graphprof.Profiler
			if mode != "plain" {
				var err error
				p, err = graphprof.Attach(l.g)
				must(b, err)
				if mode == "off" {
					p.Disable()
				}
			}
			m := G.NewTapeMachine(l.g)
			defer m.Close()
			runN(b, l, m, nil, 1)
			b.ResetTimer()
			t0 := time.Now()
			runN(b, l, m, nil, b.N)
			b.ReportMetric(float64(time.Since(t0).Microseconds())/float64(b.N)/1e3, "ms/run")
		})
	}
}

// BenchmarkPerNode measures the profiler's cost per node execution: a
// chain of 200 tiny element-wise adds (a few hundred ns each) run by a
// TapeMachine without the profiler, attached but off, and on.
func BenchmarkPerNode(b *testing.B) {
	const nodes = 200
	for _, mode := range []string{"plain", "off", "on"} {
		b.Run(mode, func(b *testing.B) {
			g := G.NewGraph()
			x := G.NewVector(g, tensor.Float32, G.WithShape(4), G.WithName("x"), G.WithInit(G.Ones()))
			y := x
			for i := 0; i < nodes; i++ {
				y = G.Must(G.Add(y, x))
			}
			if mode != "plain" {
				p, err := graphprof.Attach(g)
				must(b, err)
				if mode == "off" {
					p.Disable()
				}
			}
			m := G.NewTapeMachine(g)
			defer m.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				must(b, m.RunAll())
				m.Reset()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/nodes, "ns/node")
		})
	}
}
