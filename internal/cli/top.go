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

func runTop(ctx context.Context, env Env, args []string) error {
	var c common
	var f filters
	var interval time.Duration
	fs := newFlags(env, "sandboxes top", "sandboxes top [--user U] [--thread T] [--state S] [--backend B] [--interval 1s] [-o json]", &c)
	f.bind(fs)
	fs.DurationVar(&interval, "interval", time.Second, "time between the two samples CPU % is computed from")
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
	var first, second statsAnswer
	if err := cl.call(ctx, "GET", "/admin/v1/stats", f.query(), &first); err != nil {
		return err
	}
	if first.Supported {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		if err := cl.call(ctx, "GET", "/admin/v1/stats", f.query(), &second); err != nil {
			return err
		}
		cpuPercents(first.Sandboxes, second.Sandboxes)
	} else {
		second = first
		fmt.Fprintln(env.Stderr, "gateway: this gateway's sandbox backend cannot tell resource use; listing only")
	}
	if c.output == "json" {
		return writeJSON(env.Stdout, second)
	}
	t := newTable(env.Stdout, "SANDBOX ID", "USER", "THREAD", "BACKEND", "CPU %", "MEM", "PIDS")
	for _, r := range second.Sandboxes {
		cpu, mem, pids := "-", "-", "-"
		if r.CPUPercent != nil {
			cpu = strconv.FormatFloat(*r.CPUPercent, 'f', 1, 64)
		}
		if r.Stats != nil {
			mem, pids = bytesIEC(r.MemoryBytes), strconv.Itoa(r.PIDs)
		}
		t.row(r.SandboxID, r.User, r.Thread, r.Backend, cpu, mem, pids)
	}
	return t.flush()
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
