package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// result is one measured case.
type result struct {
	c                 caseSpec
	pairs             int64   // visible (query, key) pairs inside the selected blocks, summed over KV heads
	flops             float64 // 4 * D * (Hq/Hkv) * pairs
	bytes             float64 // Q + K + V bytes
	timeMS, bestMS    float64 // median and fastest of reps runs
	reps              int
	samples           []float64 // ms of every timed call, in order
	sp                spread    // of samples
	load              loadStats // the machine around the case
	noise             []string  // why the row is noisy (nil: not noisy)
	planMS            float64   // prefill: CSR + schedule; decode: Plan
	gflops            float64   // flops / median time
	tier              string    // the tile tier that ran the case (caseTier)
	peakTier          string    // calibration loop of peak: the tier's loop (decode: FP32 on every tier but amxbf16)
	peak              float64   // calibrated (best-window) peak GFLOP/s, all workers
	pctPeak           float64   // median over reps of rate / sustained peak right after (paired)
	pctBurst          float64   // gflops / peak
	pctKern           float64   // median over reps of rate / in-cache tile update rate right after (paired)
	gbps              float64   // decode: bytes / median time
	bw                float64   // calibrated (best-pass) read bandwidth GB/s
	pctBW             float64   // decode: median over reps of GB/s / bandwidth right after (paired)
	pctBWBest         float64   // decode: gbps / bw
	pctRoof           float64   // decode: median over reps of rate / min(peak, bandwidth x flops/bytes) (paired)
	denseMS           float64
	denseExtrap       bool // dense_ms extrapolated in length ((T/Tm)^2)
	denseNote         string
	denseVerify       string
	denseVerifyDetail string
	speedupDense      float64
	torch             torchResult // PyTorch dense attention, FP32
	tdbf16            torchResult // PyTorch dense attention, BF16 (-torch-bf16)
	tsparse           torchResult // PyTorch, the same sparse (prefill) or paged (decode) work, FP32
	tbf16             torchResult // PyTorch, the same sparse or paged work, BF16 (-torch-bf16)
	verify            string
	verifyDetail      string
	path              string  // prefill: the path the timed calls ran (ranPaths)
	union             float64 // prefill: mean union of selected blocks per query tile of unionTileRows rows
	err               string
}

// torchResult is one PyTorch baseline of a case.
type torchResult struct {
	ms      float64 // scaled to the whole case
	extrap  bool    // extrapolated in length ((T/Tm)^2)
	method  string  // how PyTorch computed it
	note    string  // what was measured and how it was scaled
	speedup float64 // ms / the op's median
	refBLAS bool    // PyTorch's matmuls ran on the reference (unoptimised) BLAS
}

// torchResults are the result's PyTorch baselines: dense FP32 and BF16,
// same work FP32 and BF16.
func (r *result) torchResults() []*torchResult {
	return []*torchResult{&r.torch, &r.tdbf16, &r.tsparse, &r.tbf16}
}

// anyTorch reports whether any of the result's PyTorch baselines has f.
func (r *result) anyTorch(f func(t *torchResult) bool) bool {
	return slices.ContainsFunc(r.torchResults(), f)
}

// mark appends "!" to a speed-up cell measured against PyTorch on the
// reference BLAS: such a speed-up overstates ours (legend).
func (t torchResult) mark(s string) string {
	if t.refBLAS && s != "-" {
		return s + "!"
	}
	return s
}

func (r *result) derive(cal calibration) {
	if r.timeMS <= 0 {
		return
	}
	sec := r.timeMS / 1e3
	r.gflops = r.flops / sec / 1e9
	r.tier = caseTier(r.c)
	r.peakTier, r.peak = cal.peakFor(r.c)
	if r.peak > 0 {
		r.pctBurst = 100 * r.gflops / r.peak
	}
	if r.c.Kind == "decode" {
		r.gbps = r.bytes / sec / 1e9
		r.bw = cal.bw
		if cal.bw > 0 {
			r.pctBWBest = 100 * r.gbps / cal.bw
		}
	}
	if r.denseMS > 0 {
		r.speedupDense = r.denseMS / r.timeMS
	}
	for _, t := range r.torchResults() {
		t.speedup = 0
		if t.ms > 0 {
			t.speedup = t.ms / r.timeMS
		}
	}
	r.sp = spreadOf(r.samples)
	r.noise = noiseVerdict(r.sp, r.load, cal.ncpu, cal.workers, r.ratios())
}

// ratios are the percentage columns that can never exceed 100 as results.
func (r *result) ratios() map[string]float64 {
	return map[string]float64{"%peak": r.pctPeak, "%burst": r.pctBurst, "%BW": r.pctBW, "%BW best": r.pctBWBest, "%roof": r.pctRoof, "%kern": r.pctKern}
}

func f1(x float64) string {
	if x == 0 {
		return "-"
	}
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func fx(x float64) string {
	if x == 0 {
		return "-"
	}
	return f1(x) + "x"
}

// star marks an extrapolated value.
func star(s string, extrap bool) string {
	if extrap && s != "-" {
		return s + "*"
	}
	return s
}

// column is one column of the text and Markdown tables.
type column struct {
	name     string
	cell     func(r *result) string
	optional bool // dropped when blank in every row
}

var columns = []column{
	{name: "case", cell: func(r *result) string { return r.c.Name }},
	{name: "tier", cell: func(r *result) string { return r.tier }},
	{name: "time_ms", cell: func(r *result) string { return f1(r.timeMS) }},
	{name: "reps", cell: func(r *result) string { return strconv.Itoa(r.reps) }},
	{name: "max/min", cell: func(r *result) string { return f1(r.sp.maxMin) }},
	{name: "GFLOP/s", cell: func(r *result) string { return f1(r.gflops) }},
	{name: "%peak", cell: func(r *result) string { return pct(r.pctPeak) }},
	{name: "%burst", cell: func(r *result) string { return pct(r.pctBurst) }},
	{name: "%kern", cell: func(r *result) string { return pct(r.pctKern) }, optional: true},
	{name: "GB/s", cell: func(r *result) string { return f1(r.gbps) }},
	{name: "%BW", cell: func(r *result) string { return pct(r.pctBW) }},
	{name: "%roof", cell: func(r *result) string { return pct(r.pctRoof) }, optional: true},
	{name: "dense_ms", cell: func(r *result) string { return star(f1(r.denseMS), r.denseExtrap) }},
	{name: "x_dense", cell: func(r *result) string { return star(fx(r.speedupDense), r.denseExtrap) }},
	{name: "torch_ms", cell: func(r *result) string { return star(f1(r.torch.ms), r.torch.extrap) }},
	{name: "x_torch", cell: func(r *result) string { return r.torch.mark(star(fx(r.torch.speedup), r.torch.extrap)) }},
	{name: "tdbf16_ms", cell: func(r *result) string { return star(f1(r.tdbf16.ms), r.tdbf16.extrap) }, optional: true},
	{name: "x_tdbf16", cell: func(r *result) string { return r.tdbf16.mark(star(fx(r.tdbf16.speedup), r.tdbf16.extrap)) }, optional: true},
	{name: "tsparse_ms", cell: func(r *result) string { return f1(r.tsparse.ms) }},
	{name: "x_tsparse", cell: func(r *result) string { return r.tsparse.mark(fx(r.tsparse.speedup)) }},
	{name: "tbf16_ms", cell: func(r *result) string { return f1(r.tbf16.ms) }, optional: true},
	{name: "x_tbf16", cell: func(r *result) string { return r.tbf16.mark(fx(r.tbf16.speedup)) }, optional: true},
	{name: "noise", cell: func(r *result) string {
		if len(r.noise) == 0 {
			return "-"
		}
		return "NOISY:" + strings.Join(r.noise, ",")
	}},
	{name: "verify", cell: func(r *result) string {
		v := r.verify
		if v == "" {
			v = "-"
		}
		if r.denseVerify == "FAIL" {
			v += " (dense FAIL)"
		}
		return v
	}},
	{name: "blocks_per_tile", cell: unionCell, optional: true},
}

// tableColumns returns the columns of results.md: optional ones only when
// some row has a value.
func tableColumns(rs []*result) []column {
	return selectColumns(columns, rs)
}

// selectColumns keeps of all the optional columns only those with a value
// in some row.
func selectColumns(all []column, rs []*result) []column {
	var cols []column
	for _, c := range all {
		if c.optional {
			used := false
			for _, r := range rs {
				if r.err == "" && c.cell(r) != "-" {
					used = true
				}
			}
			if !used {
				continue
			}
		}
		cols = append(cols, c)
	}
	return cols
}

func (r *result) cells(cols []column) []string {
	out := make([]string, len(cols))
	if r.err != "" {
		out[0] = r.c.Name
		out[1] = "error"
		if strings.HasPrefix(r.err, "skipped") {
			out[1] = "skipped"
		}
		return out
	}
	for i, c := range cols {
		out[i] = c.cell(r)
	}
	return out
}

func header(cols []column) []string {
	h := make([]string, len(cols))
	for i, c := range cols {
		h[i] = c.name
	}
	return h
}

// termWidth is the widest line the terminal table and its legend print;
// the full set of columns is in results.md and results.csv.
const termWidth = 100

// limitPct is the share of the limit that judges a case: the compute peak
// for prefill (%peak), the roofline min(peak, bandwidth x flops/bytes) for
// decode (%roof), both paired. Where no paired %roof was measured (the GPU
// mode) it is the larger of %peak and %BW, which is what the roofline
// share comes to.
func limitPct(r *result) float64 {
	if r.c.Kind == "decode" {
		if r.pctRoof > 0 {
			return r.pctRoof
		}
		return max(r.pctPeak, r.pctBW)
	}
	return r.pctPeak
}

// termColumns are the columns of the table printed to the terminal: what a
// reader judges a case by, narrow enough for termWidth. termLegend names
// each of them.
var termColumns = []column{
	{name: "case", cell: func(r *result) string { return r.c.Name }},
	{name: "tier", cell: func(r *result) string { return shortTier(r.tier) }},
	{name: "ms", cell: func(r *result) string { return f1(r.timeMS) }},
	{name: "GFLOP/s", cell: func(r *result) string { return f1(r.gflops) }},
	{name: "%lim", cell: func(r *result) string {
		if p := limitPct(r); p > 100 {
			return "noisy"
		}
		return f1(limitPct(r))
	}},
	{name: "x_dense", cell: func(r *result) string { return star(fx(r.speedupDense), r.denseExtrap) }},
	{name: "x_torch", cell: func(r *result) string { return r.torch.mark(star(fx(r.torch.speedup), r.torch.extrap)) }},
	{name: "x_tsp", cell: func(r *result) string { return r.tsparse.mark(fx(r.tsparse.speedup)) }},
	{name: "x_tbf16", cell: func(r *result) string { return r.tbf16.mark(fx(r.tbf16.speedup)) }, optional: true},
	{name: "noise", cell: func(r *result) string {
		if len(r.noise) == 0 {
			return "-"
		}
		return "NOISY"
	}},
	{name: "verify", cell: func(r *result) string {
		if r.denseVerify == "FAIL" {
			return "FAIL"
		}
		if r.verify == "" {
			return "-"
		}
		return r.verify
	}},
}

// unionCell is a prefill's mean union of selected blocks per query tile
// (blank for other cases).
func unionCell(r *result) string {
	if r.union <= 0 {
		return ""
	}
	return strconv.FormatFloat(r.union, 'f', 1, 64)
}

// shortTier abbreviates a tier name for the terminal table (termLegend
// spells the abbreviations out).
func shortTier(t string) string {
	switch t {
	case "amxbf16":
		return "amx"
	case "avx512bf16":
		return "bf16"
	case "avx512bf16-emulated":
		return "bf16e"
	case "avx512":
		return "512"
	case "generic":
		return "go"
	}
	return t
}

// termLegend explains every column of termColumns.
const termLegend = "Columns: tier the kernel tier that ran the case (amx amxbf16, bf16 avx512bf16, bf16e its emulation, " +
	"512 avx512, avx2, go generic; prefill: the bf16 twin of the active tier, which rounds P to BF16, " +
	"where the CPU has one; decode: the active tier); ms median time of the op; GFLOP/s effective rate (4 x D x Hq/Hkv x visible pairs / ms); " +
	"%lim share of the limit that applies, paired with a calibration right after each rep: " +
	"prefill the compute peak of its tier (%peak), decode the roofline min(peak, bandwidth x flops/bytes) (%roof), " +
	"\"noisy\" when above 100; " +
	"x_dense Gorgonia dense attention's time / ms; x_torch PyTorch dense FP32's / ms; " +
	"x_tsp PyTorch doing the same sparse (prefill) or paged (decode) work in FP32 / ms; x_tbf16 the same in BF16; " +
	"noise NOISY when the noise rules flag the case (reasons in the notes); " +
	"verify the output against the reference (FAIL also when the dense baseline's check failed). " +
	"Every column (spreads, %burst, %kern, GB/s, %BW, baseline times, methods, x_tdbf16 the speed-up over PyTorch's dense BF16 SDPA, blocks_per_tile: " +
	"the mean union of selected blocks per 64-row query tile): results.md and results.csv; bench/README.md explains them."

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			out = append(out, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}

// printTable writes the aligned text table of termColumns, the legend of
// its columns, the run's noise verdict and the per-case notes.
func printTable(w io.Writer, rs []*result) {
	cols := selectColumns(termColumns, rs)
	rows := [][]string{header(cols)}
	for _, r := range rs {
		rows = append(rows, r.cells(cols))
	}
	width := make([]int, len(cols))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	for n, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[i], c)
			} else {
				fmt.Fprintf(&b, "  %*s", width[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if n == 0 {
			total := len(width)*2 - 2
			for _, x := range width {
				total += x
			}
			fmt.Fprintln(w, strings.Repeat("-", total))
		}
	}
	fmt.Fprintln(w)
	for _, l := range wrap(termLegend, termWidth) {
		fmt.Fprintln(w, l)
	}
	for _, l := range legend(rs) {
		for _, wl := range wrap(l, termWidth) {
			fmt.Fprintln(w, wl)
		}
	}
	// The notes too, each case's wrapped with a hanging indent.
	var notes strings.Builder
	printNotes(&notes, rs, "")
	for _, l := range strings.Split(strings.TrimRight(notes.String(), "\n"), "\n") {
		for i, wl := range wrap(l, termWidth-2) {
			if i > 0 {
				wl = "  " + wl
			}
			fmt.Fprintln(w, wl)
		}
		if l == "" {
			fmt.Fprintln(w)
		}
	}
}

// legend explains the table's markers and gives the run's noise verdict.
func legend(rs []*result) []string {
	var out []string
	for _, r := range rs {
		if r.denseExtrap || r.anyTorch(func(t *torchResult) bool { return t.extrap }) {
			out = append(out, "* extrapolated: the baseline ran on the first Tm tokens and was scaled by (T/Tm)^2 (notes below); other baseline times were measured on a subset of heads, requests or queries and scaled linearly")
			break
		}
	}
	for _, r := range rs {
		if r.anyTorch(func(t *torchResult) bool { return t.refBLAS }) {
			out = append(out, "! against PyTorch on the reference BLAS (unoptimised, "+refBLASFix+"): not a real speed-up")
			break
		}
	}
	if v := runNoise(rs); v != "" {
		out = append(out, v)
	} else {
		out = append(out, "noise: no case flagged (spread, load, steal and ratios within the limits in bench/README.md)")
	}
	return out
}

// runNoise is the whole run's verdict: "" when no row is noisy, else a
// line counting the flagged rows by reason.
func runNoise(rs []*result) string {
	count := map[string]int{}
	rows, measured := 0, 0
	maxOthers, maxLoad, maxSteal := 0.0, 0.0, 0.0
	for _, r := range rs {
		if r.err != "" {
			continue
		}
		measured++
		if len(r.noise) > 0 {
			rows++
		}
		for _, n := range r.noise {
			count[n]++
		}
		maxOthers = max(maxOthers, r.load.others)
		maxSteal = max(maxSteal, r.load.steal)
		maxLoad = max(maxLoad, r.load.loadStart, r.load.loadEnd)
	}
	if rows == 0 {
		return ""
	}
	var why []string
	for n, c := range count {
		why = append(why, fmt.Sprintf("%s %d", n, c))
	}
	sort.Strings(why)
	return fmt.Sprintf("NOISY RUN: %d of %d cases flagged (%s); other processes used up to %.0f%% of the CPUs, steal up to %.0f%%, load average up to %.2f. Treat every figure as approximate and rerun on a quiet machine before comparing.",
		rows, measured, strings.Join(why, ", "), 100*maxOthers, 100*maxSteal, maxLoad)
}

// printNotes lists, per case, how the baselines were obtained, the noise
// figures, and any verification detail or error.
func printNotes(w io.Writer, rs []*result, bullet string) {
	fmt.Fprintln(w)
	for _, r := range rs {
		var parts []string
		if r.err != "" {
			parts = append(parts, "ERROR: "+r.err)
		}
		if len(r.noise) > 0 {
			parts = append(parts, "NOISY ("+strings.Join(r.noise, ", ")+")")
		}
		if d := describeNoise(r.sp, r.load); d != "" && r.err == "" {
			parts = append(parts, d)
		}
		var over []string
		for _, k := range []string{"%peak", "%burst", "%kern", "%BW", "%BW best", "%roof"} {
			if v := r.ratios()[k]; v > 100 {
				over = append(over, fmt.Sprintf("%s measured %.0f", k, v))
			}
		}
		if len(over) > 0 {
			parts = append(parts, strings.Join(over, ", ")+" (above 100%: not a result)")
		}
		if r.denseNote != "" {
			parts = append(parts, r.denseNote)
		}
		for _, t := range r.torchResults() {
			if t.note != "" {
				parts = append(parts, t.note)
			}
		}
		if r.verifyDetail != "" {
			parts = append(parts, "verify: "+r.verifyDetail)
		}
		if r.denseVerify != "" {
			parts = append(parts, "dense verify: "+r.denseVerify+" ("+r.denseVerifyDetail+")")
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "%s%s: %s\n", bullet, r.c.Name, strings.Join(parts, "; "))
		}
	}
}

var csvHeader = []string{"case", "kind", "dtype", "seq_len", "batch", "hq", "hkv", "d", "topk", "blk", "page",
	"workers", "tier", "visible_pairs", "flops", "bytes", "time_ms", "best_ms", "worst_ms", "reps", "rel_iqr", "max_min",
	"load_start", "load_end", "others_cpu", "steal", "noise", "plan_ms",
	"gflops", "peak_tier", "peak_gflops", "pct_peak", "pct_peak_burst", "gbps", "bw_gbps", "pct_bw", "pct_bw_best", "pct_roof", "pct_kernel",
	"dense_ms", "speedup_vs_dense", "dense_extrapolated", "dense_method",
	"torch_ms", "speedup_vs_torch", "torch_extrapolated", "torch_method",
	"tsparse_ms", "speedup_vs_tsparse", "tsparse_method",
	"tbf16_ms", "speedup_vs_tbf16", "tbf16_method",
	"tdbf16_ms", "speedup_vs_tdbf16", "tdbf16_extrapolated", "tdbf16_method",
	"blocks_per_tile", "verify", "verify_detail", "dense_verify", "error"}

func num(x float64) string {
	if x == 0 {
		return ""
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

func writeCSV(path string, info *machineInfo, cal calibration, rs []*result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(csvHeader)
	for _, r := range rs {
		c := r.c
		w.Write([]string{c.Name, c.Kind, c.DType, strconv.Itoa(c.SeqLen), strconv.Itoa(c.Batch), strconv.Itoa(c.HQ),
			strconv.Itoa(c.HKV), strconv.Itoa(c.D), strconv.Itoa(c.TopK), strconv.Itoa(c.Blk), strconv.Itoa(c.Page),
			strconv.Itoa(info.workers), r.tier, strconv.FormatInt(r.pairs, 10), num(r.flops), num(r.bytes),
			num(r.timeMS), num(r.bestMS), num(r.sp.worst), strconv.Itoa(r.reps), num(r.sp.relIQR), num(r.sp.maxMin),
			num(r.load.loadStart), num(r.load.loadEnd), num(r.load.others), num(r.load.steal), strings.Join(r.noise, " "), num(r.planMS),
			num(r.gflops), r.peakTier, num(r.peak), pctCSV(r.pctPeak), pctCSV(r.pctBurst), num(r.gbps), num(r.bw), pctCSV(r.pctBW), pctCSV(r.pctBWBest), pctCSV(r.pctRoof), pctCSV(r.pctKern),
			num(r.denseMS), num(r.speedupDense), yes(r.denseExtrap), r.denseNote,
			num(r.torch.ms), num(r.torch.speedup), yes(r.torch.extrap), r.torch.note,
			num(r.tsparse.ms), num(r.tsparse.speedup), r.tsparse.note,
			num(r.tbf16.ms), num(r.tbf16.speedup), r.tbf16.note,
			num(r.tdbf16.ms), num(r.tdbf16.speedup), yes(r.tdbf16.extrap), r.tdbf16.note,
			unionCell(r), r.verify, r.verifyDetail, r.denseVerify, r.err})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchTitle heads results.md: the CPU run's, or the GPU mode's.
var benchTitle = "msa CPU benchmark"

func writeMarkdown(path string, hdr []string, rs []*result) error {
	cols := tableColumns(rs)
	var b strings.Builder
	b.WriteString("# " + benchTitle + "\n\n")
	for _, h := range hdr {
		b.WriteString("- " + h + "\n")
	}
	b.WriteString("\n| " + strings.Join(header(cols), " | ") + " |\n|")
	for i := range cols {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range rs {
		b.WriteString("| " + strings.ReplaceAll(strings.Join(r.cells(cols), " | "), "*", "\\*") + " |\n")
	}
	b.WriteString("\nColumns are explained in bench/README.md.\n\n")
	for _, l := range legend(rs) {
		b.WriteString(l + "\n")
	}
	var notes strings.Builder
	printNotes(&notes, rs, "- ")
	b.WriteString(notes.String())
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeOutputs(dir string, info *machineInfo, cal calibration, hdr []string, rs []*result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "results.csv"), info, cal, rs); err != nil {
		return err
	}
	if err := writeMarkdown(filepath.Join(dir, "results.md"), hdr, rs); err != nil {
		return err
	}
	return writePlot(filepath.Join(dir, "plot.png"), cal, rs)
}
