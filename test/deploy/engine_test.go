package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"

	"github.com/sandgate/sandgate/internal/testutil"
)

// gwImageTag is the tag the tests give the gateway image; one fixed tag, so
// an interrupted run leaves no pile of images (the next run rebuilds it).
const gwImageTag = "sandgate-gateway:deploy-test"

// Build arguments the image must carry as labels.
const (
	testVersion  = "v0.0.0-deploy-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

var gwImage struct {
	once sync.Once
	tag  string
	err  error
}

func newDocker() (*client.Client, error) {
	return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
}

// gatewayImage builds the gateway image once per test process the way an
// operator without a registry does: deployments/gateway-image/build.sh.
func gatewayImage(t *testing.T) string {
	t.Helper()
	testutil.RequireDocker(t)
	gwImage.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		// Its own BINDIR: make build, which build.sh runs, would otherwise
		// leave the checkout's bin/gateway stamped with the test's version.
		bindir, err := os.MkdirTemp("", "sandgate-deploy-bin-")
		if err != nil {
			gwImage.err = err
			return
		}
		defer os.RemoveAll(bindir)
		cmd := exec.CommandContext(ctx, "bash", repoPath("deployments", "gateway-image", "build.sh"), gwImageTag)
		cmd.Env = append(os.Environ(), "VERSION="+testVersion, "REVISION="+testRevision,
			"LABELS="+testutil.TestImageLabel+"=true", "BINDIR="+bindir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			gwImage.err = fmt.Errorf("build.sh: %w\n%s", err, out)
			return
		}
		gwImage.tag = gwImageTag
	})
	if gwImage.err != nil {
		t.Fatal(gwImage.err)
	}
	return gwImage.tag
}

// runContainer creates and starts a container, removed (with its anonymous
// volumes) at cleanup; its log is printed when the test failed.
func runContainer(t *testing.T, c *client.Client, name string, cfg *container.Config,
	host *container.HostConfig, netCfg *network.NetworkingConfig) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.ContainerCreate(ctx, cfg, host, netCfg, nil, name)
	if err != nil {
		t.Fatalf("create container %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of container %s:\n%s", name, containerLog(c, resp.ID))
		}
		removeContainer(c, resp.ID)
	})
	if err := c.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start container %s: %v", name, err)
	}
	return resp.ID
}

func removeContainer(c *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// containerLog is the container's stdout and stderr, last 40 lines.
func containerLog(c *client.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "40"})
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		return "(log: " + err.Error() + ")"
	}
	return out.String()
}

// inspect is the engine's view of a container.
func inspect(t *testing.T, c *client.Client, id string) container.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return info
}

// publishedURL is http://127.0.0.1:{host port} of a container port
// published on loopback.
func publishedURL(t *testing.T, c *client.Client, id string, port nat.Port) string {
	t.Helper()
	info := inspect(t, c, id)
	for _, b := range info.NetworkSettings.Ports[port] {
		if b.HostIP == "127.0.0.1" && b.HostPort != "" {
			return "http://127.0.0.1:" + b.HostPort
		}
	}
	t.Fatalf("container %s: port %s not published on 127.0.0.1 (%v)", id, port, info.NetworkSettings.Ports)
	return ""
}

// loopbackPort publishes port on 127.0.0.1, on a port the engine picks.
func loopbackPort(port nat.Port) nat.PortMap {
	return nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: ""}}}
}

// waitOK polls url until it answers 200, or fails the test after timeout.
func waitOK(t *testing.T, hc *http.Client, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		resp, err := hc.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: no 200 after %v (last: %s)", url, timeout, last)
}

// procIDs reads a running container's main process credentials from the
// host's /proc (the image has no `id` to run inside): the Uid, Gid and
// Groups lines of /proc/PID/status.
func procIDs(t *testing.T, c *client.Client, id string) map[string][]string {
	t.Helper()
	info := inspect(t, c, id)
	if info.State == nil || info.State.Pid == 0 {
		t.Fatalf("container %s is not running:\n%s", id, containerLog(c, id))
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", info.State.Pid))
	if err != nil {
		t.Fatalf("process of container %s: %v", id, err)
	}
	defer f.Close()
	ids := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && (key == "Uid" || key == "Gid" || key == "Groups") {
			ids[key] = strings.Fields(value)
		}
	}
	return ids
}

// dockerSocket is the engine's unix socket path, for mounting into a
// gateway container; "" when the engine is not reached over a unix socket.
func dockerSocket(c *client.Client) string {
	host := c.DaemonHost()
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		return path
	}
	return ""
}
