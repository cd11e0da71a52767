package main

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/workload"
	"github.com/sparseattn/msa/kernels/lowp"
)

// runTinySoak runs a short soak on the tiny shapes with hook injected
// after every step and returns its failure lines.
func runTinySoak(t *testing.T, hook func()) []string {
	t.Helper()
	// GOMAXPROCS fixed, so that the runtime's part of the heap allowance
	// (2 x 16 KiB of sudog caches) is the same on every machine.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	soakStepHook = hook
	defer func() { soakStepHook = nil }()
	rep, err := soak(soakTiny, 2, 900*time.Millisecond, 30*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps, heap: %v; goroutines: %v", rep.steps, rep.heap, rep.goroutines)
	return rep.failures()
}

func hasFailure(fails []string, name string) bool {
	return slices.ContainsFunc(fails, func(f string) bool { return strings.HasPrefix(f, name) })
}

func TestSoakFlat(t *testing.T) {
	if fails := runTinySoak(t, nil); len(fails) > 0 {
		t.Fatalf("a clean soak failed: %q", fails)
	}
}

// TestSoakDetectsHeapLeak is the detector's mutation test: a step that
// keeps 16 KiB more every time must fail the heap check by name.
func TestSoakDetectsHeapLeak(t *testing.T) {
	var kept [][]byte
	fails := runTinySoak(t, func() { kept = append(kept, make([]byte, 16<<10)) })
	if !hasFailure(fails, "Go heap") {
		t.Fatalf("a leak of 16 KiB per step (%d steps) was not reported: %q", len(kept), fails)
	}
	if hasFailure(fails, "goroutine") {
		t.Fatalf("a heap leak was reported as a goroutine leak: %q", fails)
	}
	runtime.KeepAlive(kept)
}

// TestSoakDetectsGoroutineLeak: a step that leaves one goroutine blocked
// must fail the goroutine check by name.
func TestSoakDetectsGoroutineLeak(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	fails := runTinySoak(t, func() { go func() { <-stop }() })
	if !hasFailure(fails, "goroutine count") {
		t.Fatalf("a goroutine left per step was not reported: %q", fails)
	}
}

func TestCheckGrowth(t *testing.T) {
	flat := []float64{9, 5, 5, 6, 5, 5, 5, 6, 5} // warm-up peak, then flat
	cases := []struct {
		name      string
		xs        []float64
		allowance float64
		judged    bool
		grew      bool
	}{
		{"flat", flat, 0, true, false},
		{"last third up by the allowance", []float64{5, 5, 5, 5, 5, 5, 5, 7, 5}, 2, true, false},
		{"last third above the allowance", []float64{5, 5, 5, 5, 5, 5, 5, 7.5, 5}, 2, true, true},
		{"linear growth", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 2, true, true},
		{"too few samples", []float64{1, 2, 3, 4, 5, 6, 7, 80}, 0, false, false},
	}
	for _, c := range cases {
		g := checkGrowth("x", "", c.xs, c.allowance, "test")
		if g.judged != c.judged || g.grew() != c.grew {
			t.Errorf("%s: judged %v grew %v, want %v %v (%v)", c.name, g.judged, g.grew(), c.judged, c.grew, g)
		}
	}
	r := &soakReport{heap: checkGrowth("Go heap", "MiB", flat[:8], 0, "test"), goroutines: checkGrowth("goroutine count", "", flat, 0, "test"), verify: "ok"}
	if fails := r.failures(); len(fails) != 1 || !strings.Contains(fails[0], "not judged") {
		t.Errorf("an unjudged check must fail the run: %q", fails)
	}
}

// TestStepHist: every quantile read from the histogram is within its 2%
// bucket of the exact nearest-rank quantile, and never above the maximum.
func TestStepHist(t *testing.T) {
	var h stepHist
	var xs []time.Duration
	r := workload.NewSplitMix(3)
	for i := 0; i < 5000; i++ {
		d := time.Duration(float64(time.Microsecond) * math.Exp(float64(r.Intn(1<<20))/(1<<20)*14))
		xs = append(xs, d)
		h.add(d)
	}
	h.add(0)
	xs = append(xs, 0)
	slices.Sort(xs)
	for _, p := range []float64{0.01, 0.5, 0.9, 0.99, 1} {
		exact := xs[max(int(math.Ceil(p*float64(len(xs))))-1, 0)]
		got := h.quantile(p)
		if got < exact || float64(got) > float64(exact)*histRatio+float64(histMin) || got > h.max {
			t.Errorf("p%v: %v, exact %v", p*100, got, exact)
		}
	}
	var empty stepHist
	if empty.quantile(0.5) != 0 {
		t.Error("an empty histogram's quantile must be 0")
	}
}

func TestParseStatm(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"52000 4100 900 300 0 8000 0\n", 4100 * 4096},
		{"52000", -1},
		{"52000 x 1", -1},
		{"", -1},
	} {
		if got := parseStatm(c.in, 4096); got != c.want {
			t.Errorf("parseStatm(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestSoakVerifyDecode: the check of the decode outputs passes on the
// loop's own steps and fails, naming the element, when one output value
// or one page-table entry is wrong.
func TestSoakVerifyDecode(t *testing.T) {
	l, err := newSoakLoop(soakTiny, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for i := 0; i < 40 || l.lastB < 2; i++ {
		if err := l.step(); err != nil {
			t.Fatal(err)
		}
	}
	tol := soakTolerance(soakTiny)
	ck := &checker{tol: tol}
	l.verifyDecode(ck)
	if v, detail := ck.verdict(); v != "ok" {
		t.Fatalf("clean step: %s", detail)
	}
	// One output element off by 2%: far beyond BF16 rounding (2^-8).
	i := soakTiny.hq*soakTiny.d + 3 // batch row 1, head 0, column 3
	saved := l.out[i]
	l.out[i] = lowp.BF16(saved.Float32()*1.02 + 0.05)
	ck = &checker{tol: tol}
	l.verifyDecode(ck)
	if v, detail := ck.verdict(); v != "FAIL" || !strings.Contains(detail, "decode O[batch row 1, head 0]") {
		t.Errorf("a wrong output element was not reported: %s %s", v, detail)
	}
	l.out[i] = saved
	// Batch row 0 pointed at another request's first page.
	cols := soakTiny.maxCols()
	l.pt[0], l.pt[cols] = l.pt[cols], l.pt[0]
	ck = &checker{tol: tol}
	l.verifyDecode(ck)
	if v, detail := ck.verdict(); v != "FAIL" || !strings.Contains(detail, "batch row 0") {
		t.Errorf("a swapped page was not reported: %s %s", v, detail)
	}
}

// TestSoakReproducible: the same seed gives the same requests, data and
// outputs step for step; another seed does not.
func TestSoakReproducible(t *testing.T) {
	run := func(seed uint64) (int64, int64, []lowp.BFloat16) {
		l, err := newSoakLoop(soakTiny, 2, seed)
		if err != nil {
			t.Fatal(err)
		}
		defer l.close()
		for i := 0; i < 60; i++ {
			if err := l.step(); err != nil {
				t.Fatal(err)
			}
		}
		return l.prefillTokens, l.decodeTokens, slices.Clone(l.out)
	}
	p1, d1, o1 := run(7)
	p2, d2, o2 := run(7)
	if p1 != p2 || d1 != d2 || !slices.Equal(o1, o2) {
		t.Errorf("seed 7 twice: tokens %d+%d and %d+%d, outputs equal %v", p1, d1, p2, d2, slices.Equal(o1, o2))
	}
	p3, d3, o3 := run(8)
	if p1 == p3 && d1 == d3 && slices.Equal(o1, o3) {
		t.Error("seeds 7 and 8 gave the same run")
	}
}
