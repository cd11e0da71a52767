package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The tables in docs/performance.md are what -tables renders from
// docs/results/*.csv; run `go generate ./bench` after changing a CSV file.
func TestResultTablesUpToDate(t *testing.T) {
	block, err := renderTables(filepath.Join("..", "docs", "results"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := spliceTables(string(doc), block)
	if err != nil {
		t.Fatal(err)
	}
	if want != string(doc) {
		t.Errorf("docs/performance.md's generated tables differ from docs/results/*.csv; run `go generate ./bench`")
	}
	// The check fails on a stale block: the same document with one figure
	// changed is not what the CSV files render.
	row := regexp.MustCompile(`\| avx512 \| 2 \| [0-9]+\.[0-9]`).FindString(string(doc))
	if row == "" {
		t.Fatal("no avx512 row on 2 workers in docs/performance.md")
	}
	digit := row[len(row)-1]
	changed := row[:len(row)-1] + string('0'+(digit-'0'+1)%10)
	stale := strings.Replace(string(doc), row, changed, 1)
	if got, _ := spliceTables(stale, block); got == stale {
		t.Error("a changed figure in the generated block went unnoticed")
	}
}

// What -targets writes as targets.csv is what -tables reads: a summary
// written and rendered again gives the cells targets.md shows.
func TestTargetsCSVRoundTrip(t *testing.T) {
	s := targetSummary{run: targetRun{tier: "avx512", workers: 2, torch: true}, command: "go run ./bench -tier avx512", cases: 7, peak: 236, bw: 35}
	for _, x := range []float64{80, 74} {
		s.prefill.add("p", x)
	}
	s.nvfp4.add("n", 76)
	s.decodeFP8.add("f", 73)
	s.decodeBF.add("b", 69.5)
	s.sparseX.add("x", 14)
	s.linLo, s.linHi, s.linN = -10, 10, 3
	s.denseX, s.denseNote = 10.5, " (extrapolated)"
	s.sparseBF16X.add("x", 31)
	s.denseBF16X = 3.5
	dir := t.TempDir()
	if err := writeTargetsCSV(filepath.Join(dir, "m.csv"), "test CPU", "2026-01-02", []targetSummary{s}); err != nil {
		t.Fatal(err)
	}
	got, err := renderTables(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#### test CPU (`m.csv`)",
		"| avx512 | 2 | 74.0-80.0 MISS | 76.0 ok | 73.0 ok | 69.5 MISS | -10.0 / +10.0% ok | 14.0x ok | 10.5x ok | 31.0x ok | 3.5x MISS | 236 | 35.0 | 2026-01-02 |",
		"- `go run ./bench -tier avx512`",
		"- avx512-w2: PyTorch dense 8K extrapolated",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered tables lack %q:\n%s", want, got)
		}
	}
	rep := targetReport("test CPU", []targetSummary{s})
	if !strings.Contains(rep, "| avx512 | 2 | 74.0-80.0 MISS (p 74.0) | 76.0 ok | 73.0 ok | 69.5 MISS (b 69.5) | -10.0 / +10.0% ok | 14.0x ok | 10.5x (extrapolated) ok | 31.0x ok | 3.5x MISS |") {
		t.Errorf("targets.md row differs from the CSV's:\n%s", rep)
	}
}

// A targets.csv of the schema before the BF16 peers (no x_tbf16_min,
// x_tbf16_max, x_tdbf16_8k) renders with "-" in their columns; one with
// the columns renders their figures.
func TestTargetsCSVWithoutBF16Peers(t *testing.T) {
	row := func(head []string, extra ...string) string {
		cells := make([]string, len(targetsCSVHeaderV1))
		cells[0], cells[1], cells[2], cells[3], cells[4], cells[7], cells[8] = "cpu", "2026-01-02", "avx2", "2", "false", "76", "80"
		cells[17], cells[18], cells[19] = "12", "15", "11"
		return strings.Join(head, ",") + "\n" + strings.Join(append(cells, extra...), ",") + "\n"
	}
	for _, c := range []struct{ body, want string }{
		{row(targetsCSVHeaderV1), "| 12.0-15.0x ok | 11.0x ok | - | - | - | - | 2026-01-02 |"},
		{row(targetsCSVHeader, "25", "40", "4.5"), "| 12.0-15.0x ok | 11.0x ok | 25.0-40.0x MISS | 4.5x ok | - | - | 2026-01-02 |"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f.csv"), []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := renderTables(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("rendered table lacks %q:\n%s", c.want, out)
		}
	}
	// A header of neither schema (the new columns in another order) is
	// refused.
	h := append(slices.Clone(targetsCSVHeaderV1), "x_tdbf16_8k", "x_tbf16_min", "x_tbf16_max")
	if _, err := readResultFileBytes(t, row(h, "1", "2", "3")); err == nil || !strings.Contains(err.Error(), "neither targets.csv's") {
		t.Errorf("reordered header: %v", err)
	}
}

// readResultFileBytes writes body to a file and reads it as a results CSV.
func readResultFileBytes(t *testing.T, body string) (*resultFile, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.csv")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return readResultFile(p)
}

// A file that is not one of the two schemas, or lacks what names its
// machine, or mixes machines, or holds a non-number, is refused with its
// name and what was expected.
func TestTablesRefuseBadFiles(t *testing.T) {
	gpuHead := strings.Join(gpuTimingHeader, ",") + "\n"
	cpuHead := strings.Join(targetsCSVHeader, ",") + "\n"
	cpuRow := func(cpu, lo string) string {
		cells := make([]string, len(targetsCSVHeader))
		cells[0], cells[2], cells[3], cells[7], cells[8] = cpu, "avx2", "1", lo, "80"
		return strings.Join(cells, ",") + "\n"
	}
	for _, c := range []struct{ name, body, want string }{
		{"header", "case,time_ms\nx,1\n", "neither targets.csv's"},
		{"gpu header", "# gpu: H200\n# date: d\n# command: c\ncase,kernels,ms,status\np,k,1,ok\n", "neither targets.csv's"},
		{"empty", cpuHead, "at least one row"},
		{"gpu meta", "# gpu: H200\n# date: 2026-01-02\n" + gpuHead + "p,k,1,2,3,4,5,16,ok\n", `"# command: ..."`},
		{"gpu number", "# gpu: H200\n# date: d\n# command: c\n" + gpuHead + "p,k,fast,2,3,4,5,16,ok\n", `ms "fast" of p: not a number`},
		{"gpu union", "# gpu: H200\n# date: d\n# command: c\n" + gpuHead + "p,k,1,2,3,4,5,many,ok\n", `union_per_tile "many" of p: not a number`},
		{"comment form", "# just a note\n" + gpuHead + "p,k,1,2,3,4,5,ok\n", `want "# key: value"`},
		{"cpu meta", "# date: d\n" + cpuHead + cpuRow("a", "70"), "not in comment lines"},
		{"two machines", cpuHead + cpuRow("a", "70") + cpuRow("b", "70"), `CPU "b" in a file of "a"`},
		{"range", cpuHead + cpuRow("a", "90"), "low first"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f.csv"), []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := renderTables(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "f.csv") {
			t.Errorf("%s: error %v, want one naming f.csv and %q", c.name, err, c.want)
		}
	}
	if _, err := renderTables(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .csv files") {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := spliceTables("no markers here", "x"); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Errorf("document without markers: %v", err)
	}
}

// A GPU timing.csv renders its blocks per query tile when it has the
// column (an empty cell of a decode row as "-"), and a file of the
// earlier schema renders without it.
func TestGPUTableUnion(t *testing.T) {
	meta := "# gpu: H200\n# date: d\n# command: c\n"
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.csv": meta + strings.Join(gpuTimingHeader, ",") + "\nprefill bf16 8K correlated (query),k,1.5,80,8.2,700,14.6,18.69,ok\ndecode bf16 b1 8K,d,0.1,1,0.1,900,18.8,,ok\n",
		"b.csv": meta + strings.Join(gpuTimingHeaderV1, ",") + "\nprefill bf16 8K,k,1.5,80,8.2,700,14.6,ok\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := renderTables(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| case | kernels | ms | TFLOP/s | % of peak | GB/s | % of HBM | blocks/tile | status | portable ms | portable status |",
		"| prefill bf16 8K correlated (query) | k | 1.5 | 80 | 8.2 | 700 | 14.6 | 18.69 | ok | - | - |",
		"| decode bf16 b1 8K | d | 0.1 | 1 | 0.1 | 900 | 18.8 | - | ok | - | - |",
		"| case | kernels | ms | TFLOP/s | % of peak | GB/s | % of HBM | status | portable ms | portable status |",
		"| prefill bf16 8K | k | 1.5 | 80 | 8.2 | 700 | 14.6 | ok | - | - |",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("rendered tables lack %q:\n%s", want, out)
		}
	}
}
