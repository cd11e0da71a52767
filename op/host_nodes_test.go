package op

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mallocsPerRun is the heap objects allocated per call of f, the least of
// three tries of runs calls each, at the GOMAXPROCS in effect
// (testing.AllocsPerRun would set it to 1).
func mallocsPerRun(runs int, f func()) uint64 {
	least := uint64(1 << 62)
	for range 3 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&b)
		least = min(least, (b.Mallocs-a.Mallocs)/uint64(runs))
	}
	return least
}

// TestHostRunParallelAllocatesNothing: the host work that the CUDA path
// runs on storage a node keeps (hostRun) splits over GOMAXPROCS pooled
// goroutines for BlockScores and large casts, and a warm run allocates
// nothing at GOMAXPROCS 2 and 8 either; its value is the CPU Do's.
func TestHostRunParallelAllocatesNothing(t *testing.T) {
	const totalQ, totalK, hq, d = 300, 1200, 16, 128
	q, k := bf16T(totalQ, hq, d), bf16T(totalK, 1, d)
	for _, x := range []*tensor.Dense{q, k} {
		v := x.Data().([]lowp.BFloat16)
		for i := range v {
			v[i] = lowp.BFloat16(0x3c00 + (i*37)%1021)
		}
	}
	cuQ, cuK := i32T([]int{3}, 0, 100, 300), i32T([]int{3}, 0, 500, 1200)
	for _, procs := range []int{2, 8} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			g := G.NewGraph()
			bs, err := BlockScores(gnode(t, g, "q", q), gnode(t, g, "k", k), gnode(t, g, "cu_q", cuQ), gnode(t, g, "cu_k", cuK),
				MaxSeqlenK(700), BlkKV(64), Causal())
			if err != nil {
				t.Fatal(err)
			}
			x := tensor.New(tensor.WithShape(1<<18), tensor.WithBacking(make([]float32, 1<<18)))
			cast, err := CastToBF16(gnode(t, g, "x", x))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				op   interface {
					G.Op
					hostRunner
				}
				in []*tensor.Dense
			}{
				{"BlockScores", bs.Op().(*blockScoresOp), []*tensor.Dense{q, k, cuQ, cuK}},
				{"CastToBF16", cast.Op().(*castOp), []*tensor.Dense{x}},
			} {
				vals := make([]G.Value, len(c.in))
				for i, x := range c.in {
					vals[i] = x
				}
				want, err := c.op.Do(vals...)
				if err != nil {
					t.Fatal(err)
				}
				got, err := c.op.hostRun(c.in)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Header.Raw, want.(*tensor.Dense).Header.Raw) {
					t.Fatalf("%s: hostRun's value differs from the CPU Do's", c.name)
				}
				if n := mallocsPerRun(10, func() { _, _ = c.op.hostRun(c.in) }); n != 0 {
					t.Errorf("%s: %d allocations per warm run, want 0", c.name, n)
				}
			}
		})
	}
}
