package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// harness is one test's view of the real engine: a container prefix of its
// own, whose containers are all removed at cleanup.
type harness struct {
	t      *testing.T
	api    *client.Client
	image  string
	prefix string
	logs   *testutil.LogBuffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, image: testutil.SandboxImage(t), api: testutil.DockerClient(t),
		prefix: "sgt-" + randHex(4), logs: &testutil.LogBuffer{}}
	t.Cleanup(h.removeAll)
	return h
}

// backend returns a Docker backend on the harness's prefix and image.
func (h *harness) backend(mut ...func(*Config)) *Docker {
	h.t.Helper()
	cfg := Config{Image: h.image, ContainerPrefix: h.prefix, Instance: "test", PullPolicy: PullNever, ReadyTimeout: 30 * time.Second}
	for _, m := range mut {
		m(&cfg)
	}
	d, err := New(cfg, slog.New(slog.NewTextHandler(io.MultiWriter(h.t.Output(), h.logs), nil)))
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	h.t.Cleanup(func() { _ = d.Close() })
	return d
}

// containers lists every container (any state) of the harness's prefix.
func (h *harness) containers() []container.Summary {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := h.api.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue))})
	if err != nil {
		h.t.Fatalf("list containers: %v", err)
	}
	var out []container.Summary
	for _, c := range all {
		for _, n := range c.Names {
			if strings.HasPrefix(strings.TrimPrefix(n, "/"), h.prefix+"-") {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (h *harness) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range h.containers() {
		_ = h.api.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
}

func (h *harness) inspect(id string) container.InspectResponse {
	h.t.Helper()
	c, err := h.api.ContainerInspect(context.Background(), id)
	if err != nil {
		h.t.Fatalf("inspect %s: %v", id, err)
	}
	return c
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// threadSpec is a spec with the thread's real mounts under dataDir.
func threadSpec(t *testing.T, mc backend.MountConfig, user, thread string) backend.Spec {
	t.Helper()
	mounts, err := backend.ThreadMounts(mc, user, thread)
	if err != nil {
		t.Fatalf("ThreadMounts: %v", err)
	}
	return backend.Spec{SandboxID: identity.SandboxID(user, thread), User: user, Thread: thread, Mounts: mounts}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, d *Docker, spec backend.Spec) backend.Info {
	t.Helper()
	info, err := d.Create(testCtx(t), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return info
}

type execData struct {
	Status   string `json:"status"`
	Output   string `json:"output"`
	ExitCode *int   `json:"exit_code"`
}

// shell runs command through the sandbox's own API.
func shell(t *testing.T, url, command string) execData {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command})
	resp, err := http.Post(url+"/v1/shell/exec", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	defer resp.Body.Close()
	var env struct {
		Success bool     `json:"success"`
		Data    execData `json:"data"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(raw, &env) != nil || env.Data.ExitCode == nil {
		t.Fatalf("exec %q: %d %s", command, resp.StatusCode, raw)
	}
	return env.Data
}

func getStatus(url string) int {
	resp, err := http.Get(url + "/v1/sandbox")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
