package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// coldCreateWarmups are runs not counted: page cache and first-exec effects.
const coldCreateWarmups = 3

// coldModes are the process backend's isolation modes, measured side by
// side: the default (the goal's figure) first.
var coldModes = []struct{ isolation, label string }{
	{process.IsolationNamespaces, "isolated (namespaces, the default)"},
	{process.IsolationNone, "none (plain child process)"},
}

func init() { register("process-cold-create", processColdCreate) }

// coldSamples are one mode's measured runs.
type coldSamples struct{ create, firstGet, destroy []time.Duration }

// processColdCreate measures a cold sandbox in each isolation mode: process
// backend Create of a new id (spawn, state file, wait for the first 200), a
// client's first request on a new connection, and Destroy; with
// process-start references measured in the same run.
func processColdCreate(ctx context.Context) (Result, error) {
	tmp, err := os.MkdirTemp("", "sandgate-bench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	gateway, err := buildGateway(ctx)
	if err != nil {
		return Result{}, err
	}
	// What the process backend runs beside that gateway (make build puts
	// both in bin/): sandgate-sandbox.
	bin := process.SandboxBinary(gateway)
	if filepath.Base(bin) != sandboxspec.ServerBinary {
		return Result{}, fmt.Errorf("no %s beside %s", sandboxspec.ServerBinary, gateway)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	backends := make([]*process.Process, len(coldModes))
	for i, m := range coldModes {
		cfg := process.Config{Binary: bin, StateDir: filepath.Join(tmp, m.isolation), Isolation: m.isolation}
		if backends[i], err = process.New(cfg, quiet); err != nil {
			return Result{}, err
		}
	}

	// The modes take turns run by run, so a change in the machine's load
	// during the suite falls on both alike.
	samples := make([]coldSamples, len(coldModes))
	for i := range coldCreateWarmups + opts.ColdCreateRuns {
		for m, p := range backends {
			c, g, d, err := coldCreateOnce(ctx, p, filepath.Join(tmp, "data"), fmt.Sprintf("cold-%s-%d", coldModes[m].isolation, i))
			if err != nil {
				return Result{}, fmt.Errorf("%s: %w", coldModes[m].isolation, err)
			}
			if i >= coldCreateWarmups {
				s := &samples[m]
				s.create, s.firstGet, s.destroy = append(s.create, c), append(s.firstGet, g), append(s.destroy, d)
			}
		}
	}
	// process.New of an isolated backend starts the binary in one probe
	// jail (namespaces, root, Landlock, seccomp, rlimits; no cgroup) that
	// exits instead of serving: an isolated Create without the server.
	probe, err := timeRuns(ctx, func(i int) error {
		_, err := process.New(process.Config{Binary: bin, StateDir: filepath.Join(tmp, fmt.Sprint("probe-", i))}, quiet)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	trueRef, err := timeExec(ctx, "/bin/true")
	if err != nil {
		return Result{}, err
	}
	goRef, err := timeExec(ctx, bin, "sandbox", "-h")
	if err != nil {
		return Result{}, err
	}
	gatewayRef, err := timeExec(ctx, gateway, "sandbox", "-h")
	if err != nil {
		return Result{}, err
	}
	inits, err := packageInits(ctx, bin)
	if err != nil {
		return Result{}, err
	}
	minimal, err := buildMinimalGo(ctx, tmp)
	if err != nil {
		return Result{}, err
	}
	minRef, err := timeExec(ctx, minimal)
	if err != nil {
		return Result{}, err
	}

	var rows [][]string
	for m, mode := range coldModes {
		rows = append(rows, statsRow("Create, "+mode.label+": spawn → first 200 on GET /v1/sandbox", summarize(samples[m].create)))
	}
	for m, mode := range coldModes {
		rows = append(rows, statsRow("first client GET /v1/sandbox after Create, "+mode.label+" (new connection)", summarize(samples[m].firstGet)))
	}
	for m, mode := range coldModes {
		rows = append(rows, statsRow("Destroy, "+mode.label+": SIGTERM → exited and reaped", summarize(samples[m].destroy)))
	}
	iso, none, goStart, pr := summarize(samples[0].create), summarize(samples[1].create), summarize(goRef), summarize(probe)
	rows = append(rows,
		statsRow("probe jail: start → jail built → exit, no server (process.New with isolation)", pr),
		statsRow("reference: fork/exec/wait /bin/true", summarize(trueRef)),
		statsRow("reference: fork/exec/wait `sandgate-sandbox sandbox -h`, the binary every sandbox starts (Go runtime start + exit)", goStart),
		statsRow("of which: its package init (GODEBUG=inittrace=1, summed; the trace adds to it)", summarize(inits)),
		statsRow("reference: fork/exec/wait `gateway sandbox -h`, the gateway binary (what sandboxes start without sandgate-sandbox beside it)", summarize(gatewayRef)),
		statsRow("reference: fork/exec/wait an empty Go program (CGO_ENABLED=0)", summarize(minRef)))
	return Result{
		Title:   "Process backend: cold create",
		Columns: statsColumns,
		Rows:    rows,
		Figures: map[string]float64{figCreateIsolatedP50: msF(iso.P50), figCreateNoneP50: msF(none.P50),
			figGoStartP50: msF(goStart.P50), figProbeP50: msF(pr.P50), figInitP50: msF(summarize(inits).P50),
			figEmptyGoP50: msF(summarize(minRef).P50)},
		Notes: []string{
			fmt.Sprintf("The goal (Create p50 < %g ms, with isolation: the default) is evaluated in the Goals table at the top.", goalProcessP50MS),
			fmt.Sprintf("Both modes, same method: %d runs each after %d unmeasured warm-ups, the modes taking turns run by run; "+
				"each run is a fresh sandbox id with its real thread mounts (backend.ThreadMounts, created before the timer); "+
				"percentiles are nearest-rank, so with %d samples p99 is the maximum.",
				opts.ColdCreateRuns, coldCreateWarmups, opts.ColdCreateRuns),
			"The reference rows, measured in the same run, are the floor: what starting any process, an empty Go program and " +
				"the sandbox binary cost here. Both modes start sandgate-sandbox (cmd/sandgate-sandbox: the sandbox server " +
				"without the gateway's backends, clients and tracing), as the process backend does when it sits beside the " +
				"gateway binary (make build); a Go binary initialises every package it links before main, whichever subcommand " +
				"runs, which is what the gateway binary's row costs more.",
			"Create binds the sandbox's Unix socket, starts sandgate-sandbox (built with CGO_ENABLED=0), writes the atomic state " +
				"file and waits for the first 200 (backend.WaitReady); the socket is bound before the child starts, so the first " +
				"probe queues in the backlog and is answered as soon as the server serves (no polling interval is paid).",
			"Isolated, the binary starts as sandbox-init in new user, mount, pid, net, ipc, uts and cgroup namespaces (a vfork " +
				"of the gateway: the child execs unmapped while the gateway assigns its host ids, then writes its id maps; the child takes uid 1000 once it has " +
				"read its spec), with one Go P (GOMAXPROCS=1), kept while it serves; at its entry point, before the Go runtime " +
				"starts (linked so by scripts/build.sh on linux/amd64; else at package init, a signal round trip per thread each), " +
				"it empties its capability bounding set, clears its ambient set, locks its securebits and sets no_new_privs, " +
				"builds its root with pivot_root while the gateway owns a new thread's dirs and puts it in its cgroups" +
				", applies rlimits, Landlock, drops its capabilities and loads seccomp (the filter " +
				"the gateway compiled once, sent in the spec), then serves in the same process; the probe row is the same jailed " +
				"start (no cgroup) that exits instead of serving, as process.New " +
				"runs it once at start-up: Create's isolated side less the server and the state file, plus the exit.",
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

	client, base := backend.Client(info.URL) // a new transport: a new connection
	defer client.CloseIdleConnections()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start = time.Now()
	req, err := http.NewRequestWithContext(gctx, http.MethodGet, base+"/v1/sandbox", nil)
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
	return timeRuns(ctx, func(int) error {
		err := exec.CommandContext(ctx, name, args...).Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return fmt.Errorf("run %s: %w", name, err)
		}
		return nil
	})
}

// packageInits runs `bin sandbox -h` with GODEBUG=inittrace=1 and sums the
// clock time of its package initializers, per run.
func packageInits(ctx context.Context, bin string) ([]time.Duration, error) {
	var out []time.Duration
	_, err := timeRuns(ctx, func(int) error {
		cmd := exec.CommandContext(ctx, bin, "sandbox", "-h")
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return fmt.Errorf("run %s: %w", bin, err)
		}
		d, n := sumInitTrace(stderr.String())
		if n == 0 {
			return fmt.Errorf("%s printed no init trace", bin)
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out[coldCreateWarmups:], nil
}

// sumInitTrace adds up the "N ms clock" of inittrace lines
// ("init PKG @T ms, N ms clock, B bytes, A allocs") and counts them.
func sumInitTrace(trace string) (time.Duration, int) {
	var sum time.Duration
	n := 0
	for _, line := range strings.Split(trace, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || f[0] != "init" || f[6] != "clock," {
			continue
		}
		v, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			continue
		}
		sum += time.Duration(v * float64(time.Millisecond))
		n++
	}
	return sum, n
}

// buildMinimalGo builds an empty Go program in dir, the Go runtime's own
// start and exit without any package of the gateway.
func buildMinimalGo(ctx context.Context, dir string) (string, error) {
	src := filepath.Join(dir, "empty")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module empty\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", "empty", ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build empty Go program: %w\n%s", err, out)
	}
	return filepath.Join(src, "empty"), nil
}

// timeRuns times f over the warm-ups and the measured runs, keeping the latter.
func timeRuns(ctx context.Context, f func(run int) error) ([]time.Duration, error) {
	var out []time.Duration
	for i := range coldCreateWarmups + opts.ColdCreateRuns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		err := f(i)
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		if i >= coldCreateWarmups {
			out = append(out, d)
		}
	}
	return out, nil
}
