package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate/internal/testutil"
)

// TestAutoWithKeysAndNoDockerRefusesToStart: with credentials configured
// (several users) `backend: auto` must not fall back to the unisolated
// process backend when the Docker engine does not answer; the refusal
// names both fixes. Without credentials the fallback stays, at WARN.
func TestAutoWithKeysAndNoDockerRefusesToStart(t *testing.T) {
	t.Parallel()
	noDocker := "DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "no-such-docker.sock")
	out := startFails(t, []string{noDocker}, "--backend", "auto", "--auth-api-keys", "alice="+sha("alice-key"))
	for _, want := range []string{"refusing to fall back to the unisolated process backend", "--backend process", "DOCKER_HOST"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, tail(out, 20))
		}
	}
	if strings.Contains(out, "alice-key") {
		t.Errorf("the refusal prints a credential:\n%s", out)
	}

	f := newFleet(t, "--backend", "auto", "--image", "some/aio-image:latest")
	f.env = []string{noDocker}
	g := f.start()
	if d := shell(t, g.URL, "local", "echo fallback"); strings.TrimSpace(d.Output) != "fallback" {
		t.Fatalf("no-auth auto fallback: %+v", d)
	}
	var warned bool
	for _, line := range strings.Split(g.logs.String(), "\n") {
		var rec struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" && strings.Contains(rec.Msg, "using process") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("the no-auth fallback to process is not a WARN:\n%s", tail(g.logs.String(), 20))
	}
}

// TestProcessBackendWithImageWarns: a config that asks for containers (an
// image, e.g. a DeerFlow config.yaml's sandbox.image) on the process backend
// starts, with a WARN naming the image and the fix.
func TestProcessBackendWithImageWarns(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "sandbox:\n  image: enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:latest\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newFleet(t, "--config", cfg).start()
	logs := g.logs.String()
	if !strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, "backend: docker") ||
		!strings.Contains(logs, "all-in-one-sandbox:latest") {
		t.Fatalf("no WARN naming the image and the fix:\n%s", tail(logs, 20))
	}
}

// TestDockerMissingImage: the docker backend with an image the engine does
// not have (and may not pull): /readyz is not ready and names the image, and
// a client whose sandbox cannot start gets a 502 naming it (no host path, no
// container made).
func TestDockerMissingImage(t *testing.T) {
	t.Parallel()
	api := testutil.DockerClient(t)
	prefix, image := "sge-"+randomHex(4), "sandgate-e2e-missing-"+randomHex(4)+":nope"
	g := newFleet(t, "--backend", "docker", "--image", image, "--container-prefix", prefix, "--docker-pull-policy", "never").start()

	code, body, _ := call(t, "GET", g.URL+"/readyz", nil)
	if code != 503 || !strings.Contains(string(body), image) {
		t.Errorf("/readyz with the image missing: %d %s, want 503 naming %s", code, body, image)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/t/v1/shell/exec", map[string]any{"command": "true"})
	if code != 502 || errorCode(t, body) != "sandbox_image_missing" || !strings.Contains(string(body), image) {
		t.Errorf("exec with the image missing: %d %s, want a 502 naming %s", code, body, image)
	}
	if strings.Contains(string(body), "/tmp") || strings.Contains(string(body), "/var") {
		t.Errorf("the 502 carries a host path: %s", body)
	}
	if !strings.Contains(g.logs.String(), "sandbox image missing") {
		t.Errorf("the start-up check did not log the missing image:\n%s", tail(g.logs.String(), 20))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	list, err := api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", prefix+"-"))})
	if err != nil || len(list) != 0 {
		t.Errorf("containers of %s: %d, %v", prefix, len(list), err)
	}
}
