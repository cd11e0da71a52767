package op

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// castAttnGraph is a prefill layer's op chain after the projections:
// float32 q, k, v cast to BFloat16, block selection, sparse attention, its
// LSE, and the output cast back to float32.
type castAttnGraph struct {
	g             *G.ExprGraph
	q32, k32, v32 *G.Node
	q, o32, lse   *G.Node
	ownedBytes    int // the outputs the nodes keep across runs
}

func buildCastAttnGraph(t *testing.T, T, hq, hkv, d int) *castAttnGraph {
	t.Helper()
	const blk = 64
	c := &castAttnGraph{g: G.NewGraph()}
	in := func(name string, dt tensor.Dtype, shape ...int) *G.Node {
		return G.NewTensor(c.g, dt, len(shape), G.WithShape(shape...), G.WithName(name))
	}
	c.q32, c.k32, c.v32 = in("q32", tensor.Float32, T, hq, d), in("k32", tensor.Float32, T, hkv, d), in("v32", tensor.Float32, T, hkv, d)
	cu := in("cu", tensor.Int32, 2)
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := G.Let(cu, tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(T)}))); err != nil {
		t.Fatal(err)
	}
	c.q = must(CastToBF16(c.q32))
	k, v := must(CastToBF16(c.k32)), must(CastToBF16(c.v32))
	scores := must(BlockScores(c.q, k, cu, cu, BlkKV(blk), MaxSeqlenK(T), Causal()))
	q2k := must(TopKBlocks(scores, TopK(2), KeepFirst(), KeepLast()))
	csr := must(K2QCSR(q2k, cu, cu, BlkKV(blk), MaxSeqlenK(T)))
	sched := must(FwdSchedule(csr, cu, cu, QheadPerKV(hq/hkv), Workers(2)))
	o := must(SparseAttention(c.q, k, v, csr, sched, cu, cu, Causal()))
	c.lse = must(LSE(o))
	c.o32 = must(CastFromBF16(o))
	n, nkv := T*hq*d, T*hkv*d
	c.ownedBytes = 2*n + 2*2*nkv + 2*n + 4*T*hq + 4*n // q, k, v, O, LSE, float32 O
	return c
}

// let binds fresh N(0, 1) values to the float32 inputs.
func (c *castAttnGraph) let(t *testing.T, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	for _, n := range []*G.Node{c.q32, c.k32, c.v32} {
		v := make([]float32, n.Shape().TotalSize())
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		if err := G.Let(n, tensor.New(tensor.WithShape(n.Shape()...), tensor.WithBacking(v))); err != nil {
			t.Fatal(err)
		}
	}
}

// The cast and attention nodes keep their outputs across runs: a
// TapeMachine run (Reset after it, as a serving loop does) allocates a
// small fraction of the outputs' bytes, where allocating them in Do
// allocated all of them on every run. The values follow the documented
// aliasing rule: correct after each run, and a value held from an earlier
// run is the storage the next run rewrites.
func TestGraphOutputsKeptAcrossRuns(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector's instrumentation allocates")
	}
	c := buildCastAttnGraph(t, 1024, 8, 1, 64)
	m := G.NewTapeMachine(c.g)
	defer m.Close()
	run := func() {
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		m.Reset()
	}
	c.let(t, 1)
	run() // warm-up: the workspaces and the kept outputs are made here
	bytes := allocs.Bytes(3, run)
	t.Logf("%d bytes per run; the kept outputs are %d bytes", bytes, c.ownedBytes)
	if bytes > uint64(c.ownedBytes)/8 {
		t.Errorf("a run allocates %d bytes, want < 1/8 of the %d bytes of the outputs kept across runs", bytes, c.ownedBytes)
	}

	// Correct values on every run, inputs changing between runs.
	held := c.o32.Value().(*tensor.Dense)
	kept := map[uint64][]float32{}
	for _, seed := range []uint64{2, 3, 2} {
		c.let(t, seed)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		q := c.q.Value().(*tensor.Dense)
		want := make([]lowp.BFloat16, q.Shape().TotalSize())
		lowp.EncodeBF16(want, c.q32.Value().Data().([]float32))
		if !slices.Equal(q.Data().([]lowp.BFloat16), want) {
			t.Fatalf("run with seed %d: CastToBF16's value is not the cast of this run's input", seed)
		}
		o := c.o32.Value().(*tensor.Dense)
		if &o.Data().([]float32)[0] != &held.Data().([]float32)[0] {
			t.Fatalf("run with seed %d: CastFromBF16's value is new storage, want the node's kept storage", seed)
		}
		if k, ok := kept[seed]; !ok {
			kept[seed] = slices.Clone(o.Data().([]float32))
		} else if !slices.Equal(o.Data().([]float32), k) {
			t.Fatalf("rerun with seed %d: CastFromBF16(O) differs from the first run on the same inputs", seed)
		}
		lse := c.lse.Value().Data().([]float32)
		if slices.ContainsFunc(lse, func(x float32) bool { return x != x }) {
			t.Fatalf("run with seed %d: LSE holds NaN", seed)
		}
		m.Reset()
	}
	if slices.Equal(kept[2], kept[3]) {
		t.Fatal("CastFromBF16(O) is the same for two different inputs")
	}
}
