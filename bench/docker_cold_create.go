package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/docker"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/testutil"
)

// dockerColdWarmups are creates not counted: image layers in the page
// cache, engine caches warm.
const dockerColdWarmups = 2

func init() { register("docker-cold-create", dockerColdCreate) }

// dockerColdCreate measures the docker backend on this machine's engine: a
// cold create to the first 200 (and destroy) over fresh sandbox ids, the
// engine's own `docker run` + first 200 as the reference in the same run,
// and a warm reclaim through a gateway with and without pause_warm.
func dockerColdCreate(ctx context.Context) (Result, error) {
	tmp, err := os.MkdirTemp("", "sandgate-bench-docker-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	bin, err := buildGateway(ctx)
	if err != nil {
		return Result{}, err
	}
	image, err := testutil.BuildSandboxImage(ctx, process.SandboxBinary(bin))
	if err != nil {
		return Result{}, err
	}
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return Result{}, err
	}
	defer api.Close()
	prefix := "sgbench-" + benchHex(4)
	defer removePrefix(api, prefix)

	d, err := docker.New(docker.Config{Image: image, ContainerPrefix: prefix, PullPolicy: docker.PullNever},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Result{}, err
	}
	defer d.Close()
	var create, destroy []time.Duration
	for i := range dockerColdWarmups + opts.DockerColdRuns {
		c, x, err := dockerColdOnce(ctx, d, filepath.Join(tmp, "data"), fmt.Sprintf("cold-%d", i))
		if err != nil {
			return Result{}, err
		}
		if i >= dockerColdWarmups {
			create, destroy = append(create, c), append(destroy, x)
		}
	}
	refRun, refRm, err := dockerCLIReference(ctx, image, prefix)
	if err != nil {
		return Result{}, err
	}
	warmPlain, _, err := warmReclaim(ctx, bin, image, prefix+"-w", filepath.Join(tmp, "gw-plain"))
	if err != nil {
		return Result{}, err
	}
	warmPaused, releasePaused, err := warmReclaim(ctx, bin, image, prefix+"-p", filepath.Join(tmp, "gw-paused"), "--pause-warm")
	if err != nil {
		return Result{}, err
	}

	engine := "unknown engine"
	if v, err := api.ServerVersion(ctx); err == nil {
		engine = "Docker Engine " + v.Version + " (API " + v.APIVersion + ")"
	}
	if info, err := api.Info(ctx); err == nil {
		engine += fmt.Sprintf(", storage driver %s, cgroup v%s", info.Driver, info.CgroupVersion)
	}
	cs, ref := summarize(create), summarize(refRun)
	return Result{
		Title:   "Docker backend: cold create and warm reclaim",
		Columns: statsColumns,
		Rows: [][]string{
			statsRow("Create: container create + start → first 200 on GET /v1/sandbox", cs),
			statsRow("Destroy: stop (SIGTERM) + remove", summarize(destroy)),
			statsRow("reference: `docker run -d -p 127.0.0.1::8080` + `docker port` + first 200", ref),
			statsRow("reference: `docker rm -f`", summarize(refRm)),
			statsRow("warm reclaim, HTTP PUT /threads/{t}/sandbox (pause_warm off)", summarize(warmPlain)),
			statsRow("warm reclaim, HTTP PUT /threads/{t}/sandbox (pause_warm on: includes unpause)", summarize(warmPaused)),
			statsRow("release, HTTP DELETE /threads/{t}/sandbox (pause_warm on: includes pause)", summarize(releasePaused)),
		},
		Figures: map[string]float64{figCreateP50: msF(cs.P50), figDockerRefP50: msF(ref.P50)},
		Notes: []string{
			fmt.Sprintf("%s. The reference rows, measured in the same run on the same image, are what the engine itself costs: "+
				"Create p50 %s ms against `docker run` + ready p50 %s ms.", engine, ms(cs.P50), ms(ref.P50)),
			fmt.Sprintf("%d cold creates after %d unmeasured warm-ups, each a fresh sandbox id with its real thread mounts; "+
				"percentiles are nearest-rank, so with %d samples p99 is the maximum. %d reclaims per warm row.",
				opts.DockerColdRuns, dockerColdWarmups, opts.DockerColdRuns, opts.DockerWarmRuns),
			"Create includes the image inspect (pull_policy never), ContainerCreate with the hardened host config (cap drop ALL, " +
				"no-new-privileges, memory/CPU/pids limits, docker-init), start, the published port's inspect and backend.WaitReady; " +
				"the CLI reference runs the image's own entrypoint with none of those options.",
			"Warm reclaim goes through a real gateway on a real redis-server: Redis read, a liveness inspect of the container, " +
				"with pause_warm an unpause under the sandbox's lock, and the Lua activate.",
		},
	}, nil
}

// dockerColdOnce creates one sandbox, then destroys it, timing both.
func dockerColdOnce(ctx context.Context, d *docker.Docker, dataDir, thread string) (time.Duration, time.Duration, error) {
	spec, err := benchSpec(dataDir, thread)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	info, err := d.Create(ctx, spec)
	create := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	start = time.Now()
	if err := d.Destroy(ctx, info); err != nil {
		return 0, 0, err
	}
	return create, time.Since(start), nil
}

// dockerCLIReference times what a shell-out costs: docker run, docker port,
// wait for the first 200; then docker rm -f.
func dockerCLIReference(ctx context.Context, image, prefix string) (run, rm []time.Duration, err error) {
	for i := range dockerColdWarmups + opts.DockerColdRuns {
		name := fmt.Sprintf("%s-ref-%d", prefix, i)
		start := time.Now()
		if _, err := dockerCLI(ctx, "run", "-d", "--label", backend.LabelManagedBy+"=bench", "-p", "127.0.0.1::8080", "--name", name, image); err != nil {
			return nil, nil, err
		}
		port, err := dockerCLI(ctx, "port", name, "8080/tcp")
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = backend.WaitReady(rctx, "http://"+strings.TrimSpace(strings.SplitN(port, "\n", 2)[0]))
			cancel()
		}
		took := time.Since(start)
		if err != nil {
			_, _ = dockerCLI(context.WithoutCancel(ctx), "rm", "-f", name)
			return nil, nil, err
		}
		start = time.Now()
		if _, err := dockerCLI(ctx, "rm", "-f", name); err != nil {
			return nil, nil, err
		}
		if i >= dockerColdWarmups {
			run, rm = append(run, took), append(rm, time.Since(start))
		}
	}
	return run, rm, nil
}

func dockerCLI(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", args[0], err, out)
	}
	return string(out), nil
}

// warmReclaim runs a docker-backend gateway and times release + reclaim of
// one thread's sandbox over HTTP.
func warmReclaim(ctx context.Context, bin, image, prefix, dir string, extra ...string) (reclaim, release []time.Duration, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	rs, raddr, err := startRedis(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	defer rs.stop(syscall.SIGKILL, 0)
	args := append([]string{"--backend", "docker", "--image", image, "--container-prefix", prefix, "--docker-pull-policy", "never"}, extra...)
	gs, gaddr, err := startGatewayEnv(ctx, bin, raddr, filepath.Join(dir, "data"), filepath.Join(dir, "gateway.log"), nil, args...)
	if err != nil {
		return nil, nil, err
	}
	defer gs.stop(syscall.SIGTERM, 10*time.Second)
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, nil, err
	}
	defer api.Close()
	defer removePrefix(api, prefix)

	url := "http://" + gaddr + "/threads/warm/sandbox"
	if _, err := call(ctx, "PUT", url, "", nil); err != nil {
		return nil, nil, err
	}
	for range opts.DockerWarmRuns {
		t0 := time.Now()
		if _, err := call(ctx, "DELETE", url, "", nil); err != nil {
			return nil, nil, err
		}
		release = append(release, time.Since(t0))
		t0 = time.Now()
		body, err := call(ctx, "PUT", url, "", nil)
		if err != nil || !strings.Contains(string(body), `"outcome":"warm"`) {
			return nil, nil, fmt.Errorf("warm reclaim: %v %s", err, body)
		}
		reclaim = append(reclaim, time.Since(t0))
	}
	return reclaim, release, nil
}

// removePrefix removes every container named {prefix}-... the bench made.
func removePrefix(api *client.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", prefix+"-"))})
	if err != nil {
		return
	}
	for _, c := range cs {
		_ = api.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}

func benchHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
