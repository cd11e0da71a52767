package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// overWide returns the lines of out longer than termWidth columns (runes,
// as a terminal counts them).
func overWide(out string) []string {
	var wide []string
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > termWidth {
			wide = append(wide, l)
		}
	}
	return wide
}

// The width check itself flags a line one column too wide and passes one
// at the limit.
func TestOverWide(t *testing.T) {
	if got := overWide(strings.Repeat("x", termWidth) + "\n" + strings.Repeat("×", termWidth+1)); len(got) != 1 ||
		len([]rune(got[0])) != termWidth+1 {
		t.Fatalf("overWide flagged %q, want only the %d-column line", got, termWidth+1)
	}
}

// legendNames checks that legend explains each column name (a name
// followed by a space, as "name what it is").
func legendNames(t *testing.T, legend string, cols []string) {
	t.Helper()
	flat := strings.Join(strings.Fields(legend), " ")
	for _, c := range cols {
		if !strings.Contains(flat, " "+c+" ") && !strings.Contains(flat, " "+c+", ") {
			t.Errorf("legend does not explain column %s", c)
		}
	}
}

// graphWideRows is a representative graph row set at its widest: the
// longest case names of the default and full-size suites on each BLAS,
// large values, a noisy row and a failed one.
func graphWideRows() []*graphResult {
	var rs []*graphResult
	for _, name := range []string{"graph-prefill-32k-lisp-openblas", "graph-decode-L4-b32-64k-msablas", "graph-decode-L12-b32-64k-openblas"} {
		r := &graphResult{c: graphCase{name: name, kind: "decode", machine: "tape", seqLen: 65536, batch: 32, layers: 12,
			dm: graphDims{model: 2048, hq: 16, hkv: 1, d: 128}, page: 128},
			reps: make([]time.Duration, 12), med: 98765 * time.Millisecond, eagerMed: 98765 * time.Millisecond,
			overhead: 12.345, allocs: 1234567, bytes: 98765e6, peakRSS: 123.4e9, rssStart: 12.3e9,
			noiseNote: "spread 1.23-4.56 ms (IQR 12%, max/min 3.4), load 7.5-9.1, others 45% of the CPUs, steal 0%",
			noisy:     "only 2 reps, spread, load, steal",
			kindGraph: map[string]time.Duration{"A × B": time.Second, "SparseAttention": time.Second, "DecodeAttention": time.Second},
			kindEager: map[string]time.Duration{"A × B": time.Second},
			kindOrder: []string{"A × B", "SparseAttention", "DecodeAttention"}, attrib: time.Second, unattributed: time.Second}
		r.prof.Runs, r.prof.Total = 12, 12*time.Second
		rs = append(rs, r)
	}
	rs = append(rs, &graphResult{c: graphCase{name: "graph-prefill-16k-tape-msablas", kind: "prefill"},
		err: strings.Repeat("a long error naming the argument, what was expected and what came; ", 4)})
	return rs
}

// The graph group's terminal output (table, per-case breakdowns, legend)
// fits in termWidth columns and its legend explains every column.
func TestGraphTableWidth(t *testing.T) {
	var buf bytes.Buffer
	printGraphTable(&buf, graphWideRows())
	out := buf.String()
	for _, l := range overWide(out) {
		t.Errorf("line of %d > %d columns: %q", len([]rune(l)), termWidth, l)
	}
	legend := out[strings.Index(out, "Columns:"):]
	legendNames(t, legend, graphTermHeader)
	legendNames(t, legend[strings.Index(legend, "Breakdown:"):], kindHeader)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "NOISY: only 2 reps, spread, load, steal") {
		t.Errorf("the noisy row's reasons are not printed:\n%s", out)
	}
}

// The backward group's terminal output fits in termWidth columns with a
// verification failure, a noisy row and an error, and its legend explains
// every column.
func TestBackwardTableWidth(t *testing.T) {
	var rows []*backwardRow
	noisy := spread{reps: 3, best: 1, median: 5, worst: 50, relIQR: 2, maxMin: 50, ok: true}
	for _, w := range []int{1, 2} {
		rows = append(rows, &backwardRow{name: "backward-f32-32k", workers: w, fwdBF16: 98765 * time.Millisecond,
			fwdF32: 98765 * time.Millisecond, bwd: 987654 * time.Millisecond, repsBF16: 3, repsF32: 3, rB: 3,
			cpuBF16: 99, cpuF32: 99, cpuBwd: 999, flops: 1e15, load: loadStats{ok: true, loadStart: 9.5, loadEnd: 12.25, others: 0.9, steal: 0.5},
			verify:  "FAIL: head 15 column 127: sum dV = -1.234567e+08, sum dO = 1.234567e+08",
			spreads: [3]spread{noisy, noisy, noisy}})
	}
	rows = append(rows, &backwardRow{name: "backward-f32-2k", workers: 2, err: errors.New(strings.Repeat("the schedule failed; ", 8))})
	var buf bytes.Buffer
	printBackwardTable(&buf, &config{topK: 64}, rows)
	out := buf.String()
	for _, l := range overWide(out) {
		t.Errorf("line of %d > %d columns: %q", len([]rune(l)), termWidth, l)
	}
	legendNames(t, out[strings.Index(out, "Columns:"):], backwardTermHeader[1:])
	for _, want := range []string{"verify FAIL: head 15", "NOISY:", "error: the schedule failed"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	if err := writeBackwardCSV(dir, rows); err != nil {
		t.Fatal(err)
	}
}

// Progress entries fit in termWidth columns: a case line at its longest
// (long name, load, noise and verify notes) wraps into indented lines, a
// PyTorch note too, and the redrawn bar (the run's and the graph group's)
// is cut to the width.
func TestProgressWidth(t *testing.T) {
	var buf bytes.Buffer
	p := newProgressTo(120, false, &buf)
	p.done = 99
	r := &result{c: caseSpec{Name: "prefill-fp8-32k-corr-nvfp4-long"}, timeMS: 98765.4, reps: 500, gflops: 12345.6, path: "query+kv",
		sp:   spread{best: 98765.4, worst: 99999.9},
		load: loadStats{ok: true, others: 0.95, steal: 0.45, loadEnd: 12.25}, noise: []string{"spread", "load", "steal", "ratio"},
		verify: "FAIL: head 15 row 2047: max |err| 1.2e-01 > tol 3.9e-03"}
	p.step(r)
	p.note("PyTorch", strings.Repeat("dense FP32 attention over 32768 tokens, 16 heads: 12345.6 ms; ", 3))
	p.step(&result{c: caseSpec{Name: "decode-fp8-b32-64k"}, err: strings.Repeat("skipped: K+V is 3 GiB, over the memory limit; ", 4)})
	out := buf.String()
	for _, l := range overWide(out) {
		t.Errorf("progress line of %d > %d columns: %q", len([]rune(l)), termWidth, l)
	}
	entries := 0
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(l, "[") {
			entries++
		} else if !strings.HasPrefix(l, progressIndent) {
			t.Errorf("continuation line %q is not indented", l)
		}
	}
	if entries != 3 {
		t.Errorf("want 3 entries (each one line starting with '['), got %d:\n%s", entries, out)
	}
	if flat := strings.Join(strings.Fields(out), " "); !strings.Contains(flat, "verify FAIL: head 15 row 2047") ||
		!strings.Contains(flat, "NOISY (spread, load, steal, ratio)") {
		t.Errorf("the wrapped case line lost its notes:\n%s", out)
	}

	buf.Reset()
	b := newProgressTo(120, true, &buf)
	b.phase(strings.Repeat("graph-prefill-32k-lisp-openblas", 2), "eager replay 499")
	gp := &graphProgress{total: 120, w: &buf}
	gp.phase(strings.Repeat("graph-decode-L12-b32-64k-openblas", 3), "eager replay 499")
	for _, seg := range strings.Split(buf.String(), "\r") {
		if n := len([]rune(seg)); n > termWidth {
			t.Errorf("bar line of %d > %d columns: %q", n, termWidth, seg)
		}
	}
}

// The BLAS pairs table fits in termWidth columns with the longest case
// names, large times and an error, explains every column, and pairs only
// the cases whose Gonum counterpart is in the suite.
func TestBLASPairsTable(t *testing.T) {
	cs := []graphCase{{name: "graph-prefill-32k-lisp", blas: "gonum"}, {name: "graph-prefill-32k-lisp-msablas", blas: "msa"},
		{name: "graph-prefill-32k-lisp-openblas", blas: "openblas"}, {name: "graph-decode-L12-b32-64k-msablas", blas: "msa"}}
	ps := pairCases(cs)
	if len(ps) != 2 || ps[0].base != "graph-prefill-32k-lisp" || ps[1].c.blas != "openblas" {
		t.Fatalf("pairCases = %+v, want the msa and openblas cases of graph-prefill-32k-lisp (the decode case has no gonum run)", ps)
	}
	for i := range 7 {
		ps[0].gonumMS, ps[0].blasMS = append(ps[0].gonumMS, 987654.3), append(ps[0].blasMS, 98765.4)
		ps[0].wallX, ps[0].cpuX = append(ps[0].wallX, 10+float64(i)), append(ps[0].cpuX, 12.5)
		ps[0].gonumCPU, ps[0].blasCPU = append(ps[0].gonumCPU, 1975308.6), append(ps[0].blasCPU, 158024.6)
	}
	ps[0].loadStart, ps[0].loadEnd = 12.25, 13.5
	ps[1].err = strings.Repeat("the graph failed to build; ", 6)
	var buf bytes.Buffer
	printBLASPairs(&buf, ps)
	out := buf.String()
	for _, l := range overWide(out) {
		t.Errorf("line of %d > %d columns: %q", len([]rune(l)), termWidth, l)
	}
	legendNames(t, out[strings.Index(out, "Columns:"):], pairHeader)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"13.00 10.00-16.00 12.50 12.25-13.50", "ERROR: the graph failed"} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if rows := pairCSVRows(ps); len(rows) != 8 || rows[2][3] != "msa" || rows[1][3] != "gonum" {
		t.Errorf("graph-pairs.csv rows: want a header and 7 pairs, the second run first on msa; got %q", rows)
	}
}
