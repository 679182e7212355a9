package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/sandgate/sandgate/internal/backend/process"
)

// coldCreateWarmups are runs not counted: page cache and first-exec effects.
const coldCreateWarmups = 3

func init() { register("process-cold-create", processColdCreate) }

// processColdCreate measures a cold sandbox: process backend Create of a new
// id (spawn, state file, wait for the first 200), a client's first request
// on a new connection, and Destroy; with process-start references measured
// in the same run.
func processColdCreate(ctx context.Context) (Result, error) {
	tmp, err := os.MkdirTemp("", "sandgate-bench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	bin, err := buildGateway(ctx)
	if err != nil {
		return Result{}, err
	}
	p, err := process.New(process.Config{Binary: bin, StateDir: tmp + "/state"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Result{}, err
	}

	var create, firstGet, destroy []time.Duration
	for i := range coldCreateWarmups + opts.ColdCreateRuns {
		c, g, d, err := coldCreateOnce(ctx, p, tmp+"/data", fmt.Sprintf("cold-%d", i))
		if err != nil {
			return Result{}, err
		}
		if i >= coldCreateWarmups {
			create, firstGet, destroy = append(create, c), append(firstGet, g), append(destroy, d)
		}
	}
	trueRef, err := timeExec(ctx, "/bin/true")
	if err != nil {
		return Result{}, err
	}
	goRef, err := timeExec(ctx, bin, "sandbox", "-h")
	if err != nil {
		return Result{}, err
	}

	cs := summarize(create)
	return Result{
		Title:   "Process backend: cold create",
		Columns: statsColumns,
		Rows: [][]string{
			statsRow("Create: spawn → first 200 on GET /v1/sandbox", cs),
			statsRow("first client GET /v1/sandbox after Create (new connection)", summarize(firstGet)),
			statsRow("Destroy: SIGTERM → exited and reaped", summarize(destroy)),
			statsRow("reference: fork/exec/wait /bin/true", summarize(trueRef)),
			statsRow("reference: fork/exec/wait `gateway sandbox -h` (Go runtime start + exit)", summarize(goRef)),
		},
		Figures: map[string]float64{figCreateP50: msF(cs.P50), figGoStartP50: msF(summarize(goRef).P50)},
		Notes: []string{
			"The goal (Create p50 < 50 ms) is evaluated in the Goals table at the top.",
			fmt.Sprintf("%d runs after %d unmeasured warm-ups, each a fresh sandbox id with its real thread mounts "+
				"(backend.ThreadMounts, created before the timer); percentiles are nearest-rank, so with %d samples p99 is the maximum.",
				opts.ColdCreateRuns, coldCreateWarmups, opts.ColdCreateRuns),
			"The reference rows, measured in the same run, are the floor: what starting any process, and this Go binary, costs here.",
			"Create includes binding the loopback socket, fork/exec of the gateway binary (built with CGO_ENABLED=0), " +
				"the atomic state file and backend.WaitReady; the socket is bound before the child starts, so the first " +
				"probe queues in the backlog and is answered as soon as the server serves (no polling interval is paid).",
		},
	}, nil
}

func coldCreateOnce(ctx context.Context, p *process.Process, dataDir, thread string) (create, get, destroy time.Duration, err error) {
	spec, err := benchSpec(dataDir, thread)
	if err != nil {
		return 0, 0, 0, err
	}

	start := time.Now()
	info, err := p.Create(ctx, spec)
	create = time.Since(start)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		if err != nil {
			_ = p.Destroy(context.WithoutCancel(ctx), info)
		}
	}()

	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	start = time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, info.URL+"/v1/sandbox", nil)
	if err != nil {
		return 0, 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	get = time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("first GET: status %d", resp.StatusCode)
	}

	start = time.Now()
	if err = p.Destroy(ctx, info); err != nil {
		return 0, 0, 0, err
	}
	return create, get, time.Since(start), nil
}

// timeExec times fork/exec/wait of a command (its exit status is ignored).
func timeExec(ctx context.Context, name string, args ...string) ([]time.Duration, error) {
	var out []time.Duration
	for i := range coldCreateWarmups + opts.ColdCreateRuns {
		start := time.Now()
		err := exec.CommandContext(ctx, name, args...).Run()
		d := time.Since(start)
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, fmt.Errorf("run %s: %w", name, err)
		}
		if i >= coldCreateWarmups {
			out = append(out, d)
		}
	}
	return out, nil
}
