package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/sandgate/sandgate/internal/testutil"
)

// finalStage is a Dockerfile's last stage: from its FROM line to the end.
func finalStage(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	from := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			from = i
		}
	}
	if from < 0 {
		t.Fatalf("%s has no FROM", path)
	}
	return strings.Join(lines[from:], "\n")
}

// The root Dockerfile cannot be built here (its debian stage needs a
// registry); the host-binary path builds the same final stage, word for word.
func TestDockerfileFinalStagesMatch(t *testing.T) {
	t.Parallel()
	root := finalStage(t, repoPath("Dockerfile"))
	prebuilt := finalStage(t, repoPath("deployments", "gateway-image", "Dockerfile.prebuilt"))
	if root != prebuilt {
		t.Errorf("final stages differ:\n--- Dockerfile\n%s\n--- Dockerfile.prebuilt\n%s", root, prebuilt)
	}
	for _, want := range []string{"FROM scratch", "USER 65532:65532", "EXPOSE 8080", `ENTRYPOINT ["/gateway"]`} {
		if !strings.Contains(root, want) {
			t.Errorf("final stage lacks %q", want)
		}
	}
	if strings.Contains(root, "HEALTHCHECK") {
		t.Error("final stage has a HEALTHCHECK; probes use /healthz and /readyz")
	}
	// Both builds copy make build's binary (TestOneWayToTheBinary) and
	// the same CA bundle path.
	for _, f := range []string{repoPath("Dockerfile"), repoPath("deployments", "gateway-image", "build.sh")} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "ca-certificates.crt") {
			t.Errorf("%s lacks the CA bundle", f)
		}
	}
}

// TestGatewayImage runs the built image: configuration as documented, a
// non-root process, /healthz answering, a writable data dir, the CA bundle,
// and a refusal to listen unauthenticated unless told.
func TestGatewayImage(t *testing.T) {
	t.Parallel()
	tag := gatewayImage(t)
	c := testutil.DockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	img, err := c.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg := img.Config
	if cfg.User != "65532:65532" {
		t.Errorf("image User = %q, want 65532:65532 (numeric, so runAsNonRoot can check it)", cfg.User)
	}
	if _, ok := cfg.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("image exposes %v, want 8080/tcp", cfg.ExposedPorts)
	}
	if cfg.Healthcheck != nil {
		t.Errorf("image has a healthcheck %+v", cfg.Healthcheck)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/gateway"}) {
		t.Errorf("entrypoint %v", cfg.Entrypoint)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
	} {
		if got := cfg.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q (from the build args)", k, got, want)
		}
	}

	// The classic builder's leftover context stage is gone.
	left, err := c.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", "io.sandgate.gateway-image.stage=context"))})
	if err != nil || len(left) != 0 {
		t.Errorf("build.sh left %d context-stage images (%v)", len(left), err)
	}

	// The gateway stops at once, saying why, rather than listen unprotected.
	for _, tc := range []struct{ name, env, why string }{
		{"refuses an unauthenticated listener by default", "", "refusing a non-loopback address without authentication"},
		{"refuses the .env.example key placeholder", exampleEnv(t, "SANDGATE_AUTH_API_KEYS"), "sha256"},
		// The engine's default seccomp profile refuses new user namespaces:
		// the isolated process backend cannot run in the image, and says so.
		{"refuses an unisolatable process backend", "SANDGATE_INSECURE=true", "process_isolation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &container.Config{Image: tag}
			if tc.env != "" {
				cfg.Env = []string{tc.env}
			}
			id := runContainer(t, c, "", cfg, &container.HostConfig{}, nil)
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			statusCh, errCh := c.ContainerWait(waitCtx, id, container.WaitConditionNotRunning)
			select {
			case st := <-statusCh:
				if st.StatusCode == 0 {
					t.Errorf("exit code 0, want a failure")
				}
			case err := <-errCh:
				t.Fatalf("wait: %v", err)
			}
			if log := containerLog(c, id); !strings.Contains(log, tc.why) {
				t.Errorf("log does not say %q:\n%s", tc.why, log)
			}
		})
	}

	t.Run("serves as non-root", func(t *testing.T) {
		// The plain process backend, on purpose: the check is the image's
		// user and data dir, not a backend.
		id := runContainer(t, c, "", &container.Config{
			Image: tag, Env: []string{"SANDGATE_INSECURE=true", "SANDGATE_PROCESS_ISOLATION=none"},
			ExposedPorts: nat.PortSet{"8080/tcp": {}},
		}, &container.HostConfig{PortBindings: loopbackPort("8080/tcp")}, nil)
		base := publishedURL(t, c, id, "8080/tcp")
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
		waitOK(t, hc, base+"/healthz", 30*time.Second)

		ids := procIDs(t, c, id)
		for _, key := range []string{"Uid", "Gid"} {
			if len(ids[key]) != 4 || slices.ContainsFunc(ids[key], func(s string) bool { return s != "65532" }) {
				t.Errorf("process %s = %v, want 65532 (real, effective, saved, fs)", key, ids[key])
			}
		}

		// The embedded process backend writes thread data under /data:
		// the image's data dir belongs to the non-root user.
		resp, err := hc.Post(base+"/threads/image-check/v1/file/write", "application/json",
			strings.NewReader(`{"file":"/mnt/user-data/workspace/a.txt","content":"written by uid 65532"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Success bool   `json:"success"`
			Message string `json:"message"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !out.Success {
			t.Fatalf("file write through the gateway: %d %+v", resp.StatusCode, out)
		}
		if got := readFromContainer(t, c, id, "/data/users/default/threads/image-check/user-data/workspace/a.txt"); got != "written by uid 65532" {
			t.Errorf("file in the data dir = %q", got)
		}
		if ca := readFromContainer(t, c, id, "/etc/ssl/certs/ca-certificates.crt"); !strings.Contains(ca, "BEGIN CERTIFICATE") {
			t.Errorf("CA bundle missing or empty (%d bytes)", len(ca))
		}
	})
}

// exampleEnv is the KEY=VALUE line of .env.example that sets key.
func exampleEnv(t *testing.T, key string) string {
	t.Helper()
	data, err := os.ReadFile(repoPath(".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, key+"=") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf(".env.example does not set %s", key)
	return ""
}

// readFromContainer copies one file out of a container.
func readFromContainer(t *testing.T, c *client.Client, id, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, _, err := c.CopyFromContainer(ctx, id, path)
	if err != nil {
		t.Fatalf("copy %s out of the container: %v", path, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatalf("copy %s: %v", path, err)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, tr); err != nil {
		t.Fatalf("copy %s: %v", path, err)
	}
	return buf.String()
}
