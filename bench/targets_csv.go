package main

import (
	"encoding/csv"
	"os"
	"slices"
	"strconv"
)

// targetsCSVHeader is the schema of targets.csv: one row per child run of
// -targets, the figures targets.md judges, with the machine, the date and
// the child's command in every row. docs/results/ keeps one such file per
// machine kind, and -tables (tables.go) renders them.
//
// targetsCSVHeaderV1 is the schema before the BF16 PyTorch peers: files
// written then lack the last three columns (x_tbf16_min, x_tbf16_max,
// x_tdbf16_8k), and render with "-" in them.
var (
	targetsCSVHeaderV1 = []string{"cpu", "date", "tier", "workers", "fast_mode",
		"peak_gflops", "bw_gbps",
		"prefill_pct_peak_min", "prefill_pct_peak_max", "nvfp4_pct_peak_min", "nvfp4_pct_peak_max",
		"decode_fp8_pct_roof_min", "decode_fp8_pct_roof_max", "decode_bf16_pct_roof_min", "decode_bf16_pct_roof_max",
		"pair_cost_min_pct", "pair_cost_max_pct", "x_tsparse_min", "x_tsparse_max", "x_torch_dense_8k",
		"cases", "failed", "noisy", "command", "note"}
	targetsCSVHeader = append(slices.Clip(targetsCSVHeaderV1), "x_tbf16_min", "x_tbf16_max", "x_tdbf16_8k")
)

// dec formats x with digits decimals, or "" when x is not a number or not
// positive where only positive values mean something (pos).
func dec(x float64, digits int, pos bool) string {
	if x != x || (pos && x <= 0) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', digits, 64)
}

// bounds returns a span's lowest and highest value, one decimal, or two
// empty cells when the span is empty.
func (s span) bounds() (string, string) {
	if len(s.vals) == 0 {
		return "", ""
	}
	return dec(slices.Min(s.vals), 1, false), dec(slices.Max(s.vals), 1, false)
}

// csvRow is the summary's targets.csv row.
func (s targetSummary) csvRow(cpu, date string) []string {
	row := []string{cpu, date, s.run.tier, strconv.Itoa(s.run.workers), strconv.FormatBool(s.run.fast),
		dec(s.peak, 0, true), dec(s.bw, 1, true)}
	for _, sp := range []span{s.prefill, s.nvfp4, s.decodeFP8, s.decodeBF} {
		lo, hi := sp.bounds()
		row = append(row, lo, hi)
	}
	lin := []string{"", ""}
	if s.linN > 1 {
		lin = []string{dec(s.linLo, 1, false), dec(s.linHi, 1, false)}
	}
	row = append(row, lin...)
	lo, hi := s.sparseX.bounds()
	note := s.note
	if s.denseNote != "" && s.denseX > 0 {
		note = joinNote(note, "PyTorch dense 8K extrapolated")
	}
	if s.denseBF16Note != "" && s.denseBF16X > 0 {
		note = joinNote(note, "PyTorch dense BF16 8K extrapolated")
	}
	row = append(row, lo, hi, dec(s.denseX, 1, true),
		strconv.Itoa(s.cases), strconv.Itoa(s.failed), strconv.Itoa(s.noisy), s.command, note)
	lo, hi = s.sparseBF16X.bounds()
	return append(row, lo, hi, dec(s.denseBF16X, 1, true))
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// writeTargetsCSV writes the summaries as targets.csv.
func writeTargetsCSV(path, cpu, date string, sums []targetSummary) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(targetsCSVHeader)
	for _, s := range sums {
		w.Write(s.csvRow(cpu, date))
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
