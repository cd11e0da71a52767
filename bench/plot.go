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
	{"PyTorch same work FP32", func(r *result) (float64, bool) { return r.tsparse.speedup, r.tsparse.extrap }},
	{"PyTorch same work BF16", func(r *result) (float64, bool) { return r.tbf16.speedup, r.tbf16.extrap }},
}

// buildPanels turns the results into panels: for each family that has
// results, a GFLOP/s panel and (when any baseline ran) a speedup panel.
func buildPanels(cal calibration, rs []*result) []panel {
	var out []panel
	for _, fam := range []struct {
		name, xLabel string
		kinds        map[string]bool
	}{
		{"prefill", "tokens (one causal sequence)", map[string]bool{"prefill": true, "nvfp4": true}},
		{"decode", "context length (tokens per request)", map[string]bool{"decode": true}},
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
			switch {
			case r.pctPeak > 100:
				label = "noisy"
			case r.pctPeak > 0:
				label = fmt.Sprintf("%.0f%%", r.pctPeak)
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
		p := panel{title: fam.name + ": effective GFLOP/s (labels: paired %peak)", xLabel: fam.xLabel, yLabel: "GFLOP/s",
			yMax: dataMax * 1.3, xs: xs}
		if cal.peak > 0 {
			if cal.peak <= peakOnScale*dataMax {
				p.peak = cal.peak
				p.peakLabel = fmt.Sprintf("peak %s: %.0f GFLOP/s", cal.peakTier, cal.peak)
				p.yMax = max(p.yMax, cal.peak*1.15)
			} else {
				p.title += fmt.Sprintf("; peak %.0f GFLOP/s (%s) is above the axis", cal.peak, cal.peakTier)
			}
		}
		noisy := 0
		for _, r := range sel {
			if len(r.noise) > 0 {
				noisy++
			}
		}
		if noisy > 0 {
			p.title += fmt.Sprintf("; NOISY: %d of %d points", noisy, len(sel))
		}
		for _, n := range names {
			p.series = append(p.series, *gf[n])
		}
		out = append(out, p)

		sp := panel{title: fam.name + ": speedup over each baseline (hollow, dashed: extrapolated)", xLabel: fam.xLabel,
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

// writePlot draws the panels, two per row, into a PNG file.
func writePlot(path string, cal calibration, rs []*result) error {
	panels := buildPanels(cal, rs)
	if len(panels) == 0 {
		return nil
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
	img := vgimg.New(vg.Length(cols)*8*vg.Inch, vg.Length(rows)*6*vg.Inch)
	dc := draw.New(img)
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
	p.Legend.TextStyle.Font.Size = vg.Points(8)
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
				lb.TextStyle[i].Font.Size = vg.Points(7)
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
