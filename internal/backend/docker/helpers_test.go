package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate/internal/backend"
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
	cfg := Config{Image: h.image, ContainerPrefix: h.prefix, Instance: "test", PullPolicy: PullNever, ReadyTimeout: 30 * time.Second,
		SocketDir: h.t.TempDir()}
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
