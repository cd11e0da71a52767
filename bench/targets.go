package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sparseattn/msa/kernels/tile"
)

// The CPU path's performance targets, checked by -targets (bench/README.md,
// "Targets"): each a floor on a ratio the bench prints.
const (
	targetPrefill  = 75.0 // prefill and NVFP4 %peak, FP32 tiers
	targetFastMode = 70.0 // prefill and NVFP4 %peak of avx512bf16 (bf16 products), against its own VDPBF16PS peak
	// targetAMX is prefill and NVFP4 %peak of amxbf16 against its own
	// TDPBF16PS peak: AMX multiplies 16x16x32 bf16 tiles at ~15x the FP32
	// FMA rate, so the loads, softmax and P conversion around the
	// products bound it far below the FMA tiers' 75%; 22% is what the
	// tile products of a GEMM tuned for the same tiles leave (PyTorch's
	// oneDNN BF16 GEMM, 2048^3 on 2 threads, reached 26% on an AMX Xeon).
	targetAMX    = 22.0
	targetDecode = 70.0 // decode %roof
	// On amxbf16 both decode products run on AMX tiles, whose compute is
	// far above the read rate, so decode is bound by memory alone there:
	// its floors are those of a streaming kernel, BF16 K/V >= 85% of
	// roof and FP8 K/V (converted to bf16 on the way) >= 80%.
	targetDecodeAMXBF16 = 85.0
	targetDecodeAMXFP8  = 80.0
	targetLinear        = 15.0 // +-% of the mean time per selected (query, block)
	targetSparseX       = 3.0  // x over PyTorch doing the same sparse work (FP32)
	targetDenseX        = 10.0 // x over PyTorch's dense FP32 attention at 8K
	targetDenseXLen     = 8192
	// The BF16 peers, judged in the run of the tier the default prefill
	// runs on (tile.BF16InputTier): what a user compares it with is
	// PyTorch in BF16, whose matmuls go to oneDNN's bf16 kernels (AMX or
	// AVX512_BF16 where the CPU has them). Dense causal BF16 SDPA does
	// T^2/2 (query, key) products per head where the sparse op does at
	// most topK x 128 per query (2.35x less at 8K, topK 16), so 4x is
	// the sparsity's gain with a kernel ~1.7x as fast as PyTorch's; the
	// same sparse work in BF16 (gather, bmm, masked softmax) pays for
	// the gathered copies and three passes over the scores, 30x.
	targetDenseBF16X  = 4.0  // x over PyTorch's dense BF16 SDPA at 8K
	targetSparseBF16X = 30.0 // x over PyTorch doing the same sparse prefill work in BF16
)

// targetExe returns the program -targets runs its children with: this one
// (a test substitutes a script).
var targetExe = os.Executable

// targetRun is one child run of -targets: the default suite's prefill,
// NVFP4 and decode cases on one tier and worker count.
type targetRun struct {
	tier    string
	workers int
	fast    bool // a bf16-product tier: prefill and NVFP4 (and decode on amxbf16) against its own peak
	torch   bool // this run also times the PyTorch baselines
	peers   bool // the run of the default prefill tier: its BF16 PyTorch ratios are judged
}

func (r targetRun) dir() string { return fmt.Sprintf("%s-w%d", r.tier, r.workers) }

// targetRuns returns the runs -targets makes on a machine whose supported
// tiers are tiers and that has ncpu logical CPUs: the FP32 tiers avx512 and
// avx2 and the bf16-product tiers avx512bf16 and amxbf16 where supported,
// each on one worker and on two (when there are two CPUs). When torch is
// true the PyTorch baselines run in the first FP32 run on the most workers
// (the FP32 peers' targets) and in the run of defaultTier, the tier the
// default prefill runs on, on the most workers (the BF16 peers' targets;
// one run when that is the same run).
func targetRuns(tiers []string, ncpu int, torch bool, defaultTier string) []targetRun {
	workers := []int{1}
	if ncpu >= 2 {
		workers = append(workers, 2)
	}
	var runs []targetRun
	for _, t := range []string{"avx512", "avx2", "avx512bf16", "amxbf16"} {
		if !slices.Contains(tiers, t) {
			continue
		}
		for _, w := range slices.Backward(workers) {
			runs = append(runs, targetRun{tier: t, workers: w, fast: t == "avx512bf16" || t == "amxbf16"})
		}
	}
	if !torch {
		return runs
	}
	if len(runs) > 0 && !runs[0].fast {
		runs[0].torch = true
	}
	if i := slices.IndexFunc(runs, func(r targetRun) bool { return r.tier == defaultTier }); i >= 0 {
		runs[i].torch, runs[i].peers = true, true
	}
	return runs
}

// args returns the child's command-line arguments.
func (r targetRun) args(cfg *config, dir string) []string {
	cases := "prefill,nvfp4,decode"
	if r.fast && r.tier != "amxbf16" {
		// avx512bf16's decode runs the float32 lane kernels of avx512,
		// which its own run measures; amxbf16's runs on AMX tiles.
		cases = "prefill,nvfp4"
	}
	torch := "off"
	if r.torch {
		torch = "auto"
	}
	a := []string{"-tier", r.tier, "-workers", strconv.Itoa(r.workers), "-cases", cases,
		"-dense=false", "-torch", torch, "-out", dir}
	if cfg.minTimeSet {
		a = append(a, "-min-time", cfg.minTime.String())
	}
	if r.torch {
		a = append(a, "-python", cfg.python)
	}
	return a
}

// runTargets runs the target matrix as child processes of this program
// (each run's output and results under cfg.out/<tier>-w<workers>), then
// prints and writes (cfg.out/targets.md) the table of targets met.
func runTargets(cfg *config) error {
	self, err := targetExe()
	if err != nil {
		return fmt.Errorf("-targets: finding this program: %v", err)
	}
	if cfg.out == "" {
		stamp := time.Now().Format("20060102-150405")
		cfg.out = "bench-targets-" + stamp
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return fmt.Errorf("-targets: %v", err)
	}
	runs := targetRuns(tile.Tiers(), runtime.NumCPU(), cfg.torch != "off", tile.BF16InputTier())
	if len(runs) == 0 {
		return fmt.Errorf("-targets: this CPU has none of the tiers the targets are set for (avx512, avx2, avx512bf16); supported: %s", strings.Join(tile.Tiers(), ", "))
	}
	mi := readMachine(cfg)
	fmt.Printf("CPU: %s, %d logical CPUs; %d runs, results under %s\n", mi.cpu, mi.ncpu, len(runs), cfg.out)
	var sums []targetSummary
	failed := false
	for i, r := range runs {
		dir := filepath.Join(cfg.out, r.dir())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("-targets: %v", err)
		}
		args := r.args(cfg, dir)
		fmt.Printf("\n[run %d/%d] bench %s\n", i+1, len(runs), strings.Join(args, " "))
		log, err := os.Create(filepath.Join(dir, "stdout.txt"))
		if err != nil {
			return fmt.Errorf("-targets: %v", err)
		}
		cmd := exec.Command(self, args...)
		cmd.Stdout = io.MultiWriter(os.Stdout, log)
		cmd.Stderr = io.MultiWriter(os.Stderr, log)
		runErr := cmd.Run()
		log.Close()
		// A failed child (a case's error) still leaves the results of its
		// other cases; the row counts the failed ones, and the other runs go
		// on.
		rows, err := readResultsCSV(filepath.Join(dir, "results.csv"))
		s := summarizeTarget(r, rows, args)
		switch {
		case err != nil:
			s.note = fmt.Sprintf("no results (%v); output in %s", err, log.Name())
		case runErr != nil:
			s.note = fmt.Sprintf("the run failed (%v); output in %s", runErr, log.Name())
		}
		if s.note != "" {
			failed = true
			fmt.Fprintf(os.Stderr, "bench: -targets: run %s: %s\n", r.dir(), s.note)
		}
		sums = append(sums, s)
	}
	text := targetReport(mi.cpu, sums)
	fmt.Print("\n" + text)
	path := filepath.Join(cfg.out, "targets.md")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("-targets: %v", err)
	}
	csvPath := filepath.Join(cfg.out, "targets.csv")
	if err := writeTargetsCSV(csvPath, mi.cpu, time.Now().UTC().Format("2006-01-02"), sums); err != nil {
		return fmt.Errorf("-targets: %v", err)
	}
	fmt.Printf("wrote %s and %s\n", path, csvPath)
	if failed {
		return fmt.Errorf("-targets: some runs failed (see %s)", path)
	}
	return nil
}

// readResultsCSV reads a results.csv written by writeCSV into one map per
// case, keyed by column name.
func readResultsCSV(path string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		m := map[string]string{}
		for i, name := range recs[0] {
			if i < len(rec) {
				m[name] = rec[i]
			}
		}
		rows = append(rows, m)
	}
	return rows, nil
}

// span is a set of ratios with the case each came from.
type span struct {
	names []string
	vals  []float64
}

func (s *span) add(name string, x float64) {
	s.names, s.vals = append(s.names, name), append(s.vals, x)
}

// cell formats s's range against floor (the lowest value must reach it),
// naming the cases below it (counting them when more than three).
func (s span) cell(floor float64, unit string) string {
	n := len(s.vals)
	if n == 0 {
		return "-"
	}
	lo, hi := slices.Min(s.vals), slices.Max(s.vals)
	v := fmt.Sprintf("%.1f%s", lo, unit)
	if hi != lo {
		v = fmt.Sprintf("%.1f-%.1f%s", lo, hi, unit)
	}
	var below []string
	for i, x := range s.vals {
		if x < floor {
			below = append(below, fmt.Sprintf("%s %.1f%s", s.names[i], x, unit))
		}
	}
	switch {
	case len(below) == 0:
		return v + verdict(true)
	case len(below) == n && n > 1:
		return v + verdict(false) + " (all)"
	case len(below) > 3:
		return v + verdict(false) + fmt.Sprintf(" (%d of %d cases)", len(below), n)
	}
	return v + verdict(false) + " (" + strings.Join(below, ", ") + ")"
}

func verdict(met bool) string {
	if met {
		return " ok"
	}
	return " MISS"
}

// targetSummary is one run's figures against the targets.
type targetSummary struct {
	run                  targetRun
	command              string
	prefill, nvfp4       span // %peak
	decodeFP8, decodeBF  span // %roof
	linLo, linHi         float64
	linN                 int
	sparseX              span // x over PyTorch's same sparse work (FP32)
	denseX               float64
	denseNote            string
	sparseBF16X          span    // prefill: x over PyTorch's same sparse work in BF16
	denseBF16X           float64 // x over PyTorch's dense BF16 SDPA at targetDenseXLen
	denseBF16Note        string
	failed, noisy, cases int
	peak, bw             float64 // calibrated peak (prefill's loop) and read bandwidth of the run, all workers
	note                 string  // why the run gave no or partial results
}

func field(row map[string]string, name string) float64 {
	v, err := strconv.ParseFloat(row[name], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// summarizeTarget reduces a run's results.csv rows to its target figures.
func summarizeTarget(r targetRun, rows []map[string]string, args []string) targetSummary {
	s := targetSummary{run: r, command: "go run ./bench " + strings.Join(args, " ")}
	var perPair []float64
	for _, row := range rows {
		s.cases++
		if row["error"] != "" || row["verify"] == "FAIL" {
			s.failed++
			continue
		}
		if row["noise"] != "" {
			s.noisy++
		}
		if p := field(row, "peak_gflops"); row["kind"] != "decode" && p > 0 {
			s.peak = p
		}
		if bw := field(row, "bw_gbps"); bw > 0 {
			s.bw = bw
		}
		switch row["kind"] {
		case "prefill":
			s.prefill.add(row["case"], field(row, "pct_peak"))
			if us := 1e3 * field(row, "time_ms") / field(row, "visible_pairs"); us > 0 {
				perPair = append(perPair, us)
			}
			if x := field(row, "speedup_vs_tsparse"); x > 0 {
				s.sparseX.add(row["case"], x)
			}
			if x := field(row, "speedup_vs_tbf16"); x > 0 {
				s.sparseBF16X.add(row["case"], x)
			}
			if field(row, "seq_len") == targetDenseXLen {
				s.denseX, s.denseNote = denseAt(row, "torch")
				s.denseBF16X, s.denseBF16Note = denseAt(row, "tdbf16")
			}
		case "nvfp4":
			s.nvfp4.add(row["case"], field(row, "pct_peak"))
		case "decode":
			if row["dtype"] == "fp8" {
				s.decodeFP8.add(row["case"], field(row, "pct_roof"))
			} else {
				s.decodeBF.add(row["case"], field(row, "pct_roof"))
			}
			if x := field(row, "speedup_vs_tsparse"); x > 0 {
				s.sparseX.add(row["case"], x)
			}
		}
	}
	if len(perPair) > 0 {
		mean := 0.0
		for _, x := range perPair {
			mean += x / float64(len(perPair))
		}
		s.linLo = 100 * (slices.Min(perPair)/mean - 1)
		s.linHi = 100 * (slices.Max(perPair)/mean - 1)
		s.linN = len(perPair)
	}
	return s
}

// denseAt returns a prefill row's speed-up over the dense PyTorch
// baseline col (torch or tdbf16), and a note when it was extrapolated.
func denseAt(row map[string]string, col string) (float64, string) {
	x := field(row, "speedup_vs_"+col)
	if !(x > 0) {
		return 0, ""
	}
	if row[col+"_extrapolated"] == "yes" {
		return x, " (extrapolated)"
	}
	return x, ""
}

// targetReport renders the summaries as Markdown: one table row per run,
// then each run's command.
func targetReport(cpu string, sums []targetSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# CPU targets on %s\n\n", cpu)
	fmt.Fprintf(&b, "Floors: prefill and NVFP4 >= %.0f%% of the FP32 peak (avx512bf16: >= %.0f%% of its own, amxbf16: >= %.0f%% of its own); decode >= %.0f%% of roof (amxbf16: FP8 >= %.0f%%, BF16 >= %.0f%%); "+
		"time per selected (query, block) within +-%.0f%% of its mean over the prefill lengths; >= %.0fx PyTorch's same sparse work, >= %.0fx its dense attention at %dK (FP32); "+
		"in the run of the default prefill tier (marked *), >= %.0fx PyTorch's same sparse prefill work and >= %.0fx its dense SDPA at %dK in BF16. "+
		"A range is the lowest and highest case; ok / MISS judge the lowest, and a MISS names the cases below the floor.\n\n",
		targetPrefill, targetFastMode, targetAMX, targetDecode, targetDecodeAMXFP8, targetDecodeAMXBF16, targetLinear, targetSparseX, targetDenseX, targetDenseXLen/1024,
		targetSparseBF16X, targetDenseBF16X, targetDenseXLen/1024)
	b.WriteString("| tier | workers | prefill %peak | NVFP4 %peak | decode FP8 %roof | decode BF16 %roof | cost per pair vs mean | PyTorch same sparse work | PyTorch dense 8K | PyTorch same sparse work BF16 | PyTorch dense BF16 8K | cases (failed, noisy) |\n")
	b.WriteString("|---|---:|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range sums {
		tier, floor := tierLabel(s.run.tier, s.run.fast)
		lin := "-"
		if s.linN > 1 {
			lin = fmt.Sprintf("%+.1f / %+.1f%%", s.linLo, s.linHi) + verdict(math.Max(-s.linLo, s.linHi) <= targetLinear)
		}
		if s.run.peers {
			tier += " *"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d (%d, %d) |\n", tier, s.run.workers,
			s.prefill.cell(floor, ""), s.nvfp4.cell(floor, ""), s.decodeFP8.cell(decodeFloor(s.run.tier, false), ""), s.decodeBF.cell(decodeFloor(s.run.tier, true), ""),
			lin, s.torchSpan(s.sparseX, targetSparseX), s.torchDense(s.denseX, s.denseNote, targetDenseX),
			s.torchSpan(s.sparseBF16X, targetSparseBF16X), s.torchDense(s.denseBF16X, s.denseBF16Note, targetDenseBF16X),
			s.cases, s.failed, s.noisy)
	}
	b.WriteString("\nCommands (each run's output and results.csv are in its directory):\n\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "- `%s`\n", s.command)
		if s.note != "" {
			fmt.Fprintf(&b, "  - %s\n", s.note)
		}
	}
	return b.String()
}

// torchSpan is a PyTorch same-work cell of targets.md: the range judged
// against floor, or, in a run that timed PyTorch but has no figure, why.
func (s targetSummary) torchSpan(sp span, floor float64) string {
	if s.run.torch && len(sp.vals) == 0 {
		return "not run (no torch?)"
	}
	return sp.cell(floor, "x")
}

// torchDense is a PyTorch dense 8K cell of targets.md, as torchSpan.
func (s targetSummary) torchDense(x float64, note string, floor float64) string {
	switch {
	case x > 0:
		return fmt.Sprintf("%.1fx%s", x, note) + verdict(x >= floor)
	case s.run.torch:
		return "not run (no torch?)"
	}
	return "-"
}

// tierLabel returns a target row's tier as the tables print it and the
// floor its prefill and NVFP4 %peak are judged against: the FP32 tiers'
// targetPrefill, or for a bf16-product tier (fast) its own floor against
// its own peak.
func tierLabel(tier string, fast bool) (string, float64) {
	switch {
	case !fast:
		return tier, targetPrefill
	case tier == "amxbf16":
		return tier + " (bf16 products)", targetAMX
	}
	return tier + " (bf16 products)", targetFastMode
}

// decodeFloor is the %roof floor of a tier's decode cases, BF16 K/V (bf16)
// or FP8: targetDecode, or amxbf16's own (targetDecodeAMXBF16,
// targetDecodeAMXFP8).
func decodeFloor(tier string, bf16 bool) float64 {
	switch {
	case tier != "amxbf16":
		return targetDecode
	case bf16:
		return targetDecodeAMXBF16
	}
	return targetDecodeAMXFP8
}
