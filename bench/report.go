package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	planMS            float64 // prefill: CSR + schedule; decode: Plan
	gflops            float64 // flops / median time
	peak              float64 // calibrated (best-window) peak GFLOP/s, all workers
	pctPeak           float64 // median over reps of rate / sustained peak right after (paired)
	pctBurst          float64 // gflops / peak
	gbps              float64 // decode: bytes / median time
	bw                float64 // calibrated (best-pass) read bandwidth GB/s
	pctBW             float64 // decode: median over reps of GB/s / bandwidth right after (paired)
	pctBWBest         float64 // decode: gbps / bw
	denseMS           float64
	denseNote         string
	denseVerify       string
	denseVerifyDetail string
	speedupDense      float64
	torchMS           float64
	torchNote         string
	speedupTorch      float64
	verify            string
	verifyDetail      string
	err               string
}

func (r *result) derive(cal calibration) {
	if r.timeMS <= 0 {
		return
	}
	sec := r.timeMS / 1e3
	r.gflops = r.flops / sec / 1e9
	r.peak = cal.peak
	if cal.peak > 0 {
		r.pctBurst = 100 * r.gflops / cal.peak
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
	if r.torchMS > 0 {
		r.speedupTorch = r.torchMS / r.timeMS
	}
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

var tableHeader = []string{"case", "time_ms", "GFLOP/s", "%peak", "%burst", "GB/s", "%BW", "dense_ms", "x_dense", "torch_ms", "x_torch", "verify"}

func (r *result) cells() []string {
	if r.err != "" {
		what := "error"
		if strings.HasPrefix(r.err, "skipped") {
			what = "skipped"
		}
		return []string{r.c.Name, what, "", "", "", "", "", "", "", "", "", ""}
	}
	v := r.verify
	if v == "" {
		v = "-"
	}
	if r.denseVerify == "FAIL" {
		v += " (dense FAIL)"
	}
	return []string{r.c.Name, f1(r.timeMS), f1(r.gflops), f1(r.pctPeak), f1(r.pctBurst), f1(r.gbps), f1(r.pctBW),
		f1(r.denseMS), fx(r.speedupDense), f1(r.torchMS), fx(r.speedupTorch), v}
}

// printTable writes the aligned text table and the method notes.
func printTable(w io.Writer, rs []*result) {
	rows := [][]string{tableHeader}
	for _, r := range rs {
		rows = append(rows, r.cells())
	}
	width := make([]int, len(tableHeader))
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
	printNotes(w, rs, "")
}

// printNotes lists, per case, how the baselines were obtained and any
// verification detail or error.
func printNotes(w io.Writer, rs []*result, bullet string) {
	fmt.Fprintln(w)
	for _, r := range rs {
		var parts []string
		if r.err != "" {
			parts = append(parts, "ERROR: "+r.err)
		}
		if r.denseNote != "" {
			parts = append(parts, r.denseNote)
		}
		if r.torchNote != "" {
			parts = append(parts, r.torchNote)
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
	"workers", "tier", "visible_pairs", "flops", "bytes", "time_ms", "best_ms", "reps", "plan_ms",
	"gflops", "peak_tier", "peak_gflops", "pct_peak", "pct_peak_burst", "gbps", "bw_gbps", "pct_bw", "pct_bw_best",
	"dense_ms", "speedup_vs_dense", "dense_method", "torch_ms", "speedup_vs_torch", "torch_method",
	"verify", "verify_detail", "dense_verify", "error"}

func num(x float64) string {
	if x == 0 {
		return ""
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
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
			strconv.Itoa(info.workers), info.tier, strconv.FormatInt(r.pairs, 10), num(r.flops), num(r.bytes),
			num(r.timeMS), num(r.bestMS), strconv.Itoa(r.reps), num(r.planMS),
			num(r.gflops), cal.peakTier, num(r.peak), num(r.pctPeak), num(r.pctBurst), num(r.gbps), num(r.bw), num(r.pctBW), num(r.pctBWBest),
			num(r.denseMS), num(r.speedupDense), r.denseNote, num(r.torchMS), num(r.speedupTorch), r.torchNote,
			r.verify, r.verifyDetail, r.denseVerify, r.err})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeMarkdown(path string, header []string, rs []*result) error {
	var b strings.Builder
	b.WriteString("# msa CPU benchmark\n\n")
	for _, h := range header {
		b.WriteString("- " + h + "\n")
	}
	b.WriteString("\n| " + strings.Join(tableHeader, " | ") + " |\n|")
	for i := range tableHeader {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range rs {
		b.WriteString("| " + strings.Join(r.cells(), " | ") + " |\n")
	}
	b.WriteString("\nColumns are explained in bench/README.md.\n")
	var notes strings.Builder
	printNotes(&notes, rs, "- ")
	b.WriteString(notes.String())
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeOutputs(dir string, info *machineInfo, cal calibration, header []string, rs []*result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "results.csv"), info, cal, rs); err != nil {
		return err
	}
	if err := writeMarkdown(filepath.Join(dir, "results.md"), header, rs); err != nil {
		return err
	}
	return writePlot(filepath.Join(dir, "plot.png"), cal, rs)
}
