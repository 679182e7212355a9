package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/testutil"
)

// composeCLIs are the Compose implementations present: v1's docker-compose
// (Debian's package) and v2's `docker compose` plugin.
func composeCLIs(t *testing.T) [][]string {
	t.Helper()
	var clis [][]string
	if _, err := exec.LookPath("docker-compose"); err == nil {
		clis = append(clis, []string{"docker-compose"})
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		clis = append(clis, []string{"docker", "compose"})
	}
	testutil.Require(t, len(clis) > 0, "docker-compose (Debian package docker-compose) or the docker compose plugin")
	return clis
}

// compose runs `CLI --env-file ENV -f compose.yaml ARGS...` in the
// repository and returns stdout, stderr and the error.
func compose(cli []string, envFile string, args ...string) ([]byte, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := append(slices.Clone(cli[1:]), "--env-file", envFile, "-f", repoPath("compose.yaml"))
	cmd := exec.CommandContext(ctx, cli[0], append(full, args...)...)
	cmd.Dir = testutil.ModuleRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

// composeFile is the part of `compose config` output the checks read.
type composeFile struct {
	Services map[string]struct {
		Image       string                 `yaml:"image"`
		Scale       int                    `yaml:"scale"`
		Deploy      struct{ Replicas int } `yaml:"deploy"`
		User        string                 `yaml:"user"`
		GroupAdd    []string               `yaml:"group_add"`
		Environment map[string]string      `yaml:"environment"`
		Ports       []yaml.Node            `yaml:"ports"`
		Profiles    []string               `yaml:"profiles"`
		Volumes     []yaml.Node            `yaml:"volumes"`
		ReadOnly    bool                   `yaml:"read_only"`
		CapDrop     []string               `yaml:"cap_drop"`
	} `yaml:"services"`
	Networks map[string]struct {
		Name string `yaml:"name"`
	} `yaml:"networks"`
}

// TestComposeConfig validates compose.yaml with .env.example through every
// Compose present, and checks the stack's shape: two gateway replicas on
// the docker backend, only nginx published, the sandbox network's name and
// the data dir's path the same on both sides.
func TestComposeConfig(t *testing.T) {
	t.Parallel()
	envFile := repoPath(".env.example")
	settings := knownSettings(t)
	for _, cli := range composeCLIs(t) {
		t.Run(strings.Join(cli, " "), func(t *testing.T) {
			if _, stderr, err := compose(cli, envFile, "config", "-q"); err != nil {
				t.Fatalf("config -q: %v\n%s", err, stderr)
			}
			out, stderr, err := compose(cli, envFile, "config")
			if err != nil {
				t.Fatalf("config: %v\n%s", err, stderr)
			}
			var cf composeFile
			if err := yaml.Unmarshal(out, &cf); err != nil {
				t.Fatalf("parse config output: %v\n%s", err, out)
			}
			checkCompose(t, cf, settings)

			// Profile services appear only with the profile.
			services, stderr, err := compose(cli, envFile, "--profile", "observability", "config", "--services")
			if err != nil {
				t.Fatalf("config --services: %v\n%s", err, stderr)
			}
			for _, s := range []string{"otel-collector", "jaeger", "gateway", "nginx", "redis"} {
				if !slices.Contains(strings.Fields(string(services)), s) {
					t.Errorf("observability profile lacks service %s: %s", s, services)
				}
			}

			// A required secret missing from .env is an error, not an
			// empty password or a gateway without keys.
			data, err := os.ReadFile(envFile)
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{"REDIS_PASSWORD", "SANDGATE_AUTH_API_KEYS"} {
				var kept []string
				for line := range strings.Lines(string(data)) {
					if !strings.HasPrefix(line, secret+"=") {
						kept = append(kept, line)
					}
				}
				without := filepath.Join(t.TempDir(), "env")
				if err := os.WriteFile(without, []byte(strings.Join(kept, "")), 0o600); err != nil {
					t.Fatal(err)
				}
				if _, stderr, err := compose(cli, without, "config", "-q"); err == nil || !strings.Contains(string(stderr), secret) {
					t.Errorf("config without %s: err %v, stderr %s", secret, err, stderr)
				}
			}
		})
	}
}

func checkCompose(t *testing.T, cf composeFile, settings map[string]bool) {
	t.Helper()
	gw, ok := cf.Services["gateway"]
	if !ok {
		t.Fatalf("no gateway service: %v", cf.Services)
	}
	if gw.Scale != 2 && gw.Deploy.Replicas != 2 {
		t.Errorf("gateway replicas: scale %d, deploy.replicas %d; want 2", gw.Scale, gw.Deploy.Replicas)
	}
	env := gw.Environment
	if env["SANDGATE_BACKEND"] != "docker" || !strings.HasPrefix(env["SANDGATE_REDIS_URL"], "redis://") {
		t.Errorf("gateway backend %q, redis %q", env["SANDGATE_BACKEND"], env["SANDGATE_REDIS_URL"])
	}
	for name := range env {
		if strings.HasPrefix(name, "SANDGATE_") && !settings[name] {
			t.Errorf("%s is not a gateway setting (gateway -h)", name)
		}
	}
	// Clients authenticate; the gateways are not told to listen without it.
	if _, insecure := env["SANDGATE_INSECURE"]; insecure || env["SANDGATE_AUTH_API_KEYS"] == "" {
		t.Errorf("gateway auth: SANDGATE_INSECURE set %v, SANDGATE_AUTH_API_KEYS %q", insecure, env["SANDGATE_AUTH_API_KEYS"])
	}
	if net := cf.Networks["sandboxes"].Name; net == "" || net != env["SANDGATE_DOCKER_NETWORK"] {
		t.Errorf("sandbox network named %q, gateway docker_network %q", net, env["SANDGATE_DOCKER_NETWORK"])
	}
	if gw.User != "65532:65532" || len(gw.GroupAdd) != 1 || !gw.ReadOnly || !slices.Equal(gw.CapDrop, []string{"ALL"}) {
		t.Errorf("gateway user %q, group_add %v, read_only %v, cap_drop %v", gw.User, gw.GroupAdd, gw.ReadOnly, gw.CapDrop)
	}
	mounts := map[string]string{}
	for _, v := range gw.Volumes {
		src, dst := volumeEnds(t, v)
		mounts[dst] = src
	}
	if mounts["/var/run/docker.sock"] == "" {
		t.Errorf("gateway does not mount the docker socket: %v", mounts)
	}
	if dir := env["SANDGATE_DATA_DIR"]; dir == "" || mounts[dir] != dir {
		t.Errorf("data dir %q mounted from %q: want the same path on host and in the container", dir, mounts[dir])
	}
	for name, s := range cf.Services {
		if len(s.Profiles) > 0 || name == "nginx" {
			continue
		}
		if len(s.Ports) > 0 {
			t.Errorf("service %s publishes ports; only nginx may", name)
		}
	}
	if len(cf.Services["nginx"].Ports) != 1 {
		t.Errorf("nginx publishes %d ports, want 1", len(cf.Services["nginx"].Ports))
	}
}

// volumeEnds reads a volume entry of `compose config` output: v1 prints
// "SRC:DST:MODE" strings, v2 {source, target} maps.
func volumeEnds(t *testing.T, n yaml.Node) (string, string) {
	t.Helper()
	if n.Kind == yaml.ScalarNode {
		parts := strings.Split(n.Value, ":")
		if len(parts) < 2 {
			t.Fatalf("volume %q", n.Value)
		}
		return parts[0], parts[1]
	}
	var v struct{ Source, Target string }
	if err := n.Decode(&v); err != nil {
		t.Fatalf("volume: %v", err)
	}
	return v.Source, v.Target
}
