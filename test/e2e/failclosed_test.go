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

// TestAutoWithKeysAndNoDockerFallsBackOnlyIsolated: with credentials
// configured (several users) `backend: auto` falls back to the process
// backend when the Docker engine does not answer only with its sandboxes
// isolated (the default): it starts and serves an isolated sandbox. With
// process_isolation: none it refuses to start, naming both fixes. Without
// credentials the fallback stays, at WARN.
func TestAutoWithKeysAndNoDockerFallsBackOnlyIsolated(t *testing.T) {
	t.Parallel()
	noDocker := "DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "no-such-docker.sock")
	keys := "alice=" + sha("alice-key")
	out := startFails(t, []string{noDocker}, "--backend", "auto", "--auth-api-keys", keys, "--process-isolation", "none")
	for _, want := range []string{"refusing to fall back to the process backend with process_isolation: none", "DOCKER_HOST",
		"process_isolation: namespaces"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, tail(out, 20))
		}
	}
	if strings.Contains(out, "alice-key") {
		t.Errorf("the refusal prints a credential:\n%s", out)
	}

	isolated := newFleet(t, "--backend", "auto", "--auth-api-keys", keys)
	isolated.env = []string{noDocker}
	ig := isolated.start()
	code, body, _ := call(t, "POST", ig.URL+"/threads/keyed/v1/shell/exec", map[string]any{"command": "id -u"}, bearer("alice-key")...)
	var env envelope
	var d execData
	if code != 200 || json.Unmarshal(body, &env) != nil || json.Unmarshal(env.Data, &d) != nil {
		t.Fatalf("exec on the keyed auto fallback: %d %s", code, body)
	}
	if uid := strings.TrimSpace(d.Output); uid != "1000" { // the jail's sandbox user, not the gateway's root
		t.Errorf("the keyed auto fallback runs commands as uid %q, want the isolated sandbox's 1000", uid)
	}
	if logs := ig.logs.String(); !strings.Contains(logs, "process isolation: namespaces") {
		t.Errorf("the keyed auto fallback did not isolate:\n%s", tail(logs, 20))
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
