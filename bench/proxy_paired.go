package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// The CPU goal compares the gateway with the floor on the gateway's server
// (issue 42). One proxy's CPU per request moves from round to round and
// from process to process as much as the difference measured, so the
// verdict comes from paired rounds over several fresh incarnations of the
// gateway and the floor, with a second floor as the A/A control
// (pairedNote).

// pairedNote says how the paired rounds are measured, for the suite's notes.
func pairedNote() string {
	return fmt.Sprintf("%s (the table after the pinned one; issue 42): the CPU goal's comparison with the floor on the gateway's "+
		"server. Two things move one proxy's CPU per request on this machine as much as the difference measured: the round "+
		"(a cell's 1 s rounds are 10-30 %% apart) and the process (two processes of one binary, side by side for minutes, settle "+
		"up to ~15 %% apart, where their heap, stacks and hot code land in the caches). So %d incarnations are measured, each with a "+
		"fresh gateway replica (on the suite's Redis and data directory: it serves the same thread's sandbox from there), a fresh "+
		"floor on the gateway's server, a second fresh floor, the A/A control, and a fresh echo floor (bench/floorproxy -server "+
		"sandgate-echo: that floor with echo routing the gateway's data-plane route to its proxy, the floor of what the design "+
		"requires); each runs a -d%s warm-up, then %d rounds of %s in which the four take turns back to back in rotating order, "+
		"unpinned and then pinned as above; each round's CPU per request of the gateway, the control and the echo floor is "+
		"divided by the floor's of the same round, and the gateway's by the echo floor's too. The medians over every round of "+
		"every incarnation judge the goal; the control's median, the same binary against itself, is what the method resolves "+
		"in this run; the medians of each incarnation follow.",
		pairedTitle, opts.PairedBlocks, secs(opts.ProxyWarmup), opts.PairedRounds, secs(opts.PairedRound))
}

// controlTarget names the second floor on the gateway's server, the A/A
// control, and echoFloorTarget the floor with echo in front of its proxy
// (bench/floorproxy -server sandgate-echo): what the design requires.
const (
	controlTarget   = "floor-sandgate-2"
	echoFloorTarget = "floor-sandgate-echo"
)

// pairedTitle names the paired rounds' table.
const pairedTitle = "Small GET CPU against the floor on the gateway's server, paired rounds"

// pairTargets are one incarnation's proxies: the gateway, the floor on its
// server, the control and the echo floor; stop ends their processes.
type pairTargets struct {
	gateway, floor, control, echo target
	stop                          func()
}

func (p pairTargets) all() []target { return []target{p.gateway, p.floor, p.control, p.echo} }

// pairStarter starts incarnations in front of the sandbox at upstream: a
// gateway replica on the suite's Redis and data directory, two floors and
// the echo floor.
func pairStarter(bin, redisAddr, dataDir, tmp, upstream string) func(ctx context.Context, k int) (pairTargets, error) {
	return func(ctx context.Context, k int) (pairTargets, error) {
		var started []*service
		stop := func() {
			for _, s := range slices.Backward(started) {
				s.stop(syscall.SIGTERM, 10*time.Second)
			}
		}
		gw, gwAddr, err := startGatewayEnv(ctx, bin, redisAddr, dataDir, filepath.Join(tmp, fmt.Sprintf("gateway-paired-%d.log", k)), nil,
			"--process-isolation", "none")
		if err != nil {
			return pairTargets{}, err
		}
		started = append(started, gw)
		var floors [3]target
		for i, f := range []struct{ name, server string }{
			{sandgateFloorTarget, "sandgate"}, {controlTarget, "sandgate"}, {echoFloorTarget, "sandgate-echo"},
		} {
			s, addr, err := startFloorProxy(ctx, tmp, upstream, "/threads/"+proxyThread, f.server)
			if err != nil {
				stop()
				return pairTargets{}, err
			}
			started = append(started, s)
			floors[i] = serviceTarget(f.name, addr, s)
		}
		return pairTargets{gateway: serviceTarget("gateway", gwAddr, gw), floor: floors[0], control: floors[1], echo: floors[2],
			stop: stop}, nil
	}
}

// paired is one paired measurement: CPU µs per request in each round, and
// the incarnation (block) each round ran in.
type paired struct {
	gateway, floor, control, echo []float64
	block                         []int
}

// ratios divides v's rounds by the floor's, round by round, sorted; only
// the rounds of block b when b ≥ 0.
func (p paired) ratios(v []float64, b int) []float64 { return p.ratiosTo(v, p.floor, b) }

// ratiosTo divides v's rounds by base's, round by round, sorted; only the
// rounds of block b when b ≥ 0.
func (p paired) ratiosTo(v, base []float64, b int) []float64 {
	var out []float64
	for i := range min(len(v), len(base), len(p.block)) {
		if base[i] > 0 && (b < 0 || p.block[i] == b) {
			out = append(out, v[i]/base[i])
		}
	}
	slices.Sort(out)
	return out
}

// blocks is how many incarnations p's rounds ran in.
func (p paired) blocks() int {
	if len(p.block) == 0 {
		return 0
	}
	return slices.Max(p.block) + 1
}

// quartiles are the lower quartile, median and upper quartile of sorted
// values (nearest rank).
func quartiles(sorted []float64) (q1, q2, q3 float64) {
	if len(sorted) == 0 {
		return 0, 0, 0
	}
	at := func(p float64) float64 { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	return at(0.25), medianF(sorted), at(0.75)
}

// add measures opts.PairedRounds rotating rounds of ps, of opts.PairedRound
// each, wrk on wrkCPUs (nil: any), as block b of p.
func (p *paired) add(ctx context.Context, ps pairTargets, b int, w workload, script string, conns int, wrkCPUs []int) error {
	rounds, err := measureRounds(ctx, ps.all(), w, script, conns, wrkCPUs, opts.PairedRounds, opts.PairedRound)
	if err != nil {
		return err
	}
	for i := range rounds[0] {
		p.gateway = append(p.gateway, rounds[0][i].CPUPerRequestUS())
		p.floor = append(p.floor, rounds[1][i].CPUPerRequestUS())
		p.control = append(p.control, rounds[2][i].CPUPerRequestUS())
		p.echo = append(p.echo, rounds[3][i].CPUPerRequestUS())
		p.block = append(p.block, b)
	}
	return nil
}

// cpuRuns are the small GET's CPU measurements beyond the rotation's cells.
type cpuRuns struct {
	pinnedProxies []target
	pinned        []wrkResult
	// unpinnedPairs and pinnedPairs are the paired rounds, each way.
	unpinnedPairs, pinnedPairs paired
}

// measureCPU measures the small GET at conns through every proxy of env
// pinned (in the rotation), then opts.PairedBlocks paired incarnations,
// each unpinned and then pinned.
func measureCPU(ctx context.Context, env proxyEnv, w workload, script string, conns int) (cpuRuns, error) {
	var runs cpuRuns
	err := whilePinned(env.targets, env.sandbox, func(proxies []target) error {
		runs.pinnedProxies = proxies
		var err error
		runs.pinned, err = measureTargetsOn(ctx, proxies, w, script, conns, []int{pinLoadCPU})
		return err
	})
	if err != nil {
		return runs, fmt.Errorf("pinned: %w", err)
	}
	for b := range opts.PairedBlocks {
		ps, err := env.pair(ctx, b)
		if err != nil {
			return runs, fmt.Errorf("paired incarnation %d: %w", b, err)
		}
		err = runs.unpinnedPairs.add(ctx, ps, b, w, script, conns, nil)
		if err == nil {
			err = whilePinned(ps.all(), env.sandbox, func([]target) error {
				return runs.pinnedPairs.add(ctx, ps, b, w, script, conns, []int{pinLoadCPU})
			})
		}
		ps.stop()
		if err != nil {
			return runs, fmt.Errorf("paired incarnation %d: %w", b, err)
		}
		for _, m := range []struct {
			how string
			p   paired
		}{{"", runs.unpinnedPairs}, {" pinned", runs.pinnedPairs}} {
			_, g, _ := quartiles(m.p.ratios(m.p.gateway, b))
			_, c, _ := quartiles(m.p.ratios(m.p.control, b))
			_, ge, _ := quartiles(m.p.ratiosTo(m.p.gateway, m.p.echo, b))
			fmt.Fprintf(os.Stderr, "bench: %s c=%d paired%s, incarnation %d: gateway ÷ floor-sandgate %.3f, control %.3f, "+
				"gateway ÷ floor-sandgate-echo %.3f (medians)\n", w.name, conns, m.how, b, g, c, ge)
		}
	}
	return runs, nil
}

// pairedFigure is the figure key of a paired ratio: of the gateway or the
// control to the floor on the gateway's server; kind is cpu_us or
// cpu_us_pinned, as the cells' figures.
func pairedFigure(conns int, name, kind string) string {
	return proxyKey(conns, name, kind+"_floor_ratio")
}

// echoFloorFigure is the figure key of the gateway's paired ratio to the
// echo floor (the design's floor: echo and ReverseProxy on the gateway's
// server); kind as pairedFigure's.
func echoFloorFigure(conns int, kind string) string {
	return proxyKey(conns, "gateway", kind+"_echo_floor_ratio")
}

// pairedTable is both paired measurements as a table, and their figures.
func pairedTable(unpinned, pinned paired, conns int, figures map[string]float64) Table {
	t := Table{Title: pairedTitle, Columns: []string{"proxy", "incarnations × rounds",
		"CPU µs/req gateway / floor / echo floor / control (medians)", "gateway ÷ floor: median (quartiles); by incarnation",
		"gateway ÷ echo floor", "echo floor ÷ floor", "control ÷ floor"}}
	for _, m := range []struct {
		how, kind string
		p         paired
	}{{"unpinned", "cpu_us", unpinned}, {"pinned", "cpu_us_pinned", pinned}} {
		ratio := func(v, base []float64) (float64, string) {
			q1, q2, q3 := quartiles(m.p.ratiosTo(v, base, -1))
			cell := fmt.Sprintf("%.3f (%.3f-%.3f);", q2, q1, q3)
			for b := range m.p.blocks() {
				_, mb, _ := quartiles(m.p.ratiosTo(v, base, b))
				cell += fmt.Sprintf(" %.3f", mb)
			}
			return q2, cell
		}
		g, gCell := ratio(m.p.gateway, m.p.floor)
		ge, geCell := ratio(m.p.gateway, m.p.echo)
		e, eCell := ratio(m.p.echo, m.p.floor)
		c, cCell := ratio(m.p.control, m.p.floor)
		figures[pairedFigure(conns, "gateway", m.kind)] = g
		figures[echoFloorFigure(conns, m.kind)] = ge
		figures[pairedFigure(conns, echoFloorTarget, m.kind)] = e
		figures[pairedFigure(conns, controlTarget, m.kind)] = c
		figures[proxyKey(conns, "paired", m.kind+"_rounds")] = float64(len(m.p.floor))
		figures[proxyKey(conns, "paired", m.kind+"_incarnations")] = float64(m.p.blocks())
		t.Rows = append(t.Rows, []string{m.how, fmt.Sprintf("%d × %d", m.p.blocks(), len(m.p.floor)/max(m.p.blocks(), 1)),
			fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", medianF(m.p.gateway), medianF(m.p.floor), medianF(m.p.echo), medianF(m.p.control)),
			gCell, geCell, eCell, cCell})
	}
	return t
}
