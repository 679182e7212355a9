package main

import (
	"fmt"
	"maps"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Figures and series of the density suite.
const (
	figDensityLive      = "density.live_sandboxes"
	figDensityPSS       = "density.pss_per_sandbox_bytes"
	figDensityKeepP99   = "density.sweep_keepalive_p99_ms"
	figDensityFreshP99  = "density.sweep_new_conn_p99_ms"
	figDensityGwPSS     = "density.gateway_pss_bytes"
	densityChartFile    = "bench-density.png"
	seriesDensityN      = "n"
	seriesDensityPSS    = "pss_per_sandbox_mib"
	seriesDensityKeep   = "keepalive_p99_ms"
	seriesDensityFresh  = "new_conn_p99_ms"
	seriesDensityHostMB = "host_used_per_sandbox_mib"
)

func densityResult(r densityRun) Result {
	last := r.steps[len(r.steps)-1]
	per := func(b int64, n int) string { return fmt.Sprintf("%.2f", float64(b)/float64(max(n, 1))/(1<<20)) }
	rows := make([][]string, 0, len(r.steps))
	series := map[string][]float64{}
	for _, s := range r.steps {
		hostPer := float64(s.hostUsed-r.base.hostUsed) / float64(s.n) / (1 << 20)
		rows = append(rows, []string{
			fmt.Sprint(s.n),
			ms(s.create.P50) + " / " + ms(s.create.P99),
			per(s.sandboxes.mem.pss, s.n) + " (" + per(s.sandboxes.mem.pssAnon, s.n) + " / " + per(s.sandboxes.mem.pssFile, s.n) + ")",
			fmt.Sprintf("%.2f", hostPer),
			s.kernel.perSandbox(r.base.kernel, s.n),
			fmt.Sprintf("%d / %d", s.sandboxes.procs, s.sandboxes.threads),
			mib(s.gatewayRSS) + " / " + mib(s.gateway.pss),
			fmt.Sprintf("%d / %d", s.gatewayFDs, s.goroutines),
			ms(s.keep.P50) + " / " + ms(s.keep.P99),
			ms(s.fresh.P50) + " / " + ms(s.fresh.P99),
			fmt.Sprintf("%.1f %% / %.1f %%", 100*s.gatewayIdle, 100*s.sbxIdle),
			mib(s.redis),
			s.load,
		})
		series[seriesDensityN] = append(series[seriesDensityN], float64(s.n))
		series[seriesDensityPSS] = append(series[seriesDensityPSS], float64(s.sandboxes.mem.pss)/float64(s.n)/(1<<20))
		series[seriesDensityKeep] = append(series[seriesDensityKeep], msF(s.keep.P99))
		series[seriesDensityFresh] = append(series[seriesDensityFresh], msF(s.fresh.P99))
		series[seriesDensityHostMB] = append(series[seriesDensityHostMB], hostPer)
	}
	res := Result{
		Title: fmt.Sprintf("Density: isolated process sandboxes on one host, %d live when the run stopped", last.n),
		Columns: []string{"live sandboxes", "this step's creates p50 / p99 ms", "PSS per sandbox MiB (anon / file)",
			"host memory used per sandbox MiB", "kernel memory per sandbox KiB: slab unreclaimable / reclaimable / page tables / kernel stacks / percpu",
			"sandbox processes / threads", "gateway RSS / PSS", "gateway fds / goroutines",
			"sweep, kept-alive p50 / p99 ms", "sweep, new connection p50 / p99 ms", "idle CPU: gateway / all sandboxes (% of a core)",
			"Redis used_memory", "load average"},
		Rows:   rows,
		Series: series,
		Figures: map[string]float64{
			figDensityLive: float64(last.n), figDensityPSS: float64(last.sandboxes.mem.pss) / float64(last.n),
			figDensityKeepP99: msF(last.keep.P99), figDensityFreshP99: msF(last.fresh.P99), figDensityGwPSS: float64(last.gateway.pss),
		},
	}
	if len(r.split) > 0 {
		t := Table{Title: "Where one idle sandbox's memory goes (/proc/PID/smaps of one sandbox process at the last step, PSS)",
			Columns: []string{"mapping", "mappings", "PSS KiB"}}
		for _, k := range slices.Sorted(maps.Keys(r.split)) {
			t.Rows = append(t.Rows, []string{k, fmt.Sprint(r.splitN[k]), fmt.Sprint(r.split[k] >> 10)})
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("the sandbox in all (%d processes, %d threads): RSS / PSS",
			r.oneSbx.procs, r.oneSbx.threads), "", fmt.Sprintf("%d / %d", r.oneSbx.mem.rss>>10, r.oneSbx.mem.pss>>10)})
		res.Tables = append(res.Tables, t)
	}
	res.Notes = []string{
		"**Stopped by: " + r.limit + ".**",
		densityProjection(r, last),
		fmt.Sprintf("One real gateway (process backend, isolation namespaces: the default; `--idle-timeout 6h --create-rate 0 --max-sandboxes 0`, "+
			"real redis-server) is given new threads in steps of %d (%d clients, the first GET /threads/{t}/v1/sandbox of each creates "+
			"its sandbox) up to -density-max %d. After each step: PSS summed over every process below the gateway (the sandboxes and "+
			"anything they run: /proc/PID/smaps_rollup, which divides a shared page among its sharers, so the sum counts each page once) "+
			"divided by the live sandboxes; the host's MemTotal − MemAvailable over its value before the first step, per sandbox (this adds "+
			"what PSS does not show: page tables, kernel stacks, namespaces, mounts, cgroups; on a machine shared with other work it is noisy), "+
			"and the kernel's share of it by kind from /proc/meminfo over its value before the first step (SUnreclaim, SReclaimable, "+
			"PageTables, KernelStack, Percpu); "+
			"the gateway's VmRSS, PSS, open descriptors and goroutines; then two sweeps, each one GET /threads/{t}/v1/sandbox to every live "+
			"sandbox in a random order (%d clients at once), first over kept-alive client connections, then with a new connection per "+
			"request; then %s with no request, in which the gateway's CPU (its loops: reaper, freezer, sampler, reconciler, toucher) "+
			"and the sandboxes' own (Go runtimes idling) are measured.", opts.DensityStep, densityCreators, opts.DensityMax,
			densitySweepers, densityIdle),
		fmt.Sprintf("The run stops before a step that would leave less than %s of memory available, pass %.0f %% of kernel.pid_max "+
			"(%d here, shared with everything else on the host), take the gateway to 95 %% of its RLIMIT_NOFILE (%d) or the "+
			"sandboxes to 90 %% of the smallest /proc/sys/user/max_*_namespaces (%d), each projected from the last step's cost per "+
			"sandbox; at a create or sweep request that fails (its error, classified: EMFILE, EAGAIN, ENOMEM, ENOSPC, timeout); "+
			"or at a sweep p99 over %s ms. The goal is %s ms p99 at 5,000 sandboxes (issue 42).",
			mib(densityMemReserve), 100*densityPidShare, r.pidMax, r.fdLimit, r.nsMax, ms(densityStopP99), ms(densityGoalP99)),
		fmt.Sprintf("Before the first step: gateway RSS %s, PSS %s, %d fds, %d threads on the host. Every sandbox is destroyed through the "+
			"gateway at the end (and any left by the backend), also when the run is interrupted. The suite took %s.",
			mib(r.base.gatewayRSS), mib(r.base.gateway.pss), r.base.gatewayFDs, r.base.tasks, r.took.Round(1e9)),
	}
	return res
}

func hasDensitySeries(r Result) bool { return len(r.Series[seriesDensityN]) > 0 }

// drawDensityChart draws memory per sandbox and the sweeps' p99 against
// the number of live sandboxes.
func drawDensityChart(r Result, path string) error {
	ns := r.Series[seriesDensityN]
	if len(ns) == 0 {
		return fmt.Errorf("no density series in %s", r.Name)
	}
	xy := func(name string) plotter.XYs {
		out := make(plotter.XYs, len(ns))
		for i, n := range ns {
			out[i] = plotter.XY{X: n, Y: r.Series[name][min(i, len(r.Series[name])-1)]}
		}
		return out
	}
	panel := func(title, ylabel string, lines []struct{ name, label string }) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "live isolated sandboxes\nmeasured " + runLabel(r)
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		for i, l := range lines {
			line, pts, err := plotter.NewLinePoints(xy(l.name))
			if err != nil {
				return nil, err
			}
			c := chartTargets[(i+1)%len(chartTargets)].color
			line.Color, line.Width, pts.Color, pts.Shape = c, vg.Points(2), c, draw.CircleGlyph{}
			p.Add(line, pts)
			p.Legend.Add(l.label, line)
		}
		return p, nil
	}
	mem, err := panel("Memory per sandbox", "MiB", []struct{ name, label string }{
		{seriesDensityPSS, "PSS of the sandbox's processes"}, {seriesDensityHostMB, "host memory used (noisy)"}})
	if err != nil {
		return err
	}
	lat, err := panel("Sweep over every live sandbox through the gateway: p99", "ms", []struct{ name, label string }{
		{seriesDensityKeep, "kept-alive client"}, {seriesDensityFresh, "new connection per request"}})
	if err != nil {
		return err
	}
	img := vgimg.NewWith(vgimg.UseWH(13*vg.Inch, 5*vg.Inch), vgimg.UseDPI(96))
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(24), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{mem, lat}}, tiles, draw.New(img))
	mem.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
	return writePNG(img, path)
}

// densityProjection says where each limit falls at the last step's cost
// per sandbox: what a run cut short by its bound or a busy machine would
// have met next.
func densityProjection(r densityRun, last densityStep) string {
	n := float64(last.n)
	at := func(limit, used, per float64) string {
		if per <= 0 {
			return "not reached (no cost per sandbox measured)"
		}
		return fmt.Sprintf("about %.0f sandboxes", n+(limit-used)/per)
	}
	thr := float64(last.tasks-r.base.tasks) / n
	fds := float64(last.gatewayFDs-r.base.gatewayFDs) / n
	mem := float64(last.hostUsed-r.base.hostUsed) / n
	total := float64(meminfo("MemTotal"))
	return fmt.Sprintf("Where the limits fall at the last step's cost per sandbox: pids (kernel.pid_max %d, %d threads on the host "+
		"at %d sandboxes, %.1f per sandbox): %s; the gateway's descriptors (RLIMIT_NOFILE %d, %.2f per sandbox: its pidfd, its "+
		"egress proxy's socket, idle connections): %s; memory (%s in all, %.2f MiB host memory per sandbox, noisy): %s; "+
		"namespaces (%d of each kind): %d sandboxes.",
		r.pidMax, last.tasks, last.n, thr, at(float64(r.pidMax), float64(last.tasks), thr), r.fdLimit, fds,
		at(float64(r.fdLimit), float64(last.gatewayFDs), fds), mib(int64(total)), mem/(1<<20),
		at(total-densityMemReserve, float64(last.hostUsed), mem), r.nsMax, r.nsMax)
}
