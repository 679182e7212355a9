package main

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// firstChartFile is the first-request chart's name, beside the doc.
const firstChartFile = "bench-first-request.png"

func hasFirstRequestFigures(r Result) bool {
	_, ok := r.Figures[figFirstPrewarmP50]
	_, cold := r.Figures[figFirstColdP50]
	return ok && cold
}

// drawFirstRequestChart draws a new thread's first request through the
// gateway, cold create beside a claimed pre-started sandbox: p50 and p99
// bars, each labelled with its value (the prewarmed ones are short).
func drawFirstRequestChart(r Result, path string) error {
	if !hasFirstRequestFigures(r) {
		return fmt.Errorf("no first-request figures in %s", r.Name)
	}
	p := plot.New()
	p.Title.Text = "A new thread's first GET through the gateway (process backend)"
	p.X.Label.Text = "measured " + runLabel(r)
	p.Y.Label.Text = "ms"
	p.Y.Min = 0
	p.Legend.Top = true // top right: the short prewarmed bars are there
	p.Add(plotter.NewGrid())
	w := vg.Points(40)
	for i, m := range []struct{ label, cold, prewarm string }{
		{"p50", figFirstColdP50, figFirstPrewarmP50},
		{"p99", figFirstColdP99, figFirstPrewarmP99},
	} {
		vals := plotter.Values{r.Figures[m.cold], r.Figures[m.prewarm]}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = chartTargets[1+i].color
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add(m.label, bars)
		xys := make(plotter.XYs, len(vals))
		texts := make([]string, len(vals))
		for j, v := range vals {
			xys[j] = plotter.XY{X: float64(j), Y: v}
			texts[j] = fmt.Sprintf("%.1f", v)
		}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return err
		}
		labels.Offset = vg.Point{X: vg.Length(2*i-1)*w/2 - vg.Points(10), Y: vg.Points(3)}
		p.Add(labels)
	}
	p.NominalX("cold create", fmt.Sprintf("prewarmed (--prewarm %d)", lifecyclePrewarm))
	img := vgimg.NewWith(vgimg.UseWH(7*vg.Inch, 4.5*vg.Inch), vgimg.UseDPI(96))
	p.Draw(draw.New(img))
	return writePNG(img, path)
}
