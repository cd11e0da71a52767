package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sparseattn/msa/internal/cputime"
)

var graphPairs = flag.Int("graph-pairs", 5, "graph group: pairs of runs that compare each BLAS with gonum on one graph, the two runs of a pair back to back in alternating order (0: none); needs gonum in -graph-blas")

// The graph cases of two BLAS run one after the other, so a change of the
// machine's load between them moves their ratio. The pairs measure the
// speed-up of each BLAS over Gonum on one graph: each pair is a run on
// Gonum and a run on the other BLAS back to back (which goes first
// alternates), so both runs of a pair see the same load, and the reported
// speed-up is the median over the pairs of Gonum's time / the other's.
// Each run's process CPU time is paired the same way: on a host shared
// with other work it is the steadier of the two.

// blasPair is the paired comparison of one case on one BLAS with Gonum.
type blasPair struct {
	c                  graphCase // the case on the compared BLAS
	base               string    // the case's name without the BLAS suffix
	gonumMS, blasMS    []float64 // per pair, wall ms
	gonumCPU, blasCPU  []float64 // per pair, process CPU ms (empty where unknown)
	wallX, cpuX        []float64 // per pair, Gonum's / the BLAS's
	err                string
	loadStart, loadEnd float64
}

// pairCases returns the cases to pair: every case on a BLAS other than
// Gonum whose Gonum counterpart is in the suite.
func pairCases(cs []graphCase) []blasPair {
	gonum := map[string]bool{}
	for _, c := range cs {
		if c.blas == "gonum" {
			gonum[c.name] = true
		}
	}
	var ps []blasPair
	for _, c := range cs {
		base := strings.TrimSuffix(strings.TrimSuffix(c.name, "-msablas"), "-openblas")
		if c.blas != "gonum" && gonum[base] {
			ps = append(ps, blasPair{c: c, base: base})
		}
	}
	return ps
}

// runBLASPairs measures pairs runs of p's graph alternately on Gonum and
// on p's BLAS, after one warm-up run on each.
func runBLASPairs(cfg *config, p *blasPair, pairs int, prog *graphProgress) error {
	gr, err := newGraphRunner(cfg, p.c)
	if err != nil {
		return err
	}
	defer gr.close()
	gr.start()
	defer useGraphBLAS("gonum")
	timed := func(blas string) (wall, cpu float64, err error) {
		useGraphBLAS(blas)
		c0, ok0 := cputime.Process()
		d, err := gr.run()
		c1, ok1 := cputime.Process()
		cpu = -1
		if ok0 && ok1 {
			cpu = ms(c1 - c0)
		}
		return ms(d), cpu, err
	}
	for _, b := range []string{"gonum", p.c.blas} { // warm-up
		if _, _, err := timed(b); err != nil {
			return err
		}
	}
	l0 := readCPUSample()
	for i := range pairs {
		prog.phase(p.base, fmt.Sprintf("BLAS pair %d/%d", i+1, pairs))
		order := []string{"gonum", p.c.blas}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		var wall, cpu [2]float64 // gonum, other
		for _, b := range order {
			w, c, err := timed(b)
			if err != nil {
				return err
			}
			k := 1
			if b == "gonum" {
				k = 0
			}
			wall[k], cpu[k] = w, c
		}
		p.gonumMS, p.blasMS = append(p.gonumMS, wall[0]), append(p.blasMS, wall[1])
		p.wallX = append(p.wallX, wall[0]/wall[1])
		if cpu[0] > 0 && cpu[1] > 0 {
			p.gonumCPU, p.blasCPU = append(p.gonumCPU, cpu[0]), append(p.blasCPU, cpu[1])
			p.cpuX = append(p.cpuX, cpu[0]/cpu[1])
		}
	}
	ls := loadBetween(l0, readCPUSample())
	p.loadStart, p.loadEnd = ls.loadStart, ls.loadEnd
	return nil
}

// pairHeader is the columns of the BLAS pairs table.
var pairHeader = []string{"case", "blas", "pairs", "gonum_ms", "ms", "x_wall", "x_range", "x_cpu", "load"}

// pairCells is p's row.
func (p *blasPair) cells() []string {
	if p.err != "" {
		return []string{p.base, p.c.blas, "error", "", "", "", "", "", ""}
	}
	xr := "-"
	if len(p.wallX) > 0 {
		xr = fmt.Sprintf("%.2f-%.2f", slices.Min(p.wallX), slices.Max(p.wallX))
	}
	cpuX := "-"
	if len(p.cpuX) > 0 {
		cpuX = fmt.Sprintf("%.2f", median(p.cpuX))
	}
	return []string{p.base, p.c.blas, fmt.Sprint(len(p.wallX)), f1(median(p.gonumMS)), f1(median(p.blasMS)),
		fmt.Sprintf("%.2f", median(p.wallX)), xr, cpuX, fmt.Sprintf("%.2f-%.2f", p.loadStart, p.loadEnd)}
}

// pairLegend explains every column of pairHeader.
const pairLegend = "BLAS pairs: each pair runs the case's graph once on Gonum (Gorgonia's default BLAS) and once on " +
	"the BLAS named, back to back, the order alternating from pair to pair. Columns: case the graph case; " +
	"blas the BLAS compared with Gonum; pairs how many; gonum_ms and ms the median RunAll times on Gonum and " +
	"on the BLAS; x_wall the median over the pairs of Gonum's time / the BLAS's (the speed-up of the whole " +
	"run); x_range the lowest and highest pair's; x_cpu the same median of the process CPU time per run; " +
	"load the load average at the start and end of the pairs."

// printBLASPairs writes the pairs table and its legend.
func printBLASPairs(w io.Writer, ps []blasPair) {
	if len(ps) == 0 {
		return
	}
	rows := [][]string{pairHeader}
	for i := range ps {
		rows = append(rows, ps[i].cells())
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "BLAS pairs (the speed-up over Gonum, run by run on the same graph):")
	alignRows(w, rows, "")
	for _, p := range ps {
		if p.err != "" {
			printWrapped(w, fmt.Sprintf("%s on %s: ERROR: %s", p.base, p.c.blas, p.err), "  ")
		}
	}
	printWrapped(w, pairLegend, "")
}

// runPairsGroup runs the BLAS pairs of the suite's cases (none when
// -graph-pairs is 0, which graphSuite checked is not negative, or Gonum is
// not in -graph-blas).
func runPairsGroup(cfg *config, cs []graphCase, prog *graphProgress) ([]blasPair, bool) {
	if *graphPairs == 0 {
		return nil, false
	}
	ps := pairCases(cs)
	failed := false
	for i := range ps {
		if err := runBLASPairs(cfg, &ps[i], *graphPairs, prog); err != nil {
			ps[i].err = err.Error()
			failed = true
		}
		prog.step()
	}
	return ps, failed
}

// pairCSVHeader is graph-pairs.csv's columns: one row per pair.
var pairCSVHeader = []string{"case", "blas", "pair", "first", "gonum_ms", "ms", "x_wall", "gonum_cpu_ms", "cpu_ms", "x_cpu", "load"}

// pairCSVRows returns graph-pairs.csv's rows (header first).
func pairCSVRows(ps []blasPair) [][]string {
	rows := [][]string{pairCSVHeader}
	for _, p := range ps {
		for i := range p.wallX {
			first := "gonum"
			if i%2 == 1 {
				first = p.c.blas
			}
			gc, bc, xc := "", "", ""
			if i < len(p.cpuX) {
				gc, bc, xc = num(p.gonumCPU[i]), num(p.blasCPU[i]), num(p.cpuX[i])
			}
			rows = append(rows, []string{p.base, p.c.blas, fmt.Sprint(i + 1), first, num(p.gonumMS[i]), num(p.blasMS[i]),
				num(p.wallX[i]), gc, bc, xc, fmt.Sprintf("%.2f-%.2f", p.loadStart, p.loadEnd)})
		}
	}
	return rows
}
