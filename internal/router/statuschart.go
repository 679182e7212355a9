package router

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/backend"
)

// The detail page's charts: the sampler's short history (a minute at the
// default interval) as inline SVG polylines rendered here, so the page
// needs no script to show them.

const (
	chartWidth, chartHeight = 240, 48
)

// chart is one polyline of the detail page.
type chart struct {
	Name, Label string
	// Points is the polyline's "x,y x,y ...", in a chartWidth by
	// chartHeight box, y down; the top is Top.
	Points string
	// Last and Top are the newest value and the chart's full scale, as text.
	Last, Top string
	Samples   int
}

// charts fills v's charts from the sampler's history of info's sandbox;
// none when this gateway samples nothing or the sample fails (the table
// above says what there is).
func (s *statusPage) charts(ctx context.Context, v *detailView, info backend.Info) {
	if s.rt.sampler == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	m, err := s.rt.sampler.Metrics(ctx, info)
	if err != nil {
		s.rt.log.DebugContext(ctx, "sandbox metrics", "sandbox_id", info.SandboxID, "err", err)
		return
	}
	if l := m.Latest; l != nil {
		v.Data, v.Layer = sizeOrNone(l.DataBytes), sizeOrNone(l.LayerBytes)
		if l.EgressSentBytes+l.EgressReceivedBytes > 0 {
			v.Egress = mib(float64(l.EgressSentBytes)) + " sent, " + mib(float64(l.EgressReceivedBytes)) + " received"
		}
	}
	var cpu, mem []float64
	var limit float64
	for _, h := range m.History {
		if h.CPUPercent != nil {
			cpu = append(cpu, *h.CPUPercent)
		}
		mem = append(mem, float64(h.MemoryBytes))
		limit = float64(h.MemoryLimitBytes)
	}
	if len(cpu) > 0 {
		// One core full scale, more when the sandbox used more.
		top := max(100, maxOf(cpu))
		v.Charts = append(v.Charts, chart{Name: "cpu", Label: "CPU %", Points: polyline(cpu, top),
			Last: fmt.Sprintf("%.1f %%", cpu[len(cpu)-1]), Top: fmt.Sprintf("%.0f %%", top), Samples: len(cpu)})
	}
	if len(mem) > 0 {
		// The limit full scale, so the chart shows the headroom.
		top := max(limit, maxOf(mem), 1)
		v.Charts = append(v.Charts, chart{Name: "memory", Label: "Memory", Points: polyline(mem, top),
			Last: mib(mem[len(mem)-1]), Top: mib(top), Samples: len(mem)})
	}
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// sizeOrNone is n in MiB, "" for none.
func sizeOrNone(n int64) string {
	if n <= 0 {
		return ""
	}
	return mib(float64(n))
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}

// polyline places ys evenly from left to right (one sample: at the right
// edge), top at the box's top.
func polyline(ys []float64, top float64) string {
	var b strings.Builder
	for i, y := range ys {
		x := float64(chartWidth)
		if len(ys) > 1 {
			x = float64(i) * chartWidth / float64(len(ys)-1)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(chartHeight-min(y, top)/top*chartHeight, 'f', 1, 64))
	}
	return b.String()
}
