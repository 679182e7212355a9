package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// statsRow is one entry of /admin/v1/stats with its CPU rate.
type statsRow struct {
	api.StatsRow
	// CPUPercent is computed here from two samples (100 = one core).
	CPUPercent *float64 `json:"cpu_percent,omitempty"`
}

// statsAnswer is api.StatsList with the rows top adds to.
type statsAnswer struct {
	Count     int        `json:"count"`
	Sandboxes []statsRow `json:"sandboxes"`
	Supported bool       `json:"supported"`
}

// runTop shows each sandbox's CPU %, memory, processes, disk and egress
// bytes, redrawn every interval until Ctrl-C (which ends it with
// success); --once prints one table (or JSON document) computed from two
// samples and exits, as scripts want.
func runTop(ctx context.Context, env Env, args []string) error {
	var c common
	var f filters
	var interval time.Duration
	var once bool
	fs := newFlags(env, "sandboxes top", "sandboxes top [--user U] [--thread T] [--state S] [--backend B] [--interval 1s] [--once] [-o json]", &c)
	f.bind(fs)
	fs.DurationVar(&interval, "interval", time.Second, "time between samples (CPU % is computed from two)")
	fs.BoolVar(&once, "once", false, "print one table from two samples and exit, instead of updating until Ctrl-C")
	pos, err := parse(fs, args, &c)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("sandboxes top takes no arguments (got %q)", pos[0])
	}
	if interval <= 0 {
		return usagef("--interval must be positive")
	}
	cl, err := newClient(c)
	if err != nil {
		return err
	}
	var prev statsAnswer
	if err := cl.call(ctx, "GET", "/admin/v1/stats", f.query(), &prev); err != nil {
		return err
	}
	if !prev.Supported {
		fmt.Fprintln(env.Stderr, "gateway: this gateway's sandbox backend cannot tell resource use; listing only")
		return writeTop(env, c.output, prev)
	}
	// A terminal gets each frame in place of the last; a pipe gets them
	// one after another.
	clear := !once && c.output != "json" && env.TermSize != nil
	for frame := 0; ; frame++ {
		select {
		case <-ctx.Done():
			if once {
				return ctx.Err()
			}
			return nil // Ctrl-C: the usual end of a live top
		case <-time.After(interval):
		}
		var cur statsAnswer
		if err := cl.call(ctx, "GET", "/admin/v1/stats", f.query(), &cur); err != nil {
			if !once && ctx.Err() != nil {
				return nil
			}
			return err
		}
		cpuPercents(prev.Sandboxes, cur.Sandboxes)
		switch {
		case clear:
			fmt.Fprint(env.Stdout, "\x1b[H\x1b[2J")
		case frame > 0 && c.output != "json":
			fmt.Fprintln(env.Stdout)
		}
		if err := writeTop(env, c.output, cur); err != nil || once {
			return err
		}
		prev = cur
	}
}

// writeTop writes one frame: a table, or a JSON document.
func writeTop(env Env, output string, a statsAnswer) error {
	if output == "json" {
		return writeJSON(env.Stdout, a)
	}
	t := newTable(env.Stdout, "SANDBOX ID", "USER", "THREAD", "BACKEND", "STATE", "CPU %", "MEM", "PIDS",
		"DATA", "LAYER", "EGRESS OUT", "EGRESS IN")
	for _, r := range a.Sandboxes {
		cpu, mem, pids := "-", "-", "-"
		var de api.DiskEgress
		if r.CPUPercent != nil {
			cpu = strconv.FormatFloat(*r.CPUPercent, 'f', 1, 64)
		}
		if r.Stats != nil {
			mem, pids = bytesIEC(r.MemoryBytes), strconv.Itoa(r.PIDs)
			de = r.DiskEgress
		}
		t.row(r.SandboxID, r.User, r.Thread, r.Backend, r.State, cpu, mem, pids,
			bytesOrDash(de.DataBytes), bytesOrDash(de.LayerBytes), bytesOrDash(de.EgressSentBytes), bytesOrDash(de.EgressReceivedBytes))
	}
	return t.flush()
}

// bytesOrDash is n in IEC units, "-" for none (or not measured by the
// replica that answered: its sampler's figures).
func bytesOrDash(n int64) string {
	if n <= 0 {
		return "-"
	}
	return bytesIEC(n)
}

// cpuPercents sets each row of now that also has a sample in before to the
// CPU it used between the two, in percent of one core.
func cpuPercents(before, now []statsRow) {
	prev := make(map[string]statsRow, len(before))
	for _, r := range before {
		prev[r.SandboxID] = r
	}
	for i := range now {
		r, p := &now[i], prev[now[i].SandboxID]
		if r.Stats == nil || p.Stats == nil {
			continue
		}
		dt := r.At.Sub(p.At).Seconds()
		if dt <= 0 || r.CPUSeconds < p.CPUSeconds {
			continue // a new incarnation, or clocks that do not tell
		}
		pct := (r.CPUSeconds - p.CPUSeconds) / dt * 100
		r.CPUPercent = &pct
	}
}
