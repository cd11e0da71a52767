package main

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	msablas "github.com/sparseattn/msa/kernels/blas"
)

// graphTestConfig is a minimal configuration for running graph cases in
// tests.
func graphTestConfig() *config {
	return &config{workers: 2, minTime: 20 * time.Millisecond, page: 128, topK: 4}
}

// TestGraphDecodeAllocsIndependentOfContext runs the decode-step graph at
// two contexts whose caches differ fourfold and checks that a step
// allocates the same (no O(context) copy, e.g. of the paged cache), that
// the profile covers the run and that every op kind of the step shows up.
func TestGraphDecodeAllocsIndependentOfContext(t *testing.T) {
	cfg := graphTestConfig()
	dm := graphDims{model: 128, hq: 16, hkv: 1, d: 128}
	var bytes [2]float64
	for i, ctx := range []int{1024, 4096} {
		r := &graphResult{c: graphCase{name: "decode", kind: "decode", machine: "tape", seqLen: ctx, batch: 2, layers: 2, dm: dm, page: 128}}
		if err := runGraphCase(cfg, r, nil); err != nil {
			t.Fatal(err)
		}
		if len(r.reps) < 3 || r.med <= 0 || r.eagerMed <= 0 || r.overhead <= 0 {
			t.Fatalf("ctx %d: %d runs, median %v, eager %v, overhead %v", ctx, len(r.reps), r.med, r.eagerMed, r.overhead)
		}
		for _, k := range []string{"A × B", "Cast", "WritePagedKV", "DecodeSchedule", "DecodeAttention", "+", "Reshape"} {
			if _, ok := r.kindGraph[k]; !ok {
				t.Fatalf("ctx %d: kind %q missing from %v", ctx, k, r.kindOrder)
			}
		}
		// The nodes' share of RunAll is timing: on a loaded 2-vCPU machine
		// it can fall to about 0.5 for a tiny 2-layer step (the machine's
		// own time between nodes weighs more there); attribution that is
		// broken gives ~0, so 0.4 still catches it.
		if cover := float64(r.attrib) / float64(r.attrib+r.unattributed); cover < 0.4 {
			t.Fatalf("ctx %d: nodes cover %.2f of RunAll", ctx, cover)
		}
		bytes[i] = r.minBytes // every step of an O(context) copy would pay it; the smallest step is immune to stray allocations of a loaded machine
		t.Logf("ctx %d: %.0f allocs, %.0f bytes per step, %v per step, overhead %.3f", ctx, r.allocs, r.bytes, r.med, r.overhead)
	}
	// One layer's K or V cache at the longer context is 2 x 4608 x 128 x 2
	// B = 2.4 MB: a copy of the caches per step would add ~9 MB.
	if bytes[1] > 1.25*bytes[0]+256<<10 {
		t.Fatalf("bytes per step grow with the context: %.0f at 1K, %.0f at 4K", bytes[0], bytes[1])
	}
}

// TestGraphPrefillCase runs the prefill layer in both machines at a tiny
// size and checks the table and breakdown rows.
func TestGraphPrefillCase(t *testing.T) {
	cfg := graphTestConfig()
	dm := graphDims{model: 128, hq: 16, hkv: 1, d: 128}
	var rs []*graphResult
	for _, m := range []string{"tape", "lisp"} {
		r := &graphResult{c: graphCase{name: "prefill-" + m, kind: "prefill", machine: m, seqLen: 512, batch: 1, layers: 1, dm: dm, topK: 2, blk: 128}}
		if err := runGraphCase(cfg, r, nil); err != nil {
			t.Fatal(err)
		}
		if len(r.kindRows()) < 9 {
			t.Fatalf("%s: %d breakdown rows: %v", m, len(r.kindRows()), r.kindRows())
		}
		rs = append(rs, r)
	}
	var b strings.Builder
	printGraphTable(&b, rs)
	for _, want := range []string{"prefill-tape", "prefill-lisp", "SparseAttention", "BlockScores", "TopKBlocks", "(machine: between nodes)"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestGraphSuiteBLAS checks that -graph-blas lists every case once per
// BLAS, names the kernels/blas cases with -msablas, and rejects an
// unknown BLAS by name.
func TestGraphSuiteBLAS(t *testing.T) {
	prev := *graphBLAS
	t.Cleanup(func() { *graphBLAS = prev })
	cfg := graphTestConfig()
	cfg.tiny = true
	*graphBLAS = "gonum,msa"
	cs, err := graphSuite(cfg)
	if err != nil {
		t.Fatal(err)
	}
	msa := 0
	for _, c := range cs {
		if c.blas == "msa" {
			msa++
			if !strings.HasSuffix(c.name, "-msablas") {
				t.Errorf("case %s on msa lacks -msablas", c.name)
			}
		}
	}
	if msa == 0 || 2*msa != len(cs) {
		t.Errorf("%d cases, %d on msa: want half", len(cs), msa)
	}
	*graphBLAS = "mkl"
	if _, err := graphSuite(cfg); err == nil || !strings.Contains(err.Error(), `-graph-blas: unknown BLAS "mkl"`) {
		t.Errorf("unknown BLAS: error %v", err)
	}
	*graphBLAS = "gonum,openblas"
	cs, err = graphSuite(cfg)
	if _, noLib := msablas.OpenBLAS(); noLib != nil {
		if !errors.Is(err, msablas.ErrNoOpenBLAS) || !strings.Contains(err.Error(), "-graph-blas openblas: ") {
			t.Errorf("openblas in a build without it: error %v, want -graph-blas openblas: %v", err, noLib)
		}
		return
	}
	if err != nil || !strings.HasSuffix(cs[len(cs)-1].name, "-openblas") {
		t.Errorf("openblas: error %v, last case %v", err, cs)
	}
}

// TestGraphBLASPairs runs two BLAS pairs of the tiny prefill layer (Gonum
// against kernels/blas, the order alternating) and checks each pair's
// times and ratios; a negative -graph-pairs is refused by name.
func TestGraphBLASPairs(t *testing.T) {
	cfg := graphTestConfig()
	dm := graphDims{model: 128, hq: 16, hkv: 1, d: 128}
	c := graphCase{name: "graph-prefill-512-tape-msablas", kind: "prefill", machine: "tape", seqLen: 512, batch: 1, layers: 1, dm: dm,
		topK: 2, blk: 128, blas: "msa"}
	p := blasPair{c: c, base: "graph-prefill-512-tape"}
	if err := runBLASPairs(cfg, &p, 2, nil); err != nil {
		t.Fatal(err)
	}
	if len(p.wallX) != 2 || len(p.gonumMS) != 2 || len(p.blasMS) != 2 {
		t.Fatalf("want 2 pairs, got %+v", p)
	}
	for i, x := range p.wallX {
		if !(p.gonumMS[i] > 0 && p.blasMS[i] > 0) || math.Abs(x-p.gonumMS[i]/p.blasMS[i]) > 1e-9 {
			t.Errorf("pair %d: gonum %v ms, msa %v ms, x_wall %v", i, p.gonumMS[i], p.blasMS[i], x)
		}
	}
	prev := *graphPairs
	t.Cleanup(func() { *graphPairs = prev })
	*graphPairs = -1
	if _, err := graphSuite(cfg); err == nil || !strings.Contains(err.Error(), "-graph-pairs must be >= 0") {
		t.Errorf("-graph-pairs -1: error %v", err)
	}
}
