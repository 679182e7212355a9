package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"
	"github.com/redis/go-redis/v9"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The docker backend through real gateway processes and the real engine.

func TestDockerCreateExecDestroyThroughGateway(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	skills := t.TempDir()
	// Shared by every sandbox uid: the operator's skills must be readable
	// by others (a temp dir is 0700).
	if err := os.WriteFile(filepath.Join(skills, "SKILL.md"), []byte("a skill"), 0o644); err != nil || os.Chmod(skills, 0o755) != nil {
		t.Fatal(err)
	}
	f := d.fleet("--skills-dir", skills, "--docker-memory", "300m", "--docker-cpus", "0.5", "--docker-pids-limit", "128")
	g := f.start()
	if code, body, _ := call(t, "GET", g.URL+"/readyz", nil); code != 200 {
		t.Fatalf("readyz with the engine up: %d %s", code, body)
	}

	out := shell(t, g.URL, "d1", "echo hello > notes.txt && pwd && cat /mnt/skills/SKILL.md")
	if !strings.Contains(out.Output, "/mnt/user-data/workspace") || !strings.Contains(out.Output, "a skill") {
		t.Fatalf("exec: %+v", out)
	}
	if n := len(d.containers()); n != 1 {
		t.Fatalf("%d containers for one thread", n)
	}
	c := d.containerOf(g.URL, "d1")

	// Limits and hardening, as docker inspect shows them.
	hc := c.HostConfig
	if hc.Memory != 300<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 128 {
		t.Errorf("limits: memory %d cpus %d pids %v", hc.Memory, hc.NanoCPUs, hc.PidsLimit)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("hardening: cap drop %q security %q", hc.CapDrop, hc.SecurityOpt)
	}

	// Nothing published, no network: the gateway reaches the server on its
	// socket, bound from the data dir.
	if hc.NetworkMode != "none" || len(hc.PortBindings) != 0 || len(c.NetworkSettings.Ports) != 0 {
		t.Errorf("network %q bindings %v ports %v, want none", hc.NetworkMode, hc.PortBindings, c.NetworkSettings.Ports)
	}
	if inside := shell(t, g.URL, "d1", "cat /proc/net/dev; ls /run/sandgate/api").Output; strings.Contains(inside, "eth0") || !strings.Contains(inside, "api-") {
		t.Errorf("interfaces and socket dir inside:\n%s", inside)
	}

	// The skills mount refuses writes.
	ro := shell(t, g.URL, "d1", "echo x > /mnt/skills/new.txt")
	if ro.ExitCode == nil || *ro.ExitCode == 0 || !strings.Contains(strings.ToLower(ro.Output), "read-only") {
		t.Errorf("write to /mnt/skills: %+v", ro)
	}

	// Released (no pause_warm): parked, not paused.
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/d1/sandbox", nil); code != 204 {
		t.Fatalf("release: %d", code)
	}
	if d.containerOf(g.URL, "d1").State.Paused {
		t.Error("paused without pause_warm")
	}

	// Destroyed: the container goes; the thread's files stay for the next one.
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/d1/sandbox?destroy=true", nil); code != 204 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	if n := len(d.containers()); n != 0 {
		t.Fatalf("%d containers after destroy", n)
	}
	again := shell(t, g.URL, "d1", "cat notes.txt")
	if strings.TrimSpace(again.Output) != "hello" {
		t.Fatalf("after recreate: %+v", again)
	}
	if d.containerOf(g.URL, "d1").ID == c.ID {
		t.Fatal("not a new container")
	}
}

func TestDockerContainerRemovedBehindTheGatewaysBackIsRecreated(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet().start()
	shell(t, g.URL, "gone", "echo keep > kept.txt")
	old := d.containerOf(g.URL, "gone")
	if err := d.api.ContainerRemove(context.Background(), old.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	out := shell(t, g.URL, "gone", "cat kept.txt")
	if strings.TrimSpace(out.Output) != "keep" {
		t.Fatalf("after removal: %+v", out)
	}
	if now := d.containerOf(g.URL, "gone"); now.ID == old.ID || len(d.containers()) != 1 {
		t.Fatalf("container %s (was %s), %d containers", now.ID, old.ID, len(d.containers()))
	}
}

func TestDockerGatewayRestartFindsItsContainers(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	f := d.fleet()
	g := f.start()
	ids := map[string]string{}
	for _, th := range []string{"keep-a", "keep-b"} {
		shell(t, g.URL, th, "true")
		ids[th] = d.containerOf(g.URL, th).ID
	}
	g.kill()

	check := func(g *gateway, when string) {
		t.Helper()
		for th, id := range ids {
			shell(t, g.URL, th, "true")
			if got := d.containerOf(g.URL, th).ID; got != id {
				t.Errorf("%s: %s has container %s, want %s", when, th, got, id)
			}
		}
		if n := len(d.containers()); n != len(ids) {
			t.Errorf("%s: %d containers, want %d", when, n, len(ids))
		}
	}
	g2 := f.start()
	check(g2, "restart with Redis intact")
	g2.kill()

	// Redis lost too (an embedded Redis dies with its gateway): Discover
	// adopts the running containers by name.
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	check(f.start(), "restart with Redis flushed")
}

func TestDockerTwoGatewaysRacingMakeOneContainer(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	shared := d.fleet()
	a, b := shared.start(), shared.start()
	// A gateway of another fleet (its own Redis, so no shared lock): only the
	// container name stands between it and a duplicate.
	c := d.fleet().start()
	for _, tc := range []struct {
		thread   string
		replicas []*gateway
	}{{"race-shared-redis", []*gateway{a, b}}, {"race-no-shared-lock", []*gateway{a, c}}} {
		var wg sync.WaitGroup
		for i := range 6 {
			g := tc.replicas[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body, _ := call(t, "POST", g.URL+"/threads/"+tc.thread+"/v1/shell/exec", map[string]any{"command": "hostname"})
				if code != 200 {
					t.Errorf("%s: %d %s", tc.thread, code, body)
				}
			}()
		}
		wg.Wait()
	}
	if n := len(d.containers()); n != 2 {
		t.Fatalf("%d containers for two threads", n)
	}
}

func TestDockerPauseWarm(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet("--pause-warm").start()
	shell(t, g.URL, "cold", "echo state > s.txt")
	before := d.containerOf(g.URL, "cold")
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/cold/sandbox", nil); code != 204 {
		t.Fatalf("release: %d", code)
	}
	if c := d.containerOf(g.URL, "cold"); !c.State.Paused {
		t.Fatalf("warm sandbox not paused: %+v", c.State)
	}
	code, body, _ := call(t, "PUT", g.URL+"/threads/cold/sandbox", nil)
	var v sandboxView
	_ = json.Unmarshal(body, &v)
	if code != 200 || v.Outcome != "warm" {
		t.Fatalf("reclaim: %d %s", code, body)
	}
	after := d.containerOf(g.URL, "cold")
	if after.State.Paused || after.ID != before.ID {
		t.Fatalf("reclaimed: paused=%v id %s (was %s)", after.State.Paused, after.ID, before.ID)
	}
	if out := shell(t, g.URL, "cold", "cat s.txt"); strings.TrimSpace(out.Output) != "state" {
		t.Fatalf("after thaw: %+v", out)
	}
}

func TestDockerBackendAutoPicksTheEngine(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet().start("--backend", "auto")
	shell(t, g.URL, "auto", "true")
	if n := len(d.containers()); n != 1 {
		t.Fatalf("%d containers", n)
	}
	if !strings.Contains(g.logs.String(), "backend auto: using docker") {
		t.Fatalf("the log does not say which backend and why:\n%s", tail(g.logs.String(), 20))
	}
}

// The gateway itself in a container on a user network: sandboxes join the
// network, nothing is published, and the gateway reaches them by name.
func TestDockerGatewayInAContainerUsesTheNetwork(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	netName := d.prefix + "-net"
	if _, err := d.api.NetworkCreate(ctx, netName, network.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The data dir is mounted at the same path: the engine resolves the
	// sandboxes' bind mounts on the host. The sandbox image holds the
	// sandbox server alone: the gateway's (static) binary is bound in.
	dataDir := t.TempDir()
	gwName := d.prefix + "-gateway"
	port := nat.Port("8080/tcp")
	resp, err := d.api.ContainerCreate(ctx, &container.Config{
		Image:      d.image,
		Entrypoint: []string{"/gateway"},
		Cmd: []string{"serve", "--listen", "0.0.0.0:8080", "--insecure", "--data-dir", dataDir, "--log-format", "json",
			"--backend", "docker", "--image", d.image, "--container-prefix", d.prefix, "--docker-pull-policy", "never",
			"--docker-network", netName},
		User:         "0:0",
		ExposedPorts: nat.PortSet{port: {}},
	}, &container.HostConfig{
		NetworkMode:  container.NetworkMode(netName),
		PortBindings: nat.PortMap{port: {{HostIP: "127.0.0.1"}}},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: "/var/run/docker.sock", Target: "/var/run/docker.sock"},
			{Type: mount.TypeBind, Source: dataDir, Target: dataDir},
			{Type: mount.TypeBind, Source: testutil.GatewayBinary(t), Target: "/gateway", ReadOnly: true},
		},
	}, nil, nil, gwName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the gateway's sandboxes are gone (env cleanup runs last)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.api.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
		d.removeAll()
		_ = d.api.NetworkRemove(ctx, netName)
	})
	if err := d.api.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	gw, err := d.api.ContainerInspect(ctx, resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%s", gw.NetworkSettings.Ports[port][0].HostPort)
	waitFor(t, func() bool {
		r, err := http.Get(base + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	})

	out := shell(t, base, "in-net", "echo via-network > n.txt && cat n.txt")
	if strings.TrimSpace(out.Output) != "via-network" {
		t.Fatalf("exec: %+v", out)
	}
	// Sandgate's own image needs no network: the gateway in its container
	// reaches the sandbox on its socket in the shared data dir.
	c := d.containerOf(base, "in-net")
	if string(c.HostConfig.NetworkMode) != "none" || len(c.HostConfig.PortBindings) != 0 || len(c.NetworkSettings.Ports) != 0 {
		t.Fatalf("sandbox network %q bindings %+v ports %+v", c.HostConfig.NetworkMode, c.HostConfig.PortBindings, c.NetworkSettings.Ports)
	}
	if data, err := os.ReadFile(filepath.Join(dataDir, "users", "default", "threads", "in-net", "user-data", "workspace", "n.txt")); err != nil || string(data) != "via-network\n" {
		t.Fatalf("thread file on the host: %q %v", data, err)
	}
}

// With the engine unreachable the gateway still starts: readiness fails,
// requests answer 503 backend_unavailable (not 502), and backend auto
// falls back to the process backend, saying why.
func TestDockerEngineDownIs503AndAutoFallsBack(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	f := d.fleet("--docker-host", "unix:///nonexistent/docker.sock")
	g := f.start()
	if code, _, _ := call(t, "GET", g.URL+"/readyz", nil); code != 503 {
		t.Errorf("readyz with the engine down: %d", code)
	}
	code, body, hdr := call(t, "POST", g.URL+"/threads/down/v1/shell/exec", map[string]any{"command": "true"})
	if code != 503 || errorCode(t, body) != "backend_unavailable" || hdr.Get("Retry-After") == "" {
		t.Errorf("exec with the engine down: %d %s (Retry-After %q)", code, body, hdr.Get("Retry-After"))
	}

	auto := f.start("--backend", "auto")
	if out := shell(t, auto.URL, "fallback", "echo ok"); strings.TrimSpace(out.Output) != "ok" {
		t.Fatalf("exec on the fallback: %+v", out)
	}
	if logs := auto.logs.String(); !strings.Contains(logs, "backend auto: using process") || !strings.Contains(logs, "no container runtime answered") {
		t.Errorf("the log does not say which backend and why:\n%s", tail(logs, 20))
	}
	if n := len(d.containers()); n != 0 {
		t.Errorf("%d containers", n)
	}
}
