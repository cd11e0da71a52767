package main

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/tile"
)

// targetRuns covers the supported target tiers, most workers first, and
// gives the PyTorch baselines to the first FP32 run and to the run of the
// default prefill tier (judged on the BF16 peers), both on 2 workers.
func TestTargetRuns(t *testing.T) {
	tiers := []string{"amxbf16", "avx512bf16", "avx512", "avx2", "generic"}
	for _, c := range []struct {
		def         string
		torch, peer []string
	}{
		{"amxbf16", []string{"avx512-w2", "amxbf16-w2"}, []string{"amxbf16-w2"}},
		{"avx512bf16", []string{"avx512-w2", "avx512bf16-w2"}, []string{"avx512bf16-w2"}},
		{"avx512", []string{"avx512-w2"}, []string{"avx512-w2"}},
	} {
		got := targetRuns(tiers, 2, true, c.def)
		var names, torch, peer []string
		for _, r := range got {
			names = append(names, r.dir())
			if r.torch {
				torch = append(torch, r.dir())
			}
			if r.peers {
				peer = append(peer, r.dir())
			}
			if r.fast != (r.tier == "avx512bf16" || r.tier == "amxbf16") {
				t.Errorf("run %s: fast = %v", r.dir(), r.fast)
			}
		}
		want := []string{"avx512-w2", "avx512-w1", "avx2-w2", "avx2-w1", "avx512bf16-w2", "avx512bf16-w1", "amxbf16-w2", "amxbf16-w1"}
		if !slices.Equal(names, want) || !slices.Equal(torch, c.torch) || !slices.Equal(peer, c.peer) {
			t.Errorf("default %s: runs %v, PyTorch in %v, peers in %v; want %v, %v, %v", c.def, names, torch, peer, want, c.torch, c.peer)
		}
	}
	if got := targetRuns([]string{"avx2", "generic"}, 1, false, "avx2"); len(got) != 1 || got[0].dir() != "avx2-w1" || got[0].torch || got[0].peers {
		t.Errorf("AVX2-only, 1 CPU, no torch: %+v", got)
	}
	if got := targetRuns([]string{"generic"}, 2, true, "generic"); len(got) != 0 {
		t.Errorf("no SIMD tier: %+v, want no runs", got)
	}
	peers := targetRun{tier: "avx512bf16", workers: 2, fast: true, torch: true, peers: true}
	if a := strings.Join(peers.args(&config{python: "py"}, "d"), " "); !strings.Contains(a, "-torch auto") || !strings.HasSuffix(a, "-python py") {
		t.Errorf("peers run arguments %q: want PyTorch with -python", a)
	}
	fast := targetRun{tier: "avx512bf16", workers: 1, fast: true}
	if a := strings.Join(fast.args(&config{python: "py"}, "d"), " "); !strings.Contains(a, "-cases prefill,nvfp4 ") || !strings.Contains(a, "-torch off") {
		t.Errorf("avx512bf16 run arguments %q: want prefill and NVFP4 only, no PyTorch", a)
	}
	// amxbf16 also times decode, whose lane kernels run on AMX tiles there.
	amx := targetRun{tier: "amxbf16", workers: 1, fast: true}
	if a := strings.Join(amx.args(&config{python: "py"}, "d"), " "); !strings.Contains(a, "-cases prefill,nvfp4,decode ") {
		t.Errorf("amxbf16 run arguments %q: want prefill, NVFP4 and decode", a)
	}
	for _, c := range []struct {
		tier  string
		fast  bool
		label string
		floor float64
	}{{"avx512", false, "avx512", targetPrefill}, {"avx512bf16", true, "avx512bf16 (bf16 products)", targetFastMode},
		{"amxbf16", true, "amxbf16 (bf16 products)", targetAMX}} {
		if l, f := tierLabel(c.tier, c.fast); l != c.label || f != c.floor {
			t.Errorf("tierLabel(%s, %v) = %q, %v; want %q, %v", c.tier, c.fast, l, f, c.label, c.floor)
		}
	}
	for _, c := range []struct {
		tier      string
		fp8, bf16 float64
	}{{"avx512", 70, 70}, {"avx512bf16", 70, 70}, {"amxbf16", 80, 85}} {
		if f, b := decodeFloor(c.tier, false), decodeFloor(c.tier, true); f != c.fp8 || b != c.bf16 {
			t.Errorf("decodeFloor(%s) = %v / %v, want %v / %v", c.tier, f, b, c.fp8, c.bf16)
		}
	}

}

// The summary reads what writeCSV writes (so a renamed column is caught)
// and judges each target by the lowest case.
func TestTargetSummary(t *testing.T) {
	pre := func(T int, ms, pct, sparseX, denseX float64) *result {
		r := &result{c: caseSpec{Name: "prefill-" + kLabel(T), Kind: "prefill", DType: "bf16", SeqLen: T, Batch: 1, HQ: 16, HKV: 1, D: 128}}
		r.pairs, r.timeMS, r.pctPeak = int64(T)*100, ms, pct
		r.tsparse.speedup, r.torch.speedup = sparseX, denseX
		// BF16 peers: a half and a third of the FP32 speed-ups.
		r.tbf16.speedup, r.tdbf16.speedup = sparseX/2, denseX/3
		return r
	}
	dec := func(dt string, roof float64) *result {
		r := &result{c: caseSpec{Name: "decode-" + dt, Kind: "decode", DType: dt, SeqLen: 4096, Batch: 8, HQ: 16, HKV: 1, D: 128}}
		r.pairs, r.timeMS, r.pctRoof = 1000, 1, roof
		return r
	}
	nv := &result{c: caseSpec{Name: "n", Kind: "nvfp4", SeqLen: 8192}, pctPeak: 76, pairs: 1, timeMS: 1}
	// Cost per pair 10, 11, 9 ns: -10% / +10% of the mean.
	rs := []*result{pre(2048, 2.048, 80, 14, 0), pre(4096, 4.5056, 76, 20, 0), pre(8192, 7.3728, 74, 15, 10.5),
		nv, dec("fp8", 73), dec("fp8", 79), dec("bf16", 69.5)}
	path := filepath.Join(t.TempDir(), "results.csv")
	if err := writeCSV(path, &machineInfo{workers: 2, tier: "avx512"}, calibration{}, rs); err != nil {
		t.Fatal(err)
	}
	rows, err := readResultsCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	run := targetRun{tier: "avx512", workers: 2, torch: true}
	s := summarizeTarget(run, rows, run.args(&config{python: "python3"}, "out/avx512-w2"))
	for _, c := range []struct {
		name   string
		got    span
		lo, hi float64
		n      int
	}{{"prefill", s.prefill, 74, 80, 3}, {"nvfp4", s.nvfp4, 76, 76, 1}, {"fp8", s.decodeFP8, 73, 79, 2}, {"bf16", s.decodeBF, 69.5, 69.5, 1},
		{"x_tsparse", s.sparseX, 14, 20, 3}, {"x_tbf16", s.sparseBF16X, 7, 10, 3}} {
		n := len(c.got.vals)
		if n != c.n || n == 0 || slices.Min(c.got.vals) != c.lo || slices.Max(c.got.vals) != c.hi {
			t.Errorf("%s: %v over %d cases, want %v-%v over %d", c.name, c.got.vals, n, c.lo, c.hi, c.n)
		}
	}
	if s.linN != 3 || s.linLo > -9.99 || s.linLo < -10.01 || s.linHi < 9.99 || s.linHi > 10.01 {
		t.Errorf("cost per pair: %d cases, %+.2f / %+.2f%%, want 3, -10 / +10", s.linN, s.linLo, s.linHi)
	}
	if s.denseX != 10.5 || s.denseBF16X != 3.5 {
		t.Errorf("PyTorch dense at 8K: FP32 %v, BF16 %v; want 10.5, 3.5", s.denseX, s.denseBF16X)
	}
	rep := targetReport("test CPU", []targetSummary{s})
	for _, want := range []string{"| avx512 | 2 | 74.0-80.0 MISS (prefill-8k 74.0) | 76.0 ok | 73.0-79.0 ok | 69.5 MISS (decode-bf16 69.5) | -10.0 / +10.0% ok | 14.0-20.0x ok | 10.5x ok | 7.0-10.0x MISS (all) | 3.5x MISS | 7 (0, 0) |",
		"go run ./bench -tier avx512 -workers 2 -cases prefill,nvfp4,decode -dense=false -torch auto -out out/avx512-w2 -python python3"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	all := span{}
	all.add("a", 60)
	all.add("b", 65)
	if got := all.cell(70, ""); got != "60.0-65.0 MISS (all)" {
		t.Errorf("every case below the floor: %q", got)
	}
	for _, x := range []float64{66, 67, 80} {
		all.add("c", x)
	}
	if got := all.cell(70, ""); got != "60.0-80.0 MISS (4 of 5 cases)" {
		t.Errorf("four of five cases below the floor: %q", got)
	}
	fast := targetRun{tier: "avx512bf16", workers: 1, fast: true}
	rep = targetReport("test CPU", []targetSummary{summarizeTarget(fast, rows[:4], nil)})
	if !strings.Contains(rep, "| avx512bf16 (bf16 products) | 1 | 74.0-80.0 ok | 76.0 ok |") {
		t.Errorf("avx512bf16 judged against 70%%:\n%s", rep)
	}
}

// runTargets goes on past a failed run, reports it in targets.md and
// returns an error; the children are a script standing in for this
// program, which fails the 1-worker runs without results.
func TestRunTargetsFailure(t *testing.T) {
	runs := targetRuns(tile.Tiers(), runtime.NumCPU(), false, tile.BF16InputTier())
	if len(runs) == 0 || runtime.GOOS == "windows" {
		t.Skip("no target tier on this CPU, or no shell")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "child.sh")
	body := `#!/bin/sh
out=""; w=""
while [ $# -gt 0 ]; do
  case "$1" in -out) out="$2"; shift;; -workers) w="$2"; shift;; esac
  shift
done
[ "$w" = 1 ] && { echo "child: failing"; exit 1; }
printf 'case,kind,dtype,seq_len,time_ms,visible_pairs,pct_peak,pct_roof,noise,error,verify\n' > "$out/results.csv"
printf 'prefill-bf16-2k,prefill,bf16,2048,10,1000,80,,,,\n' >> "$out/results.csv"
printf 'decode-fp8-b8-4k,decode,fp8,4096,1,10,,60,,,\n' >> "$out/results.csv"
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(f func() (string, error)) { targetExe = f }(targetExe)
	targetExe = func() (string, error) { return script, nil }
	out := filepath.Join(dir, "out")
	err := runTargets(&config{out: out, torch: "off"})
	if err == nil || !strings.Contains(err.Error(), "some runs failed") {
		t.Fatalf("runTargets with failing runs: %v, want an error", err)
	}
	rep, rerr := os.ReadFile(filepath.Join(out, "targets.md"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	text := string(rep)
	for _, r := range runs {
		switch {
		case r.workers == 1 && !strings.Contains(text, "-out "+filepath.Join(out, r.dir())+"`\n  - no results"):
			t.Errorf("failed run %s not reported:\n%s", r.dir(), text)
		case r.workers == 2 && !strings.Contains(text, "| "+r.tier):
			t.Errorf("run %s missing:\n%s", r.dir(), text)
		}
	}
	if runtime.NumCPU() >= 2 && !strings.Contains(text, "| 80.0 ok | - | 60.0 MISS (decode-fp8-b8-4k 60.0) | - |") {
		t.Errorf("the successful runs' figures are missing:\n%s", text)
	}
}
