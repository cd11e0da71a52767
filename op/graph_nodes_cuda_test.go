//go:build cuda

package op

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"testing"

	mcuda "github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// hostNodeCase is a node that runs on the host on the CUDA path, its host
// inputs and the device output (prealloc) the tape machine would pass.
type hostNodeCase struct {
	name string
	op   G.Op
	in   []G.Value
	out  *tensor.Dense
	next func() // the next step's inputs (new metadata values), or nil
	// gpu is the node's CUDA path past the context push (nil: hostDo).
	gpu func(e *gpuEnv, prealloc G.Value, in []G.Value) (G.Value, error)
}

// run is c's CUDA path on e.
func (c *hostNodeCase) run(e *gpuEnv) (G.Value, error) {
	if c.gpu != nil {
		return c.gpu(e, c.out, c.in)
	}
	return e.hostDo(c.op, c.out, c.in)
}

func hostNodeCases(t *testing.T) []hostNodeCase {
	const pages, page = 16, 128
	g, pt, su := onePageRunGraph(t, pages, page)
	sched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), PlanForCUDA(132))
	if err != nil {
		t.Fatal(err)
	}
	so := sched.Op().(*decodeSchedOp)
	ptv, suv := pt.Value().(*tensor.Dense), su.Value().(*tensor.Dense)
	schedOut := i32T([]int{so.l.len()})

	cache := bf16T(pages, 1, page, 128)
	nw := bf16T(1, 1, 128)
	for i := range bf16Data(nw) {
		bf16Data(nw)[i] = lowp.BFloat16(0x3f80 + i%7)
	}
	cn := gnode(t, g, "cache", cache)
	wr, err := WritePagedKV(cn, gnode(t, g, "new", nw), pt, su)
	if err != nil {
		t.Fatal(err)
	}

	x32 := tensor.New(tensor.WithShape(4, 300), tensor.WithBacking(make([]float32, 1200)))
	for i := range x32.Data().([]float32) {
		x32.Data().([]float32)[i] = float32(i) * 0.37
	}
	toBF, err := CastToBF16(gnode(t, g, "x32", x32))
	if err != nil {
		t.Fatal(err)
	}
	xbf := bf16T(4, 300)
	copy(bf16Data(xbf), bf16Data(nw))
	fromBF, err := CastFromBF16(gnode(t, g, "xbf", xbf))
	if err != nil {
		t.Fatal(err)
	}

	sp := newSparseCUDACase(t, false, false)
	rp, qi, err := K2QCSRFunc(sp.q2k, sp.cuQ, sp.cuK, 64)
	if err != nil {
		t.Fatal(err)
	}
	pack, err := PackK2QCSR(gnode(t, g, "rp", rp), gnode(t, g, "qi", qi), TotalQ(300), TopK(4), BlkKV(64))
	if err != nil {
		t.Fatal(err)
	}

	// Block selection on the sparse case's q, k (filled with varied values)
	// and sequences: BlockScores, then TopKBlocks on its CPU value.
	q, k := sp.in[0].(*tensor.Dense), sp.in[1].(*tensor.Dense)
	for _, x := range []*tensor.Dense{q, k} {
		for i := range bf16Data(x) {
			bf16Data(x)[i] = lowp.BFloat16(0x3c00 + (i*37)%1021)
		}
	}
	bs, err := BlockScores(gnode(t, g, "bq", q), gnode(t, g, "bk", k), gnode(t, g, "bcq", sp.cuQ), gnode(t, g, "bck", sp.cuK),
		MaxSeqlenK(700), BlkKV(64), Causal())
	if err != nil {
		t.Fatal(err)
	}
	bsIn := []G.Value{q, k, sp.cuQ, sp.cuK}
	scores, err := bs.Op().Do(bsIn...)
	if err != nil {
		t.Fatal(err)
	}
	sd := scores.(*tensor.Dense)
	tk, err := TopKBlocks(gnode(t, g, "scores", sd), TopK(4), KeepFirst())
	if err != nil {
		t.Fatal(err)
	}
	return []hostNodeCase{
		{name: "DecodeSchedule", op: so, in: []G.Value{ptv, suv}, out: schedOut,
			next: func() { suv.Data().([]int32)[0]-- }},
		{name: "WritePagedKV", op: wr.Op(), in: []G.Value{cache, nw, ptv, suv}, out: bf16T(pages, 1, page, 128),
			next: func() { suv.Data().([]int32)[0]-- }, gpu: wr.Op().(*writePagedKVOp).gpu},
		{name: "CastToBF16", op: toBF.Op(), in: []G.Value{x32}, out: bf16T(4, 300)},
		{name: "CastFromBF16", op: fromBF.Op(), in: []G.Value{xbf},
			out: tensor.New(tensor.WithShape(4, 300), tensor.WithBacking(make([]float32, 1200)))},
		{name: "K2QCSR", op: sp.csrOp, in: []G.Value{sp.q2k, sp.cuQ, sp.cuK}, out: i32T(sp.in[3].Shape()),
			next: func() { fillQ2K(sp.q2k, sp.cuQ, sp.cuK, 64, 5) }},
		{name: "PackK2QCSR", op: pack.Op(), in: []G.Value{rp, qi}, out: i32T(pack.Shape()),
			next: func() { qi.Data().([]int32)[0]++ }},
		{name: "FwdSchedule", op: sp.schedOp, in: []G.Value{sp.in[3], sp.cuQ, sp.cuK}, out: i32T(sp.in[4].Shape()),
			next: func() {
				fillQ2K(sp.q2k, sp.cuQ, sp.cuK, 64, 6)
				csr, err := sp.csrOp.Do(sp.q2k, sp.cuQ, sp.cuK)
				if err != nil {
					t.Fatal(err)
				}
				copy(sp.in[3].(*tensor.Dense).Data().([]int32), csr.(*tensor.Dense).Data().([]int32))
			}},
		{name: "BlockScores", op: bs.Op(), in: bsIn, out: tensor.New(tensor.WithShape(bs.Shape()...), tensor.WithBacking(make([]float32, bs.Shape().TotalSize()))),
			next: func() { bf16Data(q)[5]++ }},
		{name: "TopKBlocks", op: tk.Op(), in: []G.Value{sd}, out: i32T(tk.Shape()),
			next: func() { sd.Data().([]float32)[3] = 9 }},
	}
}

func bf16Data(t *tensor.Dense) []lowp.BFloat16 { return t.Data().([]lowp.BFloat16) }

// TestHostNodesCUDARunAllocateNothing: the nodes of a decode step and of
// a prefill's planning that run host code on the CUDA path
// (DecodeSchedule, WritePagedKV, CastToBF16, CastFromBF16, K2QCSR,
// PackK2QCSR, FwdSchedule) allocate nothing in a warm run, also after the
// next step's new metadata values: their inputs are copied into host
// storage the node keeps and their value is computed into storage it
// keeps, then copied into the device output (WritePagedKV: the cache
// device to device, then its one new row host to device); one
// host-to-device copy per run, recorded by the fake. The device output
// holds the CPU Do's value.
func TestHostNodesCUDARunAllocateNothing(t *testing.T) {
	for _, c := range hostNodeCases(t) {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeGPU(mcuda.ArchPortable)
			for _, v := range append(c.in, c.out) {
				f.register(v.(*tensor.Dense))
			}
			e := f.envFor(c.name)
			run := func() {
				if _, err := c.run(e); err != nil {
					t.Fatal(err)
				}
			}
			check := func() {
				t.Helper()
				want, err := c.op.Do(cloneValues(c.in)...)
				if err != nil {
					t.Fatal(err)
				}
				run()
				if !bytes.Equal(c.out.Header.Raw, want.(*tensor.Dense).Header.Raw) {
					t.Fatal("the device output differs from the CPU Do's value")
				}
			}
			check()
			htods := f.htods
			if n := allocs.Warm(20, run); n != 0 {
				t.Errorf("warm run: %v allocations per run, want 0", n)
			}
			if f.htods-htods < 21 {
				t.Errorf("%d host-to-device copies in 21 or more warm runs, want one per run", f.htods-htods)
			}
			if c.next == nil {
				return
			}
			c.next()
			check()
			if n := allocs.Warm(20, run); n != 0 {
				t.Errorf("run after the next step's values: %v allocations per run, want 0", n)
			}
		})
	}
}

// cloneValues returns copies of host values (the CPU Do of WritePagedKV
// writes its cache input in place).
func cloneValues(vs []G.Value) []G.Value {
	out := make([]G.Value, len(vs))
	for i, v := range vs {
		out[i] = v.(*tensor.Dense).Clone().(*tensor.Dense)
	}
	return out
}

// TestHostNodesCUDARefusals: a warm host node refuses on the CUDA path what
// its CPU Do refuses, with the same error (the CUDA path's checks fall
// back to the Do for the message).
func TestHostNodesCUDARefusals(t *testing.T) {
	for _, bad := range []struct {
		node string
		edit func(in []G.Value)
	}{
		{"DecodeSchedule", func(in []G.Value) { in[1].(*tensor.Dense).Data().([]int32)[0] = 1 << 30 }},
		{"WritePagedKV", func(in []G.Value) { in[2].(*tensor.Dense).Data().([]int32)[15] = 99 }},
		{"WritePagedKV", func(in []G.Value) { in[3].(*tensor.Dense).Data().([]int32)[0] = 0 }},
		{"K2QCSR", func(in []G.Value) { in[1].(*tensor.Dense).Data().([]int32)[1] = 301 }},
		{"K2QCSR", func(in []G.Value) { in[0].(*tensor.Dense).Data().([]int32)[0] = 99 }},
		{"FwdSchedule", func(in []G.Value) { in[2].(*tensor.Dense).Data().([]int32)[2] = 2000 }},
		{"PackK2QCSR", func(in []G.Value) { in[1] = i32T([]int{1, 7}) }},
		{"CastToBF16", func(in []G.Value) {
			in[0] = tensor.New(tensor.WithShape(4, 301), tensor.WithBacking(make([]float32, 1204)))
		}},
		{"BlockScores", func(in []G.Value) { in[3].(*tensor.Dense).Data().([]int32)[2] = 1300 }},
		{"BlockScores", func(in []G.Value) { in[2].(*tensor.Dense).Data().([]int32)[1] = 301 }},
		{"TopKBlocks", func(in []G.Value) {
			in[0] = tensor.New(tensor.WithShape(1, 300, 12), tensor.WithBacking(make([]float32, 3600)))
		}},
	} {
		for _, c := range hostNodeCases(t) {
			if c.name == bad.node {
				t.Run(c.name, func(t *testing.T) { hostNodeRefusal(t, c, bad.edit) })
			}
		}
	}
}

// hostNodeRefusal runs c warm, applies edit to its inputs and checks that
// the CUDA path refuses them with the CPU Do's error.
func hostNodeRefusal(t *testing.T, c hostNodeCase, edit func(in []G.Value)) {
	f := newFakeGPU(mcuda.ArchPortable)
	for _, v := range append(c.in, c.out) {
		f.register(v.(*tensor.Dense))
	}
	e := f.envFor(c.name)
	for range 2 {
		if _, err := c.run(e); err != nil {
			t.Fatal(err)
		}
	}
	edit(c.in)
	for _, v := range c.in {
		f.register(v.(*tensor.Dense))
	}
	_, cpuErr := c.op.Do(cloneValues(c.in)...)
	_, gpuErr := c.run(e)
	wantSameRefusal(t, cpuErr, gpuErr)
}

// TestCastCUDALargeAllocations: a warm cast of a large tensor allocates
// nothing on the CUDA path at GOMAXPROCS 2 and 8 either (testing.AllocsPerRun
// sets GOMAXPROCS to 1, which keeps the conversion on one goroutine): the
// conversion's chunks run on a pool's goroutines, started once, with a
// chunk function the node made once. Each GOMAXPROCS is measured as the
// least of three tries of the heap objects per run, counted across the
// process (runtime.MemStats.Mallocs).
func TestCastCUDALargeAllocations(t *testing.T) {
	g := G.NewGraph()
	const n = 1 << 18
	x := tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
	for i := range x.Data().([]float32) {
		x.Data().([]float32)[i] = float32(i) * 0.37
	}
	node, err := CastToBF16(gnode(t, g, "x", x))
	if err != nil {
		t.Fatal(err)
	}
	out := bf16T(n)
	f := newFakeGPU(mcuda.ArchPortable)
	f.register(x, out)
	e := f.envFor("CastToBF16")
	run := func() {
		if _, err := e.hostDo(node.Op(), out, []G.Value{x}); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]lowp.BFloat16, n)
	lowp.EncodeBF16(want, x.Data().([]float32))
	for _, procs := range []int{2, 8} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			clear(bf16Data(out))
			run()
			if !slices.Equal(bf16Data(out), want) {
				t.Fatal("the device output differs from lowp.EncodeBF16's")
			}
			if w := lowp.SplitWorkers(n, 0); w != procs {
				t.Fatalf("the cast splits into %d chunks, want %d (one per P)", w, procs)
			}
			if least := mallocsPerRun(20, run); least != 0 {
				t.Errorf("warm cast of %d elements on %d goroutines: %d allocations per run, want 0", n, procs, least)
			}
		})
	}
}
