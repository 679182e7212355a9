package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/docker"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

func init() { register("freeze", freezeSuite) }

const (
	figThawProcessP50 = "thaw.process.p50_ms"
	figThawProcessP99 = "thaw.process.p99_ms"
	figThawDockerP99  = "thaw.docker.p99_ms"
	goalThawP99MS     = 10.0 // issue 23: thaw on request, process backend
	// freezeHog is how much memory the 1 GiB sandbox touches.
	freezeHog = 1 << 30
)

// freezeSuite measures idle freeze on real sandboxes through a real
// gateway: the first request after a freeze (its thaw) next to a warm
// reclaim, on the process and docker backends, and the freeze and thaw of
// a sandbox that holds 1 GiB of touched memory.
func freezeSuite(ctx context.Context) (Result, error) {
	env, err := startSuiteEnv(ctx, "freeze")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	res := Result{Title: "Idle freeze: thaw on request, and a 1 GiB sandbox", Columns: statsColumns, Figures: map[string]float64{}}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pbe, err := process.New(process.Config{Binary: process.SandboxBinary(env.bin),
		StateDir: filepath.Join(env.tmp, "process", "sandboxes", "process")}, quiet)
	if err != nil {
		return Result{}, err
	}
	thaw, warm, hog, err := freezeBackend(ctx, env, "process", pbe, filepath.Join(env.tmp, "process"))
	if err != nil {
		return Result{}, fmt.Errorf("process: %w", err)
	}
	res.Rows = append(res.Rows,
		statsRow("process: first request after a freeze (thaw + proxied GET /v1/sandbox)", summarize(thaw)),
		statsRow("process: warm reclaim, HTTP PUT /threads/{t}/sandbox (reference)", summarize(warm)),
		statsRow("process, 1 GiB touched: freeze (cgroup freezer / SIGSTOP)", summarize(hog.freeze)),
		statsRow("process, 1 GiB touched: thaw", summarize(hog.thaw)))
	ts := summarize(thaw)
	res.Figures[figThawProcessP50], res.Figures[figThawProcessP99] = msF(ts.P50), msF(ts.P99)
	res.Notes = append(res.Notes, fmt.Sprintf("process, 1 GiB sandbox: %s resident when frozen; the thaw row is the backend's Resume alone.", hog.rss))

	image, err := testutil.BuildSandboxImage(ctx, process.SandboxBinary(env.bin))
	if err != nil {
		res.Notes = append(res.Notes, "docker: not measured: "+err.Error())
		return res, nil
	}
	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return Result{}, err
	}
	defer api.Close()
	prefix := "sgbench-" + benchHex(4)
	defer removePrefix(api, prefix)
	dbe, err := docker.New(docker.Config{Image: image, ContainerPrefix: prefix, PullPolicy: docker.PullNever}, quiet)
	if err != nil {
		return Result{}, err
	}
	defer dbe.Close()
	thaw, warm, hog, err = freezeBackend(ctx, env, "docker", dbe, filepath.Join(env.tmp, "docker"),
		"--backend", "docker", "--image", image, "--container-prefix", prefix, "--docker-pull-policy", "never")
	if err != nil {
		return Result{}, fmt.Errorf("docker: %w", err)
	}
	res.Rows = append(res.Rows,
		statsRow("docker: first request after a freeze (unpause + proxied GET /v1/sandbox)", summarize(thaw)),
		statsRow("docker: warm reclaim, HTTP PUT /threads/{t}/sandbox (reference)", summarize(warm)),
		statsRow("docker, 1 GiB touched: freeze (engine pause)", summarize(hog.freeze)),
		statsRow("docker, 1 GiB touched: thaw (engine unpause)", summarize(hog.thaw)))
	res.Figures[figThawDockerP99] = msF(summarize(thaw).P99)
	res.Notes = append(res.Notes,
		fmt.Sprintf("docker, 1 GiB sandbox: %s resident when frozen.", hog.rss),
		fmt.Sprintf("%d freezes per backend, each by `POST /threads/{t}/sandbox/freeze` (which waits out cache_ttl + touch_interval, "+
			"100 ms each here, before it stops the sandbox); the row times the next request, which finds the record marked, takes the "+
			"sandbox's lock, resumes it, clears the mark, activates the record and proxies the request. Warm reclaim: DELETE then timed PUT. "+
			"The 1 GiB rows call the backend's Pause and Resume on a sandbox whose background process holds 1 GiB it has written; "+
			"neither copies memory (the pages stay where they are), so their time does not grow with it.", opts.FreezeRuns),
		fmt.Sprintf("The goal (thaw on request p99 < %g ms on the process backend) is in the Goals table.", goalThawP99MS))
	return res, nil
}

type hogTimes struct {
	freeze, thaw []time.Duration
	rss          string
}

// freezeBackend runs one gateway on be's kind and measures it (dataDir is
// the gateway's; be must see its sandboxes).
func freezeBackend(ctx context.Context, env *suiteEnv, name string, be backend.Freezer, dataDir string, args ...string) (thaw, warm []time.Duration, hog hogTimes, err error) {
	args = append(args, "--cache-ttl", "100ms", "--touch-interval", "100ms", "--redis-prefix", "bench:"+name+":")
	gs, gaddr, err := startGatewayEnv(ctx, env.bin, env.redisAddr, dataDir, filepath.Join(env.tmp, name+"-gateway.log"), nil, args...)
	if err != nil {
		return nil, nil, hog, err
	}
	defer gs.stop(syscall.SIGTERM, 10*time.Second)
	base := "http://" + gaddr
	threads := []string{"thaw", "warm", "hog"}
	defer destroyThreads(context.WithoutCancel(ctx), base, threads)
	for _, t := range threads {
		if _, err := call(ctx, "PUT", base+"/threads/"+t+"/sandbox", "", nil); err != nil {
			return nil, nil, hog, err
		}
	}
	for range opts.FreezeRuns {
		if body, err := call(ctx, "POST", base+"/threads/thaw/sandbox/freeze", "", nil); err != nil {
			return nil, nil, hog, fmt.Errorf("freeze: %w %s", err, body)
		}
		t0 := time.Now()
		if _, err := call(ctx, "GET", base+"/threads/thaw/v1/sandbox", "", nil); err != nil {
			return nil, nil, hog, err
		}
		thaw = append(thaw, time.Since(t0))
		if _, err := call(ctx, "DELETE", base+"/threads/warm/sandbox", "", nil); err != nil {
			return nil, nil, hog, err
		}
		t0 = time.Now()
		body, err := call(ctx, "PUT", base+"/threads/warm/sandbox", "", nil)
		if err != nil || !strings.Contains(string(body), `"outcome":"warm"`) {
			return nil, nil, hog, fmt.Errorf("warm reclaim: %v %s", err, body)
		}
		warm = append(warm, time.Since(t0))
	}
	hog, err = freezeHogged(ctx, base, be)
	return thaw, warm, hog, err
}

var rssLine = regexp.MustCompile(`VmRSS:\s+(\d+) kB`)

// freezeHogged makes thread hog's sandbox hold freezeHog bytes of written
// memory in a background process, then times the backend's Pause and
// Resume of it.
func freezeHogged(ctx context.Context, base string, be backend.Freezer) (hogTimes, error) {
	var h hogTimes
	hogCmd := fmt.Sprintf("sh -c '(head -c %d /dev/zero; sleep 3600) | tail' >/dev/null 2>&1 & echo started", freezeHog)
	if _, err := execIn(ctx, base, "hog", hogCmd); err != nil {
		return h, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := execIn(ctx, base, "hog", "cat /proc/[0-9]*/status 2>/dev/null | grep VmRSS")
		if err != nil {
			return h, err
		}
		var kb int64
		for _, m := range rssLine.FindAllStringSubmatch(out, -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			kb += n
		}
		if kb*1024 >= freezeHog {
			h.rss = fmt.Sprintf("%.2f GiB", float64(kb)/(1<<20))
			break
		}
		if time.Now().After(deadline) {
			return h, fmt.Errorf("the sandbox holds %d kB, not 1 GiB, after 2 minutes", kb)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sid := identity.SandboxID("default", "hog")
	info, ok, err := be.(backend.Backend).Discover(ctx, sid)
	if err != nil || !ok {
		return h, fmt.Errorf("find the 1 GiB sandbox: %v (found %v)", err, ok)
	}
	for range max(opts.FreezeRuns/5, 5) {
		t0 := time.Now()
		if err := be.Freeze(ctx, info); err != nil {
			return h, err
		}
		h.freeze = append(h.freeze, time.Since(t0))
		t0 = time.Now()
		if err := be.Thaw(ctx, info); err != nil {
			return h, err
		}
		h.thaw = append(h.thaw, time.Since(t0))
	}
	_, _ = execIn(ctx, base, "hog", "pkill sleep; true")
	return h, nil
}

// execIn runs command in thread's sandbox through the gateway at base.
func execIn(ctx context.Context, base, thread, command string) (string, error) {
	return execAt(ctx, base+"/threads/"+thread, command)
}

// execAt runs command through the sandbox exec API under prefix (a
// thread's route on a gateway, or a sandbox's own URL), with headers.
func execAt(ctx context.Context, prefix, command string, headers ...[2]string) (string, error) {
	b, _ := json.Marshal(map[string]string{"command": command})
	body, err := call(ctx, "POST", prefix+"/v1/shell/exec", string(b), append([][2]string{{"Content-Type", "application/json"}}, headers...))
	if err != nil {
		return "", err
	}
	var env struct {
		Data struct {
			Output string `json:"output"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return "", fmt.Errorf("exec %q: %w", command, err)
	}
	return env.Data.Output, nil
}
