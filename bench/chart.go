package main

import (
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = map[string]color.Color{
	"floor": color.RGBA{0x66, 0x66, 0x66, 0xff},
	"river": color.RGBA{0xd6, 0x27, 0x28, 0xff},
}

var libColors = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff},
}

// drawChart writes a PNG of jobs/s against workers in all, one panel per
// database, one line per runner; the floor, which has no workers, is a
// dashed level across the panel.
func drawChart(file string, rows []row) error {
	var plots []*plot.Plot
	for _, db := range []string{"postgres", "sqlite", "mysql"} {
		series := map[string]plotter.XYs{}
		var names []string
		minX, maxX := 1e18, 0.0
		for _, r := range rows {
			if r.db != db || (!r.chart && r.runner != "floor") {
				continue
			}
			if _, ok := series[r.runner]; !ok {
				names = append(names, r.runner)
			}
			series[r.runner] = append(series[r.runner], plotter.XY{X: float64(r.workers), Y: r.res.JobsPerSec})
			if r.runner != "floor" {
				minX, maxX = min(minX, float64(r.workers)), max(maxX, float64(r.workers))
			}
		}
		if len(names) == 0 {
			continue
		}
		if minX >= maxX { // one shape only (MariaDB): the floor spans it
			minX, maxX = minX/2, maxX*2
		}
		p := plot.New()
		title := db
		if db == "mysql" {
			title = "mariadb"
		}
		p.Title.Text = fmt.Sprintf("%s: drain of a backlog, no-op handler", title)
		p.X.Label.Text = "workers in all (log)"
		p.Y.Label.Text = "jobs/s"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		libN := 0
		for _, name := range names {
			xys := series[name]
			sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
			if name == "floor" {
				xys = plotter.XYs{{X: minX, Y: xys[0].Y}, {X: maxX, Y: xys[0].Y}}
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			c, ok := palette[name]
			if !ok {
				c = libColors[libN%len(libColors)]
				libN++
			}
			l.Color, pts.Color = c, c
			l.Width = vg.Points(1.5)
			label := name
			if name == "floor" {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				pts.Radius = 0
				label = "raw SQL floor (4 loops x 100)"
				if db == "mysql" {
					label = "raw SQL floor (4 loops x 100, SKIP LOCKED + DELETE)"
				}
			}
			p.Add(l, pts)
			p.Legend.Add(label, l, pts)
		}
		plots = append(plots, p)
	}
	if p, err := procsPlot(rows); err != nil {
		return err
	} else if p != nil {
		plots = append(plots, p)
	}
	return savePlots(file, plots)
}

// drawProcsChart writes the instance sweep's panel alone.
func drawProcsChart(file string, rows []row) error {
	p, err := procsPlot(rows)
	if err != nil || p == nil {
		return err
	}
	return savePlots(file, []*plot.Plot{p})
}

// savePlots writes the panels side by side as a PNG.
func savePlots(file string, plots []*plot.Plot) error {
	if len(plots) == 0 {
		return nil
	}
	w, h := vg.Points(420*float64(len(plots))), vg.Points(300)
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// procsPlot is the instance sweep's panel: jobs/s against the processes
// the same workers were split among, one line per runner; nil when the
// run had no sweep.
func procsPlot(rows []row) (*plot.Plot, error) {
	series := map[string]plotter.XYs{}
	total := map[string]int{}
	var names []string
	for _, r := range rows {
		if r.procs == 0 {
			continue
		}
		if _, ok := series[r.runner]; !ok {
			names = append(names, r.runner)
			total[r.runner] = r.workers
		}
		series[r.runner] = append(series[r.runner], plotter.XY{X: float64(r.procs), Y: r.res.JobsPerSec})
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "postgres: the same workers split among processes"
	p.X.Label.Text = "processes (log)"
	p.Y.Label.Text = "jobs/s"
	p.X.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	seen := map[int]bool{}
	for _, r := range rows {
		if r.procs > 0 && !seen[r.procs] {
			seen[r.procs] = true
			ticks = append(ticks, plot.Tick{Value: float64(r.procs), Label: fmt.Sprint(r.procs)})
		}
	}
	p.X.Tick.Marker = ticks
	p.Y.Min = 0
	p.Legend.Top = false
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	libN := 0
	for _, name := range names {
		xys := series[name]
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		c, ok := palette[name]
		if !ok {
			c = libColors[libN%len(libColors)]
			libN++
		}
		l.Color, pts.Color = c, c
		l.Width = vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(fmt.Sprintf("%s (%d workers split)", name, total[name]), l, pts)
	}
	return p, nil
}
