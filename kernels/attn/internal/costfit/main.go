// Command costfit fits the prefill path cost model's constants of a CPU
// tier (kernels/attn/cost.go) to the output of BenchmarkPrefillPaths:
//
//	MSA_CPU_TIER=<tier> go test ./kernels/attn -run '^$' -benchtime 3x \
//	    -bench 'PrefillPaths/<tier>$/kv=(?i)bf16/qpk=16/blk=/paged=false/(random|local)/' |
//	    go run ./kernels/attn/internal/costfit
//
// It reads the benchmark lines of one-token tiles (qpk 16: no lane
// wasted) and, per tier and query-major variant, fits by least squares
// over the cases (the median CPU time of each case's lines, so that
// alternated runs of the command can be piped in together)
//
//	KV-major CPU time    = qpk * (U * n * KVKey + E * KVSlot)
//	query-major CPU time = qpk * U * (n * QMKey + QMSlot)
//
// in nanoseconds, with E the call's CSR entries, U its visible union blocks
// (the benchmark's entries and union metrics) and n the keys per block;
// both sizes of block must be present, since the per-key and per-row
// constants are told apart by them. It prints the constants as cost.go
// writes them, the rate at each block size and the largest residual.
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// point is one benchmark line: a call's CPU time and its counts.
type point struct {
	tier, path       string // path: "kv", "query" or a query variant ("query-f32lanes")
	qpk, n           int
	entries, union   float64
	cpuMS            float64
	pattern, caseKey string
}

// parse reads the PrefillPaths lines of r; other lines are skipped. A
// PrefillPaths line without the metrics the fit needs is an error.
func parse(r io.Reader) ([]point, error) {
	var out []point
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "BenchmarkPrefillPaths/") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		parts := strings.Split(name, "/")
		if len(parts) != 8 {
			return nil, fmt.Errorf("costfit: %q: expected BenchmarkPrefillPaths/<tier>/kv=/qpk=/blk=/paged=/<pattern>/<path>", f[0])
		}
		p := point{tier: parts[1], pattern: parts[6], path: parts[7], entries: -1, union: -1, cpuMS: -1}
		var err error
		if p.qpk, err = field(parts[3], "qpk="); err == nil {
			p.n, err = field(parts[4], "blk=")
		}
		if err != nil {
			return nil, fmt.Errorf("costfit: %q: %v", f[0], err)
		}
		for i := 3; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "entries":
				p.entries = v
			case "union":
				p.union = v
			case "cpu-ms":
				p.cpuMS = v
			}
		}
		if !(p.entries > 0 && p.union > 0 && p.cpuMS > 0) {
			return nil, fmt.Errorf("costfit: %q: expected positive cpu-ms, entries and union metrics", f[0])
		}
		p.caseKey = strings.Join(parts[2:7], "/")
		out = append(out, p)
	}
	return out, sc.Err()
}

func field(s, prefix string) (int, error) {
	if !strings.HasPrefix(s, prefix) {
		return 0, fmt.Errorf("expected %s<n>, got %q", prefix, s)
	}
	return strconv.Atoi(s[len(prefix):])
}

// fit2 solves the least-squares problem t ~ a*x + b*y (no intercept) and
// returns a, b and the largest relative residual.
func fit2(x, y, t []float64) (a, b, worst float64, err error) {
	var sxx, sxy, syy, sxt, syt float64
	for i := range t {
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
		syy += y[i] * y[i]
		sxt += x[i] * t[i]
		syt += y[i] * t[i]
	}
	det := sxx*syy - sxy*sxy
	if !(math.Abs(det) > 1e-12*sxx*syy) {
		return 0, 0, 0, fmt.Errorf("the cases do not tell the two constants apart (one block size?)")
	}
	a = (sxt*syy - syt*sxy) / det
	b = (syt*sxx - sxt*sxy) / det
	for i := range t {
		worst = math.Max(worst, math.Abs(a*x[i]+b*y[i]-t[i])/t[i])
	}
	return a, b, worst, nil
}

// Fit is one tier's fitted constants for one query-major variant.
type Fit struct {
	Tier, Variant                string
	QMKey, QMSlot, KVKey, KVSlot float64
	QMResidual, KVResidual       float64 // the largest relative residual of each path's fit
	BlockSizes                   []int
	Cases, KVPoints, QueryPoints int
}

// Rate is the model's rate at n keys per block (plan.TileVerdict.Rate).
func (f Fit) Rate(n float64) float64 { return (f.QMKey + f.QMSlot/n) / (f.KVKey + f.KVSlot/n) }

// medians returns one point per case of pts: its first line with the
// median CPU time of the case's lines.
func medians(pts []point) []point {
	byCase := map[string][]point{}
	var order []string
	for _, p := range pts {
		if byCase[p.caseKey] == nil {
			order = append(order, p.caseKey)
		}
		byCase[p.caseKey] = append(byCase[p.caseKey], p)
	}
	out := make([]point, 0, len(order))
	for _, c := range order {
		ps := byCase[c]
		t := make([]float64, len(ps))
		for i, p := range ps {
			t[i] = p.cpuMS
		}
		sort.Float64s(t)
		m := ps[0]
		m.cpuMS = (t[(len(t)-1)/2] + t[len(t)/2]) / 2
		out = append(out, m)
	}
	return out
}

// fits fits every tier and query-major variant of pts (qpk 16 lines only).
func fits(pts []point) ([]Fit, error) {
	type key struct{ tier, path string }
	groups := map[key][]point{}
	for _, p := range pts {
		if p.qpk != 16 {
			continue
		}
		groups[key{p.tier, p.path}] = append(groups[key{p.tier, p.path}], p)
	}
	var out []Fit
	for k, lines := range groups {
		groups[k] = medians(lines)
	}
	for k, kv := range groups {
		if k.path != "kv" {
			continue
		}
		var x, y, t []float64
		for _, p := range kv {
			x, y, t = append(x, 16*p.union*float64(p.n)), append(y, 16*p.entries), append(t, p.cpuMS*1e6)
		}
		kvKey, kvSlot, kvRes, err := fit2(x, y, t)
		if err != nil {
			return nil, fmt.Errorf("costfit: %s kv: %v", k.tier, err)
		}
		for qk, q := range groups {
			if qk.tier != k.tier || !strings.HasPrefix(qk.path, "query") {
				continue
			}
			var x, y, t []float64
			sizes, cases := map[int]bool{}, map[string]bool{}
			for _, p := range q {
				x, y, t = append(x, 16*p.union*float64(p.n)), append(y, 16*p.union), append(t, p.cpuMS*1e6)
				sizes[p.n], cases[p.caseKey] = true, true
			}
			qmKey, qmSlot, qmRes, err := fit2(x, y, t)
			if err != nil {
				return nil, fmt.Errorf("costfit: %s %s: %v", k.tier, qk.path, err)
			}
			f := Fit{Tier: k.tier, Variant: qk.path, QMKey: qmKey, QMSlot: qmSlot, KVKey: kvKey, KVSlot: kvSlot,
				QMResidual: qmRes, KVResidual: kvRes, Cases: len(cases)}
			for n := range sizes {
				f.BlockSizes = append(f.BlockSizes, n)
			}
			sort.Ints(f.BlockSizes)
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tier != out[j].Tier {
			return out[i].Tier < out[j].Tier
		}
		return out[i].Variant < out[j].Variant
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("costfit: no tier with both kv and query lines at qpk=16")
	}
	return out, nil
}

func main() {
	pts, err := parse(os.Stdin)
	if err == nil {
		var fs []Fit
		if fs, err = fits(pts); err == nil {
			for _, f := range fs {
				var rates []string
				for _, n := range f.BlockSizes {
					rates = append(rates, fmt.Sprintf("%.2f at %d-key blocks", f.Rate(float64(n)), n))
				}
				fmt.Printf("// %s, query-major %s: rate %s; %d cases, largest residual kv %.1f%%, query %.1f%%\n",
					f.Tier, f.Variant, strings.Join(rates, ", "), f.Cases, 100*f.KVResidual, 100*f.QMResidual)
				fmt.Printf("pathCosts{QMKey: %.3g, QMSlot: %.3g, KVKey: %.3g, KVSlot: %.3g, Staged: 2}\n", f.QMKey, f.QMSlot, f.KVKey, f.KVSlot)
			}
			return
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
