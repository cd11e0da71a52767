package main

import (
	"fmt"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlot draws two panels sharing a log2 length axis: effective GFLOP/s
// (with the calibrated peak as a dashed line) and speedup over the
// Gorgonia dense baseline, one line per series (prefill dtype, NVFP4,
// decode dtype and batch).
func writePlot(path string, cal calibration, rs []*result) error {
	type series struct {
		name      string
		gf, speed plotter.XYs
	}
	byName := map[string]*series{}
	var order []string
	xs := map[float64]bool{}
	for _, r := range rs {
		if r.err != "" || r.timeMS <= 0 {
			continue
		}
		c := r.c
		name := c.Kind + " " + c.DType
		if c.Kind == "decode" {
			name = fmt.Sprintf("decode %s b%d", c.DType, c.Batch)
		}
		s := byName[name]
		if s == nil {
			s = &series{name: name}
			byName[name] = s
			order = append(order, name)
		}
		x := float64(c.SeqLen)
		xs[x] = true
		s.gf = append(s.gf, plotter.XY{X: x, Y: r.gflops})
		if r.speedupDense > 0 {
			s.speed = append(s.speed, plotter.XY{X: x, Y: r.speedupDense})
		}
	}
	var ticks []plot.Tick
	for x := range xs {
		ticks = append(ticks, plot.Tick{Value: x, Label: kLabel(int(x))})
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Value < ticks[j].Value })

	top := plot.New()
	top.Title.Text = fmt.Sprintf("Effective GFLOP/s (peak %s: %.0f)", cal.peakTier, cal.peak)
	top.Y.Label.Text = "GFLOP/s"
	bot := plot.New()
	bot.Title.Text = "Speedup over Gorgonia dense attention"
	bot.Y.Label.Text = "x dense"
	for _, p := range []*plot.Plot{top, bot} {
		p.X.Label.Text = "sequence length (prefill) / context (decode)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
	}
	top.Y.Min, bot.Y.Min = 0, 0
	for i, name := range order {
		s := byName[name]
		sort.Slice(s.gf, func(a, b int) bool { return s.gf[a].X < s.gf[b].X })
		sort.Slice(s.speed, func(a, b int) bool { return s.speed[a].X < s.speed[b].X })
		if err := addSeries(top, i, name, s.gf); err != nil {
			return err
		}
		if len(s.speed) > 0 {
			if err := addSeries(bot, i, name, s.speed); err != nil {
				return err
			}
		}
	}
	if cal.peak > 0 && len(ticks) > 0 {
		pk := plotter.XYs{{X: ticks[0].Value, Y: cal.peak}, {X: ticks[len(ticks)-1].Value, Y: cal.peak}}
		l, err := plotter.NewLine(pk)
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		top.Add(l)
		top.Legend.Add("peak", l)
	}
	// Leave the top third empty for the legend.
	bot.Y.Max *= 1.5
	top.Y.Max *= 1.5
	if len(ticks) == 1 { // a log axis needs a range
		for _, p := range []*plot.Plot{top, bot} {
			p.X.Min, p.X.Max = ticks[0].Value/2, ticks[0].Value*2
		}
	}
	img := vgimg.New(9*vg.Inch, 10*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	plots := [][]*plot.Plot{{top}, {bot}}
	canvases := plot.Align(plots, t, dc)
	top.Draw(canvases[0][0])
	bot.Draw(canvases[1][0])
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

func addSeries(p *plot.Plot, i int, name string, xy plotter.XYs) error {
	l, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	pts.Color = plotutil.Color(i)
	pts.Shape = plotutil.Shape(i)
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}
