package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// benchLine formats a BenchmarkPrefillPaths line as go test prints it.
func benchLine(tier, pattern, path string, n int, entries, union, cpuMS float64) string {
	return fmt.Sprintf("BenchmarkPrefillPaths/%s/kv=bf16/qpk=16/blk=%d/paged=false/%s/%s-2 \t 3\t 700000000 ns/op\t 70.0 %%peak\t 0 auto-query\t 350.0 best-ms\t %.1f cpu-ms\t %.0f entries\t %.0f union",
		tier, n, pattern, path, cpuMS, entries, union)
}

// TestFitRecoversConstants: lines made from known constants give them
// back, with alternated runs reduced to each case's median (an outlier
// run moves nothing), and the rate follows.
func TestFitRecoversConstants(t *testing.T) {
	want := Fit{QMKey: 2.85, QMSlot: 32.1, KVKey: 2.38, KVSlot: 72.2}
	var lines []string
	for _, c := range []struct {
		pattern        string
		n              int
		entries, union float64
	}{{"random", 128, 118097, 115712}, {"local", 128, 118258, 115712}, {"random", 64, 124700, 123392}, {"local", 64, 124682, 123392}} {
		kv := 16 * (c.union*float64(c.n)*want.KVKey + c.entries*want.KVSlot) / 1e6
		q := 16 * c.union * (float64(c.n)*want.QMKey + want.QMSlot) / 1e6
		for _, f := range []float64{1, 1, 1.3} { // the third run an outlier: the median ignores it
			lines = append(lines, benchLine("avx512bf16", c.pattern, "kv", c.n, c.entries, c.union, kv*f),
				benchLine("avx512bf16", c.pattern, "query", c.n, c.entries, c.union, q*f))
		}
	}
	lines = append(lines, "goos: linux", "PASS")
	pts, err := parse(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fits(pts)
	if err != nil || len(fs) != 1 {
		t.Fatalf("fits %v, %v", fs, err)
	}
	f := fs[0]
	// The lines carry cpu-ms to 0.1 ms: a relative 1e-4 at most.
	for _, x := range []struct {
		name      string
		got, want float64
	}{{"QMKey", f.QMKey, want.QMKey}, {"QMSlot", f.QMSlot, want.QMSlot}, {"KVKey", f.KVKey, want.KVKey}, {"KVSlot", f.KVSlot, want.KVSlot}} {
		if math.Abs(x.got/x.want-1) > 1e-2 {
			t.Errorf("%s = %v, want %v", x.name, x.got, x.want)
		}
	}
	if f.Tier != "avx512bf16" || f.Variant != "query" || f.Cases != 4 || len(f.BlockSizes) != 2 || math.Abs(f.Rate(128)/want.Rate(128)-1) > 1e-3 {
		t.Errorf("fit %+v, rate %v at 128, want %v", f, f.Rate(128), want.Rate(128))
	}
}

// TestFitReproducesCommittedFit: the measurements committed in
// docs/results/pathcost/amd-zen4.csv (quiet host, avx512bf16) give the
// fit committed next to them, from which cost.go's constants come.
func TestFitReproducesCommittedFit(t *testing.T) {
	f, err := os.Open("../../../../docs/results/pathcost/amd-zen4.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	const commit = "33432e5"
	counts := map[string][2]float64{} // case -> entries, union
	committed := map[string]float64{}
	var measured [][]string
	for _, r := range rows[1:] {
		tier, cs, path, metric, v := r[4], r[5], r[6], r[7], r[8]
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		switch {
		case metric == "entries" || metric == "union":
			c := counts[cs]
			c[map[string]int{"entries": 0, "union": 1}[metric]] = x
			counts[cs] = c
		case r[9] == commit && r[3] == "fit" && tier == "avx512bf16":
			committed[metric] = x
		case r[9] == commit && metric == "cpu_ms" && tier == "avx512bf16":
			measured = append(measured, []string{cs, path, v})
		}
	}
	var lines []string
	for _, m := range measured {
		cs, path := m[0], m[1]
		c, ok := counts[cs]
		if !ok {
			t.Fatalf("no entries or union for %s", cs)
		}
		n := 128
		if strings.Contains(cs, "blk64") {
			n = 64
		}
		pattern := cs[strings.LastIndexByte(cs, '-')+1:]
		cpu, _ := strconv.ParseFloat(m[2], 64)
		lines = append(lines, benchLine("avx512bf16", pattern, path, n, c[0], c[1], cpu))
	}
	if len(lines) < 8 || len(committed) != 4 {
		t.Fatalf("%d measured lines and committed fit %v", len(lines), committed)
	}
	pts, err := parse(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fits(pts)
	if err != nil {
		t.Fatal(err)
	}
	var got *Fit
	for i := range fs {
		if fs[i].Variant == "query" {
			got = &fs[i]
		}
	}
	if got == nil {
		t.Fatalf("no query fit in %v", fs)
	}
	for name, v := range map[string]float64{"QMKey_ns": got.QMKey, "QMSlot_ns": got.QMSlot, "KVKey_ns": got.KVKey, "KVSlot_ns": got.KVSlot} {
		if math.Abs(v/committed[name]-1) > 5e-3 {
			t.Errorf("%s = %.4g, committed %.4g", name, v, committed[name])
		}
	}
}

// TestParseRefusals: a PrefillPaths line without the fit's metrics or
// with a malformed name is an error; one block size cannot be fitted.
func TestParseRefusals(t *testing.T) {
	for _, bad := range []string{
		"BenchmarkPrefillPaths/avx2/kv=bf16/qpk=16/blk=128/paged=false/random/kv-2 3 1 ns/op 5 cpu-ms 7 entries",
		"BenchmarkPrefillPaths/avx2/kv=bf16/qpk=16/blk=x/paged=false/random/kv-2 3 1 ns/op 5 cpu-ms 7 entries 6 union",
		"BenchmarkPrefillPaths/avx2/kv=bf16/qpk=16/random/kv-2 3 1 ns/op 5 cpu-ms 7 entries 6 union",
	} {
		if _, err := parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	one := strings.Join([]string{benchLine("avx2", "random", "kv", 128, 100, 90, 10), benchLine("avx2", "local", "kv", 128, 100, 90, 11),
		benchLine("avx2", "random", "query", 128, 100, 90, 12)}, "\n")
	pts, err := parse(strings.NewReader(one))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fits(pts); err == nil {
		t.Error("one block size fitted")
	}
}
