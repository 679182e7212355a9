package config

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// loadWith loads args with env and, when yaml is set, a config file of it.
func loadWith(t *testing.T, args []string, env map[string]string, yaml string) (Config, []string, error) {
	t.Helper()
	all := maps.Clone(env)
	if all == nil {
		all = map[string]string{}
	}
	if yaml != "" {
		all[ConfigEnv] = writeYAML(t, yaml)
	}
	return Load(args, envOf(all), io.Discard)
}

func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandgate.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, warnings, err := Load(nil, envOf(nil), io.Discard)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("%v %v", err, warnings)
	}
	if c.Listen != "127.0.0.1:8080" || c.RedisURL != "" || c.DataDir != "./.sandgate" || c.Backend != "process" ||
		c.Pool.IdleTimeout != 10*time.Minute || c.Pool.MaxSandboxes != 3 || c.Pool.HardCap {
		t.Fatalf("defaults: %+v", c)
	}
	if c.Pool.Mounts.DataDir != c.DataDir {
		t.Fatal("pool data dir not derived")
	}
}

func TestPrecedenceFlagsOverEnvOverYAML(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, "listen: 127.0.0.1:7000\nidle_timeout: 5m\nmax_sandboxes: 7\nbackend: process\n")
	env := envOf(map[string]string{ConfigEnv: path, "SANDGATE_IDLE_TIMEOUT": "2m", "SANDGATE_LISTEN": "127.0.0.1:7001"})
	c, _, err := Load([]string{"--listen", "127.0.0.1:7002"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7002" || c.Pool.IdleTimeout != 2*time.Minute || c.Pool.MaxSandboxes != 7 {
		t.Fatalf("listen=%s idle=%s max=%d", c.Listen, c.Pool.IdleTimeout, c.Pool.MaxSandboxes)
	}
	// The same setting under all three names, nested YAML included.
	path = writeYAML(t, "pool:\n  x: 1\nredis:\n  url: redis://127.0.0.1:1/0\n")
	c, warnings, err := Load([]string{"--config", path}, envOf(nil), io.Discard)
	if err != nil || c.RedisURL != "redis://127.0.0.1:1/0" {
		t.Fatalf("nested yaml: %v %q", err, c.RedisURL)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "pool.x") {
		t.Fatalf("unknown key warning: %v", warnings)
	}
}

func TestDeerFlowSandboxKeys(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, `
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  idle_timeout: 600
  replicas: 5
  base_port: 18080
  mounts:
    - host_path: /data/shared
      container_path: /mnt/shared
      read_only: true
  environment:
    API_KEY: $MY_API_KEY
    NODE_ENV: production
    MIXED: pre-${MY_API_KEY}-post
`)
	c, warnings, err := Load([]string{"--config", path}, envOf(map[string]string{"MY_API_KEY": "s3cret"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pool.IdleTimeout != 10*time.Minute || c.Pool.MaxSandboxes != 5 {
		t.Fatalf("idle=%s max=%d", c.Pool.IdleTimeout, c.Pool.MaxSandboxes)
	}
	if len(c.Pool.Mounts.Extra) != 1 || c.Pool.Mounts.Extra[0].ContainerPath != "/mnt/shared" || !c.Pool.Mounts.Extra[0].ReadOnly {
		t.Fatalf("mounts: %+v", c.Pool.Mounts.Extra)
	}
	if c.Pool.Env["API_KEY"] != "s3cret" || c.Pool.Env["NODE_ENV"] != "production" || c.Pool.Env["MIXED"] != "pre-s3cret-post" {
		t.Fatalf("environment: %v", c.Pool.Env)
	}
	joined := strings.Join(warnings, "\n")
	if !strings.Contains(joined, "sandbox.use") || !strings.Contains(joined, "sandbox.base_port") {
		t.Fatalf("warnings: %v", warnings)
	}
	// DeerFlow's 0 means "never": idle expiry off, no cap.
	path = writeYAML(t, "sandbox:\n  idle_timeout: 0\n  replicas: 0\n")
	c, _, err = Load([]string{"--config", path}, envOf(nil), io.Discard)
	if err != nil || c.Pool.IdleTimeout >= 0 || c.Pool.MaxSandboxes >= 0 {
		t.Fatalf("zero values: idle=%s max=%d err=%v", c.Pool.IdleTimeout, c.Pool.MaxSandboxes, err)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args  []string
		env   map[string]string
		yaml  string
		field string
	}{
		{args: []string{"--listen", "nope"}, field: "listen"},
		{args: []string{"--backend", "lxc"}, field: "backend"},
		{args: []string{"--idle-timeout", "soon"}, field: "idle-timeout"},
		{args: []string{"--cap-mode", "medium"}, field: "cap-mode"},
		{args: []string{"--max-sandboxes", "-2"}, field: "max-sandboxes"},
		{args: []string{"--data-dir", ""}, field: "data_dir"},
		{args: []string{"--log-format", "xml"}, field: "log-format"},
		{args: []string{"--server-impl", "nginx"}, field: "server-impl"},
		{env: map[string]string{"SANDGATE_TRANSPORT_IMPL": "curl"}, field: "SANDGATE_TRANSPORT_IMPL"},
		{env: map[string]string{"SANDGATE_CREATE_TIMEOUT": "-5s"}, field: "SANDGATE_CREATE_TIMEOUT"},
		{env: map[string]string{"SANDGATE_INSECURE": "maybe"}, field: "SANDGATE_INSECURE"},
		{yaml: "touch_interval: 1m\nidle_timeout: 90s\n", field: "idle_timeout"},
		{yaml: "mounts:\n  - host_path: /x\n    container_path: /mnt/user-data/evil\n", field: "mounts[0]"},
		{yaml: "mounts:\n  - host_path: /x\n    container_path: relative\n", field: "mounts[0]"},
		{yaml: "listen: [1, 2]\n", field: "listen"},
		{yaml: "a: [unclosed", field: "config file"},
		{args: []string{"--backend", "kubernetes", "--kubernetes-url-mode", "ingress"}, field: "kubernetes_url_mode"},
		{args: []string{"--backend", "kubernetes", "--kubernetes-url-mode", "nodeport"}, field: "kubernetes_node_host"},
		{args: []string{"--backend", "kubernetes", "--container-prefix", "My_Prefix"}, field: "container_prefix"},
		{args: []string{"--kubernetes-tolerations", "k:Sometimes"}, field: "kubernetes-tolerations"},
		{args: []string{"--kubernetes-node-selector", "pool"}, field: "kubernetes-node-selector"},
		{args: []string{"--backend", "kubernetes", "--prewarm", "2", "--kubernetes-user-data-pvc", "data"}, field: "kubernetes_shared_data_dir"},
		{args: []string{"--backend", "remote"}, field: "provisioner_url"},
		{yaml: "sandbox:\n  provisioner_url: provisioner:8002\nbackend: remote\n", field: "provisioner_url"},
		{args: []string{"--auth-jwt-hs256-secret", "0123456789abcdef0123456789abcdef"}, field: "auth_jwt_audience"},
		{args: []string{"--auth-jwt-admin-claim", "role", "--auth-jwt-hs256-secret", "0123456789abcdef0123456789abcdef", "--auth-jwt-any-audience"}, field: "auth_jwt_admin_value"},
		{args: []string{"--allowed-hosts", "http://gateway.internal"}, field: "allowed_hosts"},
		{args: []string{"--allowed-hosts", "gateway.internal:8080"}, field: "allowed_hosts"},
		{args: []string{"--metrics-token", "short"}, field: "metrics_token"},
		{args: []string{"--preview-suffix", "bad_name!"}, field: "preview_suffix"},
		{args: []string{"--sandbox-origin", "ftp://sandbox.example"}, field: "sandbox_origin"},
		{args: []string{"--sandbox-origin", "https://sandbox.example/apps"}, field: "sandbox_origin"},
		{args: []string{"--preview-max-ttl", "-1h"}, field: "preview-max-ttl"},
		{args: []string{"--process-isolation", "chroot"}, field: "process-isolation"},
		{args: []string{"--process-isolation", "none", "--auth-jwt-hs256-secret", "0123456789abcdef0123456789abcdef", "--auth-jwt-any-audience"}, field: "process_isolation"},
		{args: []string{"--process-memory", "lots"}, field: "process-memory"},
		{args: []string{"--process-isolation", "none", "--process-image", "/srv/image.tar"}, field: "process_image"},
		{yaml: "process:\n  isolation: none\n  image: /srv/image.tar\n", field: "process_image"},
		{yaml: "process:\n  image_gc_grace: 5m\n", field: "process_image_gc_grace"},
	}
	for _, c := range cases {
		env := map[string]string{}
		for k, v := range c.env {
			env[k] = v
		}
		if c.yaml != "" {
			env[ConfigEnv] = writeYAML(t, c.yaml)
		}
		_, _, err := Load(c.args, envOf(env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v %v %q: error %v does not name %s", c.args, c.env, c.yaml, err, c.field)
		}
	}
}

func TestKubernetesAndRemoteSettings(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, `
backend: kubernetes
image: registry.example.com/sandgate-sandbox:1.2
container_prefix: sbx
port: 9000
instance: gw-a
kubernetes:
  kubeconfig: /etc/sandgate/kubeconfig
  namespace: sandboxes
  url_mode: nodeport
  node_host: 10.0.0.5
  cpu_limit: "2"
  memory_limit: 4Gi
  runtime_class: gvisor
  node_selector: {pool: sandbox, zone: a}
  tolerations: ["dedicated=sandbox:NoSchedule", "spot"]
  image_pull_secrets: [regcred]
  active_deadline: 24h
  run_as_non_root: true
  user_data_pvc: sandgate-data
  skills_host_path: /srv/skills
sandbox:
  provisioner_url: http://provisioner:8002
  provisioner_api_key: key-1
`)
	c, warnings, err := Load([]string{"--config", path, "--kubernetes-cpu-request", "500m"}, envOf(nil), io.Discard)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Load: %v %v", err, warnings)
	}
	k := c.KubernetesConfig()
	if k.Image != "registry.example.com/sandgate-sandbox:1.2" || k.PodPrefix != "sbx" || k.Port != 9000 || k.Instance != "gw-a" ||
		k.Kubeconfig != "/etc/sandgate/kubeconfig" || k.Namespace != "sandboxes" || k.URLMode != "nodeport" || k.NodeHost != "10.0.0.5" ||
		k.CPURequest != "500m" || k.CPULimit != "2" || k.MemoryRequest != "256Mi" || k.MemoryLimit != "4Gi" ||
		k.RuntimeClass != "gvisor" || k.ActiveDeadline != 24*time.Hour || !k.RunAsNonRoot ||
		k.UserDataPVC != "sandgate-data" || k.SkillsHostPath != "/srv/skills" || k.ClusterDomain != "cluster.local" {
		t.Errorf("kubernetes config = %+v", k)
	}
	if len(k.NodeSelector) != 2 || k.NodeSelector["pool"] != "sandbox" || k.NodeSelector["zone"] != "a" {
		t.Errorf("node selector = %v", k.NodeSelector)
	}
	if len(k.Tolerations) != 2 || k.Tolerations[0].Key != "dedicated" || k.Tolerations[0].Value != "sandbox" ||
		k.Tolerations[0].Effect != "NoSchedule" || k.Tolerations[1].Operator != "Exists" {
		t.Errorf("tolerations = %+v", k.Tolerations)
	}
	if len(k.ImagePullSecrets) != 1 || k.ImagePullSecrets[0] != "regcred" {
		t.Errorf("pull secrets = %v", k.ImagePullSecrets)
	}
	if c.Remote.URL != "http://provisioner:8002" || c.Remote.APIKey != "key-1" {
		t.Errorf("remote = %+v (DeerFlow's provisioner keys)", c.Remote)
	}
	// Env, flat names.
	c, _, err = Load(nil, envOf(map[string]string{
		"SANDGATE_BACKEND": "remote", "SANDGATE_PROVISIONER_URL": "https://p.example.com",
		"SANDGATE_KUBERNETES_NODE_SELECTOR": "a=b", "SANDGATE_KUBERNETES_TOLERATIONS": "*",
	}), io.Discard)
	if err != nil || c.Remote.URL != "https://p.example.com" || c.Kubernetes.NodeSelector["a"] != "b" ||
		len(c.Kubernetes.Tolerations) != 1 || c.Kubernetes.Tolerations[0].Key != "" {
		t.Errorf("env: %v %+v %+v", err, c.Remote, c.Kubernetes)
	}
	// Another backend is not held to the kubernetes rules.
	if _, _, err := Load([]string{"--backend", "docker", "--container-prefix", "My_Prefix"}, envOf(nil), io.Discard); err != nil {
		t.Errorf("docker with a prefix Kubernetes would refuse: %v", err)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	_, _, err := Load([]string{"-h"}, envOf(nil), &out)
	if !IsHelp(err) || !strings.Contains(out.String(), "SANDGATE_IDLE_TIMEOUT") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]bool{
		"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, ":8080": false, "10.0.0.1:1": false,
	} {
		if got := (Config{Listen: listen}).Loopback(); got != want {
			t.Errorf("%s: %v", listen, got)
		}
	}
}

func FuzzLoadYAML(f *testing.F) {
	f.Add("sandbox:\n  idle_timeout: 600\n  replicas: 3\n")
	f.Add("listen: 127.0.0.1:1\npool: {a: 1}\nmounts: [{host_path: /a, container_path: /b}]\n")
	f.Add("environment: {A: $B}\nlabels: {x: y}\n")
	f.Fuzz(func(t *testing.T, body string) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, _, err := Load([]string{"--config", path}, envOf(nil), io.Discard)
		if err == nil {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("Load accepted a config Validate rejects: %v", verr)
			}
			if c.Pool.IdleTimeout == 0 || c.Pool.MaxSandboxes == 0 {
				t.Fatalf("a zero that means default leaked out of the loader: %+v", c.Pool)
			}
		}
	})
}

// An image given anywhere (flag, variable, YAML, DeerFlow's sandbox.image)
// asks for containers, even with the default's value; none does not.
func TestImageRequested(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  map[string]string
		yaml string
		want bool
	}{
		{want: false},
		{args: []string{"--image", "x:1"}, want: true},
		{args: []string{"--image", "sandgate-sandbox:latest"}, want: true},
		{env: map[string]string{"SANDGATE_IMAGE": "x:1"}, want: true},
		{yaml: "sandbox:\n  image: aio:latest\n", want: true},
		{yaml: "docker:\n  image: aio:latest\n", want: true},
		{yaml: "idle_timeout: 1m\n", want: false},
	} {
		env := map[string]string{}
		for k, v := range c.env {
			env[k] = v
		}
		if c.yaml != "" {
			env[ConfigEnv] = writeYAML(t, c.yaml)
		}
		cfg, _, err := Load(c.args, envOf(env), io.Discard)
		if err != nil || cfg.ImageRequested() != c.want {
			t.Errorf("%v %v %q: ImageRequested = %v (%v), want %v", c.args, c.env, c.yaml, cfg.ImageRequested(), err, c.want)
		}
	}
	cfg, _, err := Load([]string{"--allowed-hosts", "gateway.internal, [fd00::1],*", "--metrics-token", "0123456789abcdef"}, envOf(nil), io.Discard)
	if err != nil || len(cfg.AllowedHosts) != 3 || cfg.AllowedHosts[1] != "[fd00::1]" || cfg.MetricsToken != "0123456789abcdef" {
		t.Errorf("allowed_hosts/metrics_token: %+v %q %v", cfg.AllowedHosts, cfg.MetricsToken, err)
	}
}
