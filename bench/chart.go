package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chartTargets are drawn in this order, each in its own colour.
var chartTargets = []struct {
	name  string
	color color.RGBA
}{
	{"direct", color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}},
	{"nginx", color.RGBA{R: 0x1b, G: 0x9e, B: 0x4d, A: 0xff}},
	{"gateway", color.RGBA{R: 0xd9, G: 0x5f, B: 0x02, A: 0xff}},
}

// chartConns are the connection counts the small GET runs at.
func chartConns(r Result) []int {
	var out []int
	for _, c := range proxyConns {
		if _, ok := r.Figures[proxyKey(c, "gateway", "rps")]; ok {
			out = append(out, c)
		}
	}
	return out
}

func hasProxyFigures(r Result) bool { return len(chartConns(r)) > 0 }

// drawLatencyChart draws the small GET by connections: p50 and p99 latency
// (log scale) and req/s, for direct, nginx and the gateway, as one PNG.
func drawLatencyChart(r Result, path string) error {
	conns := chartConns(r)
	if len(conns) == 0 {
		return fmt.Errorf("no small-GET figures in %s", r.Name)
	}
	// Connections are spaced evenly (1, 16, 64, 256 is roughly geometric).
	ticks := make(plot.ConstantTicks, len(conns))
	for i, c := range conns {
		ticks[i] = plot.Tick{Value: float64(i), Label: strconv.Itoa(c)}
	}
	series := func(target, metric string) plotter.XYs {
		xy := make(plotter.XYs, len(conns))
		for i, c := range conns {
			xy[i] = plotter.XY{X: float64(i), Y: r.Figures[proxyKey(c, target, metric)]}
		}
		return xy
	}
	subtitle := fmt.Sprintf("measured %s", runLabel(r))

	lat := plot.New()
	lat.Title.Text = "Small GET /v1/sandbox: latency (wrk, cached thread)"
	lat.X.Label.Text = "connections\n" + subtitle
	lat.Y.Label.Text = "ms (log scale)"
	lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, logTicks{}
	lat.X.Tick.Marker = ticks
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Add(plotter.NewGrid())
	for _, t := range chartTargets {
		for _, m := range []struct {
			metric, label string
			dashes        []vg.Length
		}{{"p50_ms", "p50", nil}, {"p99_ms", "p99", []vg.Length{vg.Points(5), vg.Points(3)}}} {
			l, pts, err := plotter.NewLinePoints(series(t.name, m.metric))
			if err != nil {
				return err
			}
			l.Color, l.Width, l.Dashes = t.color, vg.Points(2), m.dashes
			pts.Color, pts.Shape = t.color, draw.CircleGlyph{}
			lat.Add(l, pts)
			lat.Legend.Add(t.name+" "+m.label, l)
		}
	}

	rps := plot.New()
	rps.Title.Text = "Small GET /v1/sandbox: requests per second"
	rps.X.Label.Text = "connections\n" + subtitle
	rps.Y.Label.Text = "req/s"
	rps.Y.Min = 0
	rps.Y.Tick.Marker = roundTicks{}
	rps.X.Tick.Marker = ticks
	rps.Legend.Top, rps.Legend.Left = true, true
	rps.Add(plotter.NewGrid())
	for _, t := range chartTargets {
		l, pts, err := plotter.NewLinePoints(series(t.name, "rps"))
		if err != nil {
			return err
		}
		l.Color, l.Width = t.color, vg.Points(2)
		pts.Color, pts.Shape = t.color, draw.CircleGlyph{}
		rps.Add(l, pts)
		rps.Legend.Add(t.name, l)
	}

	img := vgimg.NewWith(vgimg.UseWH(13*vg.Inch, 5*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(24), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{lat, rps}}, tiles, dc)
	lat.Draw(canvases[0][0])
	rps.Draw(canvases[0][1])
	return writePNG(img, path)
}

// writePNG writes a drawn chart to path.
func writePNG(img *vgimg.Canvas, path string) error {
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

// roundTicks labels a linear axis at round steps (1, 2 or 5 × 10ⁿ, the
// largest that still gives at least four intervals), as whole numbers.
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', 0, 64)}}
	}
	raw := (hi - lo) / 4
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{2, 5} {
		if m*pow <= raw {
			step = m * pow
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
	}
	return ticks
}

// logTicks labels a log axis at 1, 2 and 5 × 10ⁿ: latencies span a few
// decades, and powers of ten alone leave most of the curve unlabelled.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	if lo <= 0 || hi < lo {
		return ticks
	}
	for pow := math.Pow(10, math.Floor(math.Log10(lo))); pow <= hi; pow *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * pow; v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ticks
}
