package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The plot has one row of panels per case family that ran: prefill
// (sparse and NVFP4 K/V; x = tokens) and decode (x = context length, one
// line per dtype and batch). The left panel of a row is the effective
// GFLOP/s, y scaled to the data, each point labelled with its %peak and
// the calibrated peak as a dashed reference line (or, when far above the
// data, named in the title); the right panel the speedup over each
// baseline on a log axis. A baseline time extrapolated in length
// ((T/Tm)^2) is drawn with a hollow marker, a dashed segment and the label
// "extrap.".

// plotPoint is one point of a series.
type plotPoint struct {
	x, y   float64
	extrap bool   // extrapolated: hollow marker, dashed segment
	label  string // drawn beside the point
}

// plotSeries is one line of a panel.
type plotSeries struct {
	name  string
	pts   []plotPoint
	color int // plotutil palette index
	shape int // index into filledShapes / hollowShapes
}

// panel is one plot of the figure, built from the results before drawing.
type panel struct {
	title, xLabel, yLabel string
	logY                  bool
	series                []plotSeries
	peak                  float64 // dashed reference line; 0 for none
	peakLabel             string
	yMin, yMax            float64
	xs                    []float64 // tick positions, ascending
}

var (
	filledShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}
	hollowShapes = []draw.GlyphDrawer{draw.RingGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}}
)

// peakOnScale: the peak line is drawn when it is at most this multiple of
// the largest plotted GFLOP/s; above it the axis would squash the data.
const peakOnScale = 3.0

// seriesName groups the results of one line: kind and dtype, and for
// decode the batch.
func seriesName(c caseSpec) string {
	switch c.Kind {
	case "decode":
		return fmt.Sprintf("decode %s b%d", c.DType, c.Batch)
	case "nvfp4":
		return "nvfp4 K/V, " + c.DType + " Q"
	}
	return c.Kind + " " + c.DType
}

// baselines are the speedup lines of the right-hand panels.
var baselines = []struct {
	name string
	get  func(r *result) (speedup float64, extrap bool)
}{
	{"Gorgonia dense", func(r *result) (float64, bool) { return r.speedupDense, r.denseExtrap }},
	{"PyTorch dense FP32", func(r *result) (float64, bool) { return r.torch.speedup, r.torch.extrap }},
	{"PyTorch dense BF16", func(r *result) (float64, bool) { return r.tdbf16.speedup, r.tdbf16.extrap }},
	{"PyTorch same work FP32", func(r *result) (float64, bool) { return r.tsparse.speedup, r.tsparse.extrap }},
	{"PyTorch same work BF16", func(r *result) (float64, bool) { return r.tbf16.speedup, r.tbf16.extrap }},
}

// buildPanels turns the results into panels: for each family that has
// results, a GFLOP/s panel and (when any baseline ran) a speedup panel.
func buildPanels(cal calibration, rs []*result) []panel {
	var out []panel
	for _, fam := range []struct {
		name, xLabel, limit string
		kinds               map[string]bool
	}{
		{"prefill", "tokens (one causal sequence)", "paired % of the compute peak", map[string]bool{"prefill": true, "nvfp4": true}},
		{"decode", "context length (tokens per request)", "paired % of the roofline min(peak, bandwidth x flops/bytes)", map[string]bool{"decode": true}},
	} {
		var sel []*result
		for _, r := range rs {
			if r.err == "" && r.timeMS > 0 && fam.kinds[r.c.Kind] {
				sel = append(sel, r)
			}
		}
		if len(sel) == 0 {
			continue
		}
		sort.SliceStable(sel, func(i, j int) bool { return sel[i].c.SeqLen < sel[j].c.SeqLen })
		var names []string
		gf := map[string]*plotSeries{}
		xset := map[float64]bool{}
		dataMax := 0.0
		for _, r := range sel {
			n := seriesName(r.c)
			s := gf[n]
			if s == nil {
				s = &plotSeries{name: n, color: len(names), shape: len(names) % len(filledShapes)}
				gf[n] = s
				names = append(names, n)
			}
			label := ""
			switch lim := limitPct(r); {
			case lim > 100:
				label = "noisy"
			case lim > 0:
				label = fmt.Sprintf("%.0f%%", lim)
			}
			x := float64(r.c.SeqLen)
			xset[x] = true
			s.pts = append(s.pts, plotPoint{x: x, y: r.gflops, label: label})
			dataMax = max(dataMax, r.gflops)
		}
		xs := make([]float64, 0, len(xset))
		for x := range xset {
			xs = append(xs, x)
		}
		sort.Float64s(xs)
		p := panel{title: fam.name + ": effective GFLOP/s\nlabels: " + fam.limit, xLabel: fam.xLabel, yLabel: "GFLOP/s",
			yMax: dataMax * 1.3, xs: xs}
		if cal.peak > 0 {
			if cal.peak <= peakOnScale*dataMax {
				p.peak = cal.peak
				p.peakLabel = fmt.Sprintf("peak %s: %.0f GFLOP/s", cal.peakTier, cal.peak)
				p.yMax = max(p.yMax, cal.peak*1.15)
			} else {
				p.title += fmt.Sprintf("\npeak %.0f GFLOP/s (%s) is above the axis", cal.peak, cal.peakTier)
			}
		}
		noisy := 0
		for _, r := range sel {
			if len(r.noise) > 0 {
				noisy++
			}
		}
		if noisy > 0 {
			p.title += fmt.Sprintf("\nNOISY: %d of %d points", noisy, len(sel))
		}
		for _, n := range names {
			p.series = append(p.series, *gf[n])
		}
		out = append(out, p)

		sp := panel{title: fam.name + ": speed-up over each baseline\nhollow, dashed: baseline extrapolated" + refBLASTitle(sel, "not real speed-ups"), xLabel: fam.xLabel,
			yLabel: "baseline time / op time", logY: true, xs: xs, yMin: math.Inf(1)}
		for bi, b := range baselines {
			for si, n := range names {
				s := plotSeries{name: n + " vs " + b.name, color: bi, shape: si % len(filledShapes)}
				for _, r := range sel {
					if seriesName(r.c) != n {
						continue
					}
					if v, ex := b.get(r); v > 0 {
						pt := plotPoint{x: float64(r.c.SeqLen), y: v, extrap: ex}
						if ex {
							pt.label = "extrap."
						}
						s.pts = append(s.pts, pt)
						sp.yMin = min(sp.yMin, v)
						sp.yMax = max(sp.yMax, v)
					}
				}
				if len(s.pts) > 0 {
					sp.series = append(sp.series, s)
				}
			}
		}
		if len(sp.series) > 0 {
			// Decades around the data, with headroom for the legend.
			sp.yMin = math.Pow(10, math.Floor(math.Log10(min(sp.yMin, 1))))
			sp.yMax = math.Pow(10, math.Ceil(math.Log10(sp.yMax))+1)
			out = append(out, sp)
		}
	}
	return out
}

// refBLASTitle is the title line, saying what, of a panel whose PyTorch
// baselines ran on the reference BLAS; "" when none did.
func refBLASTitle(rs []*result, what string) string {
	for _, r := range rs {
		if r.anyTorch(func(t *torchResult) bool { return t.refBLAS }) {
			return "\nPyTorch ran on the reference BLAS (unoptimised): " + what
		}
	}
	return ""
}

// timeBars are the bars of the time panel, ours first.
var timeBars = []struct {
	name string
	get  func(r *result) (ms float64, extrap bool)
}{
	{"msa (this op)", func(r *result) (float64, bool) { return r.timeMS, false }},
	{"Gorgonia dense", func(r *result) (float64, bool) { return r.denseMS, r.denseExtrap }},
	{"PyTorch dense FP32", func(r *result) (float64, bool) { return r.torch.ms, r.torch.extrap }},
	{"PyTorch dense BF16", func(r *result) (float64, bool) { return r.tdbf16.ms, r.tdbf16.extrap }},
	{"PyTorch same work FP32", func(r *result) (float64, bool) { return r.tsparse.ms, r.tsparse.extrap }},
	{"PyTorch same work BF16", func(r *result) (float64, bool) { return r.tbf16.ms, r.tbf16.extrap }},
}

// timePlot is the panel read first: per case, our time next to each
// peer's, as bars on a log axis (lower is better); a hollow bar is an
// extrapolated baseline. It is nil when no case has a time.
func timePlot(rs []*result) (*plot.Plot, error) {
	var sel []*result
	for _, r := range rs {
		if r.err == "" && r.timeMS > 0 {
			sel = append(sel, r)
		}
	}
	if len(sel) == 0 {
		return nil, nil
	}
	used := make([]bool, len(timeBars))
	lo, hi := math.Inf(1), 0.0
	for _, r := range sel {
		for i, b := range timeBars {
			if ms, _ := b.get(r); ms > 0 {
				used[i] = true
				lo, hi = min(lo, ms), max(hi, ms)
			}
		}
	}
	var idx []int
	for i, u := range used {
		if u {
			idx = append(idx, i)
		}
	}
	p := plot.New()
	p.Title.Text = "time per case, lower is better: msa next to each baseline\nhollow: baseline extrapolated in length" + refBLASTitle(sel, "its times are not a fair peer")
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Points(6)
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// The floor a fifth of a decade below the shortest bar, so that it shows.
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)-0.2))
	// Two thirds of a decade of headroom above the data for the legend.
	p.Y.Max = math.Pow(10, math.Log10(hi)+0.67)
	var ticks []plot.Tick
	for i, r := range sel {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: r.c.Name})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Tick.Label.Rotation = math.Pi / 8
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.X.Min, p.X.Max = -0.6, float64(len(sel))-0.4
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Add(plotter.NewGrid())
	// Bars side by side within 0.8 of each case's slot, drawn as wide
	// lines from the axis floor: gonum's bar chart starts at zero, which a
	// log axis cannot show.
	slot := 0.8 / float64(len(idx))
	barW := vg.Points(float64(max(2, min(14, 600/(len(sel)*len(idx))))))
	for k, bi := range idx {
		col := plotutil.Color(k)
		var legendLine *plotter.Line
		for i, r := range sel {
			ms, extrap := timeBars[bi].get(r)
			if ms <= 0 {
				continue
			}
			x := float64(i) - 0.4 + slot*(float64(k)+0.5)
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: ms}})
			if err != nil {
				return nil, err
			}
			l.Color = col
			l.Width = barW
			p.Add(l)
			if extrap {
				// Hollow: the bar's inside in white, its outline in colour.
				in, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: ms / 1.06}})
				if err != nil {
					return nil, err
				}
				in.Color = color.White
				in.Width = barW - vg.Points(3)
				p.Add(in)
			}
			if legendLine == nil {
				legendLine = l
			}
		}
		if legendLine != nil {
			ll := *legendLine
			ll.Width = vg.Points(8)
			p.Legend.Add(timeBars[bi].name, &ll)
		}
	}
	return p, nil
}

// writePlot draws the time panel across the top and the family panels
// below it, two per row, into a PNG file.
func writePlot(path string, cal calibration, rs []*result) error {
	panels := buildPanels(cal, rs)
	if len(panels) == 0 {
		return nil
	}
	tp, err := timePlot(rs)
	if err != nil {
		return err
	}
	var plots []*plot.Plot
	for _, pn := range panels {
		p, err := pn.render()
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	cols := 2
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range grid[i] {
			if k := i*cols + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	top := vg.Length(0)
	if tp != nil {
		top = 6 * vg.Inch
	}
	img := vgimg.New(vg.Length(cols)*8*vg.Inch, vg.Length(rows)*6*vg.Inch+top)
	full := draw.New(img)
	dc := full
	if tp != nil {
		// The canvas's origin is bottom left: the grid below, the time
		// panel in the top strip.
		dc = draw.Crop(full, 0, 0, 0, -top)
		tc := draw.Crop(full, 2*vg.Millimeter, -2*vg.Millimeter, vg.Length(rows)*6*vg.Inch+4*vg.Millimeter, -2*vg.Millimeter)
		tp.Draw(tc)
	}
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: 6 * vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(grid, t, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// render draws a panel as a gonum plot.
func (pn panel) render() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.X.Label.Text = pn.xLabel
	p.Y.Label.Text = pn.yLabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, x := range pn.xs {
		ticks = append(ticks, plot.Tick{Value: x, Label: kLabel(int(x))})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(pn.xs) > 0 {
		p.X.Min, p.X.Max = pn.xs[0]/1.4, pn.xs[len(pn.xs)-1]*1.4
	}
	if pn.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Y.Min, p.Y.Max = pn.yMin, pn.yMax
	p.Legend.Top = true
	p.Legend.Left = true
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Points(6)
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Legend.Padding = vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(24)
	p.Add(plotter.NewGrid())
	dashes := []vg.Length{vg.Points(5), vg.Points(3)}
	if pn.peak > 0 && len(pn.xs) > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: pn.peak}, {X: p.X.Max, Y: pn.peak}})
		if err != nil {
			return nil, err
		}
		l.Dashes = dashes
		l.Color = color.Gray{Y: 80}
		p.Add(l)
		p.Legend.Add(pn.peakLabel, l)
	}
	for _, s := range pn.series {
		col := plotutil.Color(s.color)
		// Segments: dashed when either end is extrapolated.
		for i := 1; i < len(s.pts); i++ {
			a, b := s.pts[i-1], s.pts[i]
			l, err := plotter.NewLine(plotter.XYs{{X: a.x, Y: a.y}, {X: b.x, Y: b.y}})
			if err != nil {
				return nil, err
			}
			l.Color = col
			l.Width = vg.Points(1.5)
			if a.extrap || b.extrap {
				l.Dashes = dashes
			}
			p.Add(l)
		}
		var legendGlyph *plotter.Scatter
		var labels plotter.XYLabels
		for _, pt := range s.pts {
			sc, err := plotter.NewScatter(plotter.XYs{{X: pt.x, Y: pt.y}})
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle.Color = col
			sc.GlyphStyle.Radius = vg.Points(4)
			sc.GlyphStyle.Shape = filledShapes[s.shape]
			if pt.extrap {
				sc.GlyphStyle.Shape = hollowShapes[s.shape]
			}
			p.Add(sc)
			if legendGlyph == nil || !pt.extrap {
				legendGlyph = sc
			}
			if pt.label != "" {
				labels.XYs = append(labels.XYs, plotter.XY{X: pt.x, Y: pt.y})
				labels.Labels = append(labels.Labels, pt.label)
			}
		}
		if len(labels.XYs) > 0 {
			lb, err := plotter.NewLabels(labels)
			if err != nil {
				return nil, err
			}
			for i := range lb.TextStyle {
				lb.TextStyle[i].Font.Size = vg.Points(10)
				lb.TextStyle[i].Color = col
			}
			lb.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(3)}
			p.Add(lb)
		}
		ll, err := plotter.NewLine(plotter.XYs{{X: s.pts[0].x, Y: s.pts[0].y}})
		if err != nil {
			return nil, err
		}
		ll.Color = col
		ll.Width = vg.Points(1.5)
		p.Legend.Add(s.name, ll, legendGlyph)
	}
	return p, nil
}
