package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var graphHeader = []string{"case", "machine", "tokens/s", "ms/run", "min-max", "runs", "eager_ms", "overhead",
	"allocs/run", "MB/run", "peak_RSS_GB (start)", "noisy"}

func (r *graphResult) cells() []string {
	c := r.c
	if r.err != "" {
		return []string{c.name, c.machine, "error", "", "", "", "", "", "", "", "", ""}
	}
	medS := r.med.Seconds()
	tps := 0.0
	if medS > 0 {
		tps = float64(c.tokens()) / medS
	}
	noisy := "-"
	if r.noisy != "" {
		noisy = "yes: " + r.noisy
	}
	return []string{c.name, c.machine, f1(tps), f1(ms(r.med)), fmt.Sprintf("%s-%s", f1(ms(r.lo)), f1(ms(r.hi))),
		strconv.Itoa(len(r.reps)), f1(ms(r.eagerMed)), fmt.Sprintf("%.3f", r.overhead),
		f1(r.allocs), f1(r.bytes / 1e6), fmt.Sprintf("%.2f (%.2f)", r.peakRSS/1e9, r.rssStart/1e9), noisy}
}

// kindRows returns a case's per-kind breakdown: kind, nodes, graph ms per
// run, share of the run, eager ms; the machine's unattributed time last.
func (r *graphResult) kindRows() [][]string {
	nodes := map[string]int{}
	for _, k := range r.prof.Kinds {
		nodes[k.Kind] = k.Nodes
	}
	var rows [][]string
	share := func(d time.Duration) string {
		if r.med <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(r.prof.Total/time.Duration(max(r.prof.Runs, 1))))
	}
	for _, k := range r.kindOrder {
		rows = append(rows, []string{k, strconv.Itoa(nodes[k]), fmt.Sprintf("%.3f", ms(r.kindGraph[k])), share(r.kindGraph[k]),
			fmt.Sprintf("%.3f", ms(r.kindEager[k]))})
	}
	rows = append(rows, []string{"(machine: between nodes)", "-", fmt.Sprintf("%.3f", ms(r.unattributed)), share(r.unattributed), "-"})
	return rows
}

var kindHeader = []string{"kind", "nodes", "graph_ms", "share", "eager_ms"}

// alignRows writes rows as an aligned text table (first column left).
func alignRows(w io.Writer, rows [][]string, indent string) {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for n, row := range rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range row {
			padding := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i == 0 {
				b.WriteString(c + padding)
			} else {
				b.WriteString("  " + padding + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if n == 0 {
			total := len(indent) + 2*(len(width)-1)
			for _, x := range width {
				total += x
			}
			fmt.Fprintln(w, indent+strings.Repeat("-", total-len(indent)))
		}
	}
}

// graphTermHeader is the terminal table's columns: the ones a reader
// compares at a glance, within termWidth columns. graph.csv and graph.md
// keep every column (graphHeader, graphCSVHeader).
var graphTermHeader = []string{"case", "tok/s", "ms/run", "eager_ms", "ovh", "allocs", "MB", "RSS_GB", "noise"}

// graphTermLegend explains every column of graphTermHeader.
const graphTermLegend = "Columns: case the graph case (-msablas and -openblas: Gorgonia's matmuls on that BLAS); " +
	"tok/s tokens per second (prefill: T / ms/run; decode: batch / ms/run); " +
	"ms/run median RunAll time (decode: one step of all layers); " +
	"eager_ms the same nodes' ops called one after another outside the machine on that run's inputs " +
	"(median of these replays); ovh median over the runs of run time / its replay; " +
	"allocs and MB allocations and megabytes per run (decode: per step), Let and Reset included; " +
	"RSS_GB the process's peak resident set over the case (VmHWM); " +
	"noise NOISY when the noise rules (bench/README.md, \"Noise\") flag the RunAll times or the load " +
	"(the reasons follow the case's breakdown). " +
	"Every column (min-max, runs, start RSS, setup, load): graph.csv and graph.md with -out."

// termCells is a case's row of the terminal table.
func (r *graphResult) termCells() []string {
	if r.err != "" {
		return []string{r.c.name, "error", "", "", "", "", "", "", ""}
	}
	tps := 0.0
	if s := r.med.Seconds(); s > 0 {
		tps = float64(r.c.tokens()) / s
	}
	noise := "ok"
	if r.noisy != "" {
		noise = "NOISY"
	}
	return []string{r.c.name, f1(tps), f1(ms(r.med)), f1(ms(r.eagerMed)), fmt.Sprintf("%.2f", r.overhead),
		f1(r.allocs), f1(r.bytes / 1e6), fmt.Sprintf("%.2f", r.peakRSS/1e9), noise}
}

// printWrapped writes text wrapped to termWidth columns, continuation
// lines indented by indent.
func printWrapped(w io.Writer, text, indent string) {
	for i, l := range wrap(text, termWidth-len(indent)) {
		if i > 0 {
			l = indent + l
		}
		fmt.Fprintln(w, l)
	}
}

// printGraphTable writes the graph table, then each case's breakdown and
// the legend, every line within termWidth columns.
func printGraphTable(w io.Writer, rs []*graphResult) {
	fmt.Fprintln(w, "Graph cases (Gorgonia graphs with the ops; every run profiled node by node):")
	rows := [][]string{graphTermHeader}
	for _, r := range rs {
		rows = append(rows, r.termCells())
	}
	alignRows(w, rows, "")
	for _, r := range rs {
		fmt.Fprintln(w)
		if r.err != "" {
			printWrapped(w, fmt.Sprintf("%s: ERROR: %s", r.c.name, r.err), "  ")
			continue
		}
		head := fmt.Sprintf("%s: %s; %s", r.c.name, r.describe(), r.noiseNote)
		if r.noisy != "" {
			head += "; NOISY: " + r.noisy
		}
		printWrapped(w, fmt.Sprintf("%s; per run, by op kind (nodes cover %.1f%% of RunAll):", head,
			100*float64(r.attrib)/float64(max(r.attrib+r.unattributed, 1))), "  ")
		alignRows(w, append([][]string{kindHeader}, r.kindRows()...), "  ")
	}
	fmt.Fprintln(w)
	printWrapped(w, graphTermLegend, "")
	printWrapped(w, "Breakdown: kind the op kind of the nodes; nodes how many; graph_ms their time per run "+
		"inside the machine; share of the run; eager_ms the same ops' replay; (machine: between nodes) the "+
		"RunAll time no node accounts for.", "")
}

// describe states a case's shape.
func (r *graphResult) describe() string {
	c := r.c
	cpu := ""
	if r.cpuMed > 0 {
		cpu = fmt.Sprintf(", process CPU %s ms per run (median)", f1(ms(r.cpuMed)))
	}
	if c.kind == "prefill" {
		return fmt.Sprintf("one layer, T = %d, d_model %d, Hq %d, Hkv %d, D %d, topK %d, %s machine, %d runs%s",
			c.seqLen, c.dm.model, c.dm.hq, c.dm.hkv, c.dm.d, c.topK, c.machine, len(r.reps), cpu)
	}
	return fmt.Sprintf("one decode step, %d layers, batch %d, context %d (+1 per step), d_model %d, Hq %d, Hkv %d, D %d, page %d, BF16 cache, %d steps%s",
		c.layers, c.batch, c.seqLen, c.dm.model, c.dm.hq, c.dm.hkv, c.dm.d, c.page, len(r.reps), cpu)
}

var graphCSVHeader = []string{"case", "kind", "machine", "tokens", "seq_len", "batch", "layers", "d_model", "hq", "hkv", "d",
	"runs", "time_ms", "min_ms", "max_ms", "cpu_ms", "tokens_per_s", "eager_ms", "eager_reps", "overhead", "allocs_per_run", "bytes_per_run",
	"peak_rss_bytes", "start_rss_bytes", "attributed_ms", "machine_ms", "setup_ms", "load", "noisy", "error"}

func writeGraphOutputs(dir string, header []string, rs []*graphResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var main, kinds [][]string
	main = append(main, graphCSVHeader)
	kinds = append(kinds, []string{"case", "kind", "nodes", "graph_ms_per_run", "share", "eager_ms"})
	for _, r := range rs {
		c := r.c
		tps := ""
		if r.med > 0 {
			tps = num(float64(c.tokens()) / r.med.Seconds())
		}
		main = append(main, []string{c.name, c.kind, c.machine, strconv.Itoa(c.tokens()), strconv.Itoa(c.seqLen), strconv.Itoa(c.batch),
			strconv.Itoa(c.layers), strconv.Itoa(c.dm.model), strconv.Itoa(c.dm.hq), strconv.Itoa(c.dm.hkv), strconv.Itoa(c.dm.d),
			strconv.Itoa(len(r.reps)), num(ms(r.med)), num(ms(r.lo)), num(ms(r.hi)), num(ms(r.cpuMed)), tps, num(ms(r.eagerMed)), strconv.Itoa(len(r.eagerReps)),
			num(r.overhead), num(r.allocs), num(r.bytes), num(r.peakRSS), num(r.rssStart), num(ms(r.attrib)), num(ms(r.unattributed)), num(r.setupMS),
			fmt.Sprintf("%.2f-%.2f", r.ls.loadStart, r.ls.loadEnd), r.noisy, r.err})
		if r.err == "" {
			for _, row := range r.kindRows() {
				kinds = append(kinds, append([]string{c.name}, row...))
			}
		}
	}
	for _, f := range []struct {
		name string
		rows [][]string
	}{{"graph.csv", main}, {"graph-kinds.csv", kinds}} {
		if err := writeCSVRows(filepath.Join(dir, f.name), f.rows); err != nil {
			return err
		}
	}
	var b strings.Builder
	b.WriteString("# msa graph benchmark\n\n")
	for _, h := range header {
		b.WriteString("- " + h + "\n")
	}
	b.WriteString("\n| " + strings.Join(graphHeader, " | ") + " |\n|---|")
	for range graphHeader[1:] {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range rs {
		b.WriteString("| " + strings.Join(r.cells(), " | ") + " |\n")
	}
	for _, r := range rs {
		if r.err != "" {
			fmt.Fprintf(&b, "\n%s: ERROR: %s\n", r.c.name, r.err)
			continue
		}
		fmt.Fprintf(&b, "\n**%s**: %s; %s.\n\n| %s |\n|---|---:|---:|---:|---:|\n", r.c.name, r.describe(), r.noiseNote,
			strings.Join(kindHeader, " | "))
		for _, row := range r.kindRows() {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	b.WriteString("\nColumns are explained in bench/README.md (graph group).\n")
	if err := os.WriteFile(filepath.Join(dir, "graph.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for _, r := range rs {
		if r.err != "" {
			continue
		}
		if err := writeGraphPlot(filepath.Join(dir, r.c.name+".png"), r); err != nil {
			return err
		}
	}
	return nil
}

func writeCSVRows(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeGraphPlot draws two stacked bars, the graph run and the eager
// replay of the same ops, split by op kind (the graph bar's top segment is
// the machine's time between nodes).
func writeGraphPlot(path string, r *graphResult) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: where a run's time goes", r.c.name)
	p.Y.Label.Text = "ms per run"
	p.NominalX("graph ("+r.c.machine+")", "eager ops")
	p.Legend.Top = true
	p.Legend.Left = false
	kinds := append([]string(nil), r.kindOrder...)
	sort.SliceStable(kinds, func(a, b int) bool { return r.kindGraph[kinds[a]] > r.kindGraph[kinds[b]] })
	kinds = append(kinds, "(machine)")
	var below *plotter.BarChart
	w := vg.Points(60)
	for i, k := range kinds {
		g, e := r.kindGraph[k], r.kindEager[k]
		if k == "(machine)" {
			g, e = r.unattributed, 0
		}
		bc, err := plotter.NewBarChart(plotter.Values{ms(g), ms(e)}, w)
		if err != nil {
			return err
		}
		bc.Color = graphPalette[i%len(graphPalette)]
		bc.LineStyle.Width = 0
		if below != nil {
			bc.StackOn(below)
		}
		below = bc
		p.Add(bc)
		p.Legend.Add(k, bc)
	}
	p.Y.Min = 0
	p.Y.Max *= 1.05
	p.X.Min, p.X.Max = -0.6, 2.8 // room on the right for the legend
	return p.Save(8*vg.Inch, 6*vg.Inch, path)
}

// graphPalette has one distinct colour per op kind of the graphs.
var graphPalette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	color.RGBA{0x17, 0xbe, 0xcf, 0xff}, color.RGBA{0x39, 0x3b, 0x79, 0xff}, color.RGBA{0xad, 0x49, 0x4a, 0xff},
	color.RGBA{0x00, 0x00, 0x00, 0xff},
}
