package deploy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// gatewayUID owns everything the gateway image writes (its USER).
const gatewayUID = 65532

// TestGatewayImageDockerBackend runs the gateway image as compose.yaml does
// (docker backend, engine socket mounted, sandboxes on a Docker network
// reached by container name, data dir at the same path on both sides,
// read-only root, no capabilities, an API key instead of --insecure) next
// to a real Redis, and proxies an exec through it to the sandbox container
// it creates.
//
// Redis runs in a container on the same network: this machine's Debian
// redis-server binary and the libraries it links, bind-mounted read-only
// into the FROM scratch sandbox image (nothing can be pulled here). A Redis
// on the host would need the gateway on the host network, where Docker's DNS
// does not resolve the sandboxes' container names.
func TestGatewayImageDockerBackend(t *testing.T) {
	t.Parallel()
	gw := gatewayImage(t)
	sandboxImage := testutil.SandboxImage(t)
	c := testutil.DockerClient(t)
	socket := dockerSocket(c)
	testutil.Require(t, socket != "", "a Docker engine on a unix socket (to mount into the gateway)")
	var st syscall.Stat_t
	if err := syscall.Stat(socket, &st); err != nil {
		t.Fatalf("docker socket: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	name := "sgdeploy-" + randomHex(t, 4)
	if _, err := c.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge"}); err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() { _ = c.NetworkRemove(context.Background(), name) })
	t.Cleanup(func() { removeSandboxes(c, name) }) // the gateway's, after the gateway is gone

	redisID := runContainer(t, c, name+"-redis", &container.Config{
		Image:      sandboxImage,
		User:       "65534:65534",
		Entrypoint: []string{"/usr/bin/redis-server"},
		Cmd: []string{"--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no",
			"--save", "", "--appendonly", "no", "--dir", "/tmp"},
		ExposedPorts: nat.PortSet{"6379/tcp": {}},
	}, &container.HostConfig{
		NetworkMode:  container.NetworkMode(name),
		Mounts:       redisMounts(t),
		PortBindings: loopbackPort("6379/tcp"),
	}, &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{name: {Aliases: []string{"redis"}}}})

	// The data dir belongs to the gateway's user, as the README says to
	// prepare it; the sandboxes run as that user too.
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dataDir, gatewayUID, gatewayUID); err != nil {
		t.Fatal(err)
	}
	// As .env.example says to make one: only the key's SHA-256 is configured.
	const user = "deploy"
	key := randomHex(t, 32)
	sum := sha256.Sum256([]byte(key))
	gwID := runContainer(t, c, name+"-gateway", &container.Config{
		Image: gw,
		Env: []string{
			"SANDGATE_AUTH_API_KEYS=" + user + "=" + hex.EncodeToString(sum[:]) + ":threads",
			"SANDGATE_BACKEND=docker",
			"SANDGATE_REDIS_URL=redis://redis:6379/0",
			"SANDGATE_DATA_DIR=" + dataDir,
			"SANDGATE_DOCKER_NETWORK=" + name,
			"SANDGATE_IMAGE=" + sandboxImage,
			"SANDGATE_DOCKER_PULL_POLICY=never",
			"SANDGATE_CONTAINER_PREFIX=" + name,
			"SANDGATE_INSTANCE=" + name + "-gateway",
		},
		ExposedPorts: nat.PortSet{"8080/tcp": {}},
	}, &container.HostConfig{
		NetworkMode:  container.NetworkMode(name),
		PortBindings: loopbackPort("8080/tcp"),
		GroupAdd:     []string{strconv.FormatUint(uint64(st.Gid), 10)},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: socket, Target: "/var/run/docker.sock"},
			{Type: mount.TypeBind, Source: dataDir, Target: dataDir},
		},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": ""},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
	}, nil)

	base := publishedURL(t, c, gwID, "8080/tcp")
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{Proxy: nil}}
	waitOK(t, hc, base+"/readyz", time.Minute) // Redis and the engine answer; probes need no key
	ids := procIDs(t, c, gwID)
	if ids["Uid"][0] != strconv.Itoa(gatewayUID) || !slices.Contains(ids["Groups"], strconv.FormatUint(uint64(st.Gid), 10)) {
		t.Errorf("gateway process ids %v: want uid %d and the socket's group %d", ids, gatewayUID, st.Gid)
	}

	const thread = "deploy-check"
	sid := identity.SandboxID(user, thread)
	execCmd := `{"command": "echo hello from $(hostname) && echo uid=$(id -u) gid=$(id -g) && pwd && printf proof > /mnt/user-data/workspace/proof.txt"}`
	if status := post(t, hc, base+"/threads/"+thread+"/v1/shell/exec", "", execCmd).StatusCode; status != http.StatusUnauthorized {
		t.Errorf("exec without the key: status %d, want 401", status)
	}
	resp := post(t, hc, base+"/threads/"+thread+"/v1/shell/exec", key, execCmd)
	var exec struct {
		Success bool `json:"success"`
		Data    struct {
			Status   string `json:"status"`
			Output   string `json:"output"`
			ExitCode *int   `json:"exit_code"`
		} `json:"data"`
	}
	err := json.NewDecoder(resp.Body).Decode(&exec)
	if err != nil || resp.StatusCode != http.StatusOK || !exec.Success || exec.Data.ExitCode == nil || *exec.Data.ExitCode != 0 {
		t.Fatalf("exec through the gateway: %d %+v (%v)", resp.StatusCode, exec, err)
	}
	// Never the gateway's uid: one of the sandbox's own, in the gateway's
	// group (the gateway is not root, so it shares the thread dirs by group).
	sandboxUID := jail.SandboxHostID(sid)
	for _, want := range []string{"hello from", fmt.Sprintf("uid=%d gid=%d", sandboxUID, gatewayUID), backend.VirtualWorkspace} {
		if !strings.Contains(exec.Data.Output, want) {
			t.Errorf("exec output %q lacks %q", exec.Data.Output, want)
		}
	}

	// The sandbox wrote into the thread dir on the host, at the path the
	// gateway chose inside its own container.
	proof := filepath.Join(backend.ThreadDir(dataDir, user, thread), "workspace", "proof.txt")
	if b, err := os.ReadFile(proof); err != nil || string(b) != "proof" {
		t.Errorf("thread file on the host: %q, %v", b, err)
	}

	sandbox, err := c.ContainerInspect(ctx, name+"-"+sid)
	if err != nil {
		t.Fatalf("sandbox container: %v", err)
	}
	// No network at all: the gateway in its container reaches the server on
	// its socket in the shared data dir.
	if sandbox.HostConfig.NetworkMode != "none" {
		t.Errorf("sandbox network %q (networks %v), want none", sandbox.HostConfig.NetworkMode, slices.Sorted(maps.Keys(sandbox.NetworkSettings.Networks)))
	}
	if len(sandbox.HostConfig.PortBindings) != 0 {
		t.Errorf("sandbox publishes %v; nothing is published", sandbox.HostConfig.PortBindings)
	}
	if want := fmt.Sprintf("%d:%d", sandboxUID, gatewayUID); sandbox.Config.User != want {
		t.Errorf("sandbox user %q, want %s", sandbox.Config.User, want)
	}

	// The lease is in the real Redis, not in an embedded one.
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(publishedURL(t, c, redisID, "6379/tcp"), "http://")})
	defer rdb.Close()
	rec, err := rdb.HGetAll(ctx, statedb.NewKeys("", 0).Sandbox(sid)).Result()
	if err != nil || rec["state"] != "active" || rec["backend"] != "docker" {
		t.Errorf("lease record in Redis: %v, %v", rec, err)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/threads/"+thread+"/sandbox?destroy=true", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("destroy: status %d", resp.StatusCode)
	}
	if _, err := c.ContainerInspect(ctx, name+"-"+sid); !client.IsErrNotFound(err) {
		t.Errorf("sandbox container after destroy: %v, want not found", err)
	}
}

// post sends a JSON body, with key as the bearer credential unless it is "".
func post(t *testing.T, hc *http.Client, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// redisMounts bind-mounts this machine's redis-server and every library it
// links, read-only, at their host paths (the binary under its own name:
// Debian's is a symlink to redis-check-rdb, which chooses its mode by name).
func redisMounts(t *testing.T) []mount.Mount {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	testutil.Require(t, err == nil, "redis-server")
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := testutil.SharedLibs(real)
	if err != nil {
		t.Fatal(err)
	}
	mounts := []mount.Mount{{Type: mount.TypeBind, Source: real, Target: "/usr/bin/redis-server", ReadOnly: true}}
	for _, lib := range libs {
		src, err := filepath.EvalSymlinks(lib)
		if err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: lib, ReadOnly: true})
	}
	return mounts
}

// removeSandboxes removes the sandbox containers a test gateway made (its
// prefix and the managed-by label), whatever the test left.
func removeSandboxes(c *client.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue),
		filters.Arg("name", prefix+"-"),
	)})
	if err != nil {
		return
	}
	for _, ctr := range list {
		removeContainer(c, ctr.ID)
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
