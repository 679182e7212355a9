package docker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// specFor builds a container spec without an engine.
func specFor(t *testing.T, cfg Config, spec backend.Spec, serverPath string) (containerSpec, string) {
	t.Helper()
	var logs bytes.Buffer
	d := newWithEngine(cfg, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	return d.containerSpec(spec, serverPath), logs.String()
}

func TestContainerSpec(t *testing.T) {
	t.Parallel()
	// A root gateway (these tests' case) runs each sandbox as its own id:id.
	own := jail.SandboxHostID("0123456789abcdef")
	me := strconv.Itoa(own) + ":" + strconv.Itoa(own)
	if os.Geteuid() != 0 {
		me = strconv.Itoa(own) + ":" + strconv.Itoa(os.Getegid())
	}
	spec := backend.Spec{
		SandboxID: "0123456789abcdef", User: "alice", Thread: "t1",
		Mounts: []backend.Mount{
			{HostPath: "/data/ws", ContainerPath: backend.VirtualWorkspace},
			{HostPath: "/skills", ContainerPath: backend.VirtualSkills, ReadOnly: true},
		},
		Env:    map[string]string{"Z_VAR": "z", "API_KEY": "k"},
		Labels: map[string]string{"team": "x", backend.LabelUser: "mallory"},
	}
	base := Config{Image: "img:1", ContainerPrefix: "sbx", Instance: "gw-1", SocketDir: "/sock"}
	cases := []struct {
		name   string
		cfg    func(*Config)
		server string
		check  func(t *testing.T, cs containerSpec, logs string)
	}{
		{name: "safe defaults with our server", server: "/gateway", check: func(t *testing.T, cs containerSpec, logs string) {
			c, h := cs.Config, cs.Host
			if cs.Name != "sbx-0123456789abcdef" || c.Image != "img:1" || c.User != me {
				t.Errorf("name %q image %q user %q (want user %s)", cs.Name, c.Image, c.User, me)
			}
			sock := c.Labels[labelAPISocket]
			if !regexp.MustCompile(`^api-[0-9a-f]{8}\.sock$`).MatchString(sock) {
				t.Errorf("incarnation socket %q, want api-{8 hex}.sock", sock)
			}
			wantCmd := []string{"sandbox", "--listen", "unix:/run/sandgate/api/" + sock, "--home", backend.VirtualWorkspace}
			if os.Geteuid() != 0 {
				wantCmd = append(wantCmd, "--umask", "007")
			}
			if !slices.Equal(c.Entrypoint, []string{"/gateway"}) || !slices.Equal(c.Cmd, wantCmd) {
				t.Errorf("command %q %q", c.Entrypoint, c.Cmd)
			}
			wantEnv := []string{"API_KEY=k", "Z_VAR=z", "HOME=" + backend.VirtualWorkspace, sandboxspec.KeepEnvVar + "=API_KEY,Z_VAR"}
			if !slices.Equal(c.Env, wantEnv) {
				t.Errorf("env %q, want %q", c.Env, wantEnv)
			}
			if !slices.Equal(h.CapDrop, []string{"ALL"}) || len(h.CapAdd) != 0 {
				t.Errorf("caps drop %q add %q", h.CapDrop, h.CapAdd)
			}
			if !slices.Equal(h.SecurityOpt, []string{"no-new-privileges:true"}) {
				t.Errorf("security opts %q", h.SecurityOpt)
			}
			if h.Memory != DefaultMemory || h.NanoCPUs != DefaultNanoCPUs || h.PidsLimit == nil || *h.PidsLimit != DefaultPidsLimit {
				t.Errorf("limits memory %d cpus %d pids %v", h.Memory, h.NanoCPUs, h.PidsLimit)
			}
			if h.StorageOpt != nil {
				t.Errorf("storage opts %v, want none by default", h.StorageOpt)
			}
			if h.Init == nil || !*h.Init || h.RestartPolicy.Name != container.RestartPolicyDisabled {
				t.Errorf("init %v restart %q", h.Init, h.RestartPolicy.Name)
			}
			// No network at all: the API is a Unix socket in the socket dir.
			if len(h.PortBindings) != 0 || len(c.ExposedPorts) != 0 || h.NetworkMode != "none" || cs.Network != nil {
				t.Errorf("network %q %+v, ports %+v %+v", h.NetworkMode, cs.Network, h.PortBindings, c.ExposedPorts)
			}
			if c.Labels[labelAPI] != apiUnix || c.Labels[labelEgress] != `{"mode":""}` {
				t.Errorf("labels %v", c.Labels)
			}
			want := []mount.Mount{
				{Type: mount.TypeBind, Source: "/data/ws", Target: backend.VirtualWorkspace},
				{Type: mount.TypeBind, Source: "/skills", Target: backend.VirtualSkills, ReadOnly: true},
				// The server's socket dir read-write, the egress one read-only:
				// nothing the container writes is a parent of a gateway path.
				{Type: mount.TypeBind, Source: "/sock/0123456789abcdef/api", Target: "/run/sandgate/api"},
				{Type: mount.TypeBind, Source: "/sock/0123456789abcdef/egress", Target: backend.EgressDir, ReadOnly: true},
			}
			if !slices.Equal(h.Mounts, want) {
				t.Errorf("mounts %+v", h.Mounts)
			}
			for k, v := range map[string]string{
				backend.LabelManagedBy: backend.ManagedByValue, backend.LabelSandboxID: spec.SandboxID,
				backend.LabelUser: "alice", backend.LabelThread: "t1", backend.LabelInstance: "gw-1", "team": "x",
			} {
				if c.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
				}
			}
			if strings.Contains(logs, "seccomp") {
				t.Errorf("unexpected seccomp warning: %s", logs)
			}
		}},
		{name: "configured limits, caps, user, port", cfg: func(c *Config) {
			c.Memory, c.NanoCPUs, c.PidsLimit = 256<<20, 5e8, 64
			c.CapAdd, c.User, c.Port = []string{"CHOWN", "SETUID"}, "1000:1000", 9000
		}, check: func(t *testing.T, cs containerSpec, _ string) {
			h := cs.Host
			if h.Memory != 256<<20 || h.NanoCPUs != 5e8 || *h.PidsLimit != 64 {
				t.Errorf("limits %d %d %d", h.Memory, h.NanoCPUs, *h.PidsLimit)
			}
			if !slices.Equal(h.CapAdd, []string{"CHOWN", "SETUID"}) || cs.Config.User != "1000:1000" {
				t.Errorf("cap add %q user %q", h.CapAdd, cs.Config.User)
			}
			if _, ok := h.PortBindings["9000/tcp"]; !ok || cs.Config.Cmd != nil {
				t.Errorf("port 9000: bindings %+v cmd %q", h.PortBindings, cs.Config.Cmd)
			}
		}},
		{name: "disk limit", cfg: func(c *Config) { c.DiskLimit = 10 << 30 }, check: func(t *testing.T, cs containerSpec, _ string) {
			if !maps.Equal(cs.Host.StorageOpt, map[string]string{"size": "10737418240"}) {
				t.Errorf("storage opts %v", cs.Host.StorageOpt)
			}
		}},
		{name: "no limits", cfg: func(c *Config) { c.Memory, c.NanoCPUs, c.PidsLimit = -1, -1, -1 }, check: func(t *testing.T, cs containerSpec, _ string) {
			if r := cs.Host.Resources; r.Memory != 0 || r.NanoCPUs != 0 || r.PidsLimit != nil {
				t.Errorf("resources %+v, want none", r)
			}
		}},
		{name: "seccomp unconfined is opt-in and warned", cfg: func(c *Config) { c.SeccompUnconfined = true }, check: func(t *testing.T, cs containerSpec, logs string) {
			if !slices.Contains(cs.Host.SecurityOpt, "seccomp=unconfined") || !slices.Contains(cs.Host.SecurityOpt, "no-new-privileges:true") {
				t.Errorf("security opts %q", cs.Host.SecurityOpt)
			}
			if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "seccomp=unconfined") {
				t.Errorf("no warning logged: %s", logs)
			}
		}},
		{name: "gateway in a container: network, nothing published", cfg: func(c *Config) { c.Network = "sandnet" }, check: func(t *testing.T, cs containerSpec, _ string) {
			if cs.Host.NetworkMode != "sandnet" || len(cs.Host.PortBindings) != 0 {
				t.Errorf("network %q bindings %+v", cs.Host.NetworkMode, cs.Host.PortBindings)
			}
			if _, ok := cs.Network.EndpointsConfig["sandnet"]; !ok {
				t.Errorf("endpoints %+v", cs.Network)
			}
		}},
		{name: "image with its own server, image user", cfg: func(c *Config) { c.User = UserImage }, check: func(t *testing.T, cs containerSpec, _ string) {
			c := cs.Config
			if c.Entrypoint != nil || c.Cmd != nil || c.WorkingDir != "" || c.User != "" {
				t.Errorf("own server: entrypoint %q cmd %q dir %q user %q", c.Entrypoint, c.Cmd, c.WorkingDir, c.User)
			}
			if !slices.Equal(c.Env, []string{"API_KEY=k", "Z_VAR=z"}) {
				t.Errorf("env %q", c.Env)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := base
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			cs, logs := specFor(t, cfg, spec, tc.server)
			tc.check(t, cs, logs)
		})
	}
}

// TestCreateErrNamesDiskLimit: an engine whose storage driver takes no
// size fails the create with an error naming docker_disk_limit.
func TestCreateErrNamesDiskLimit(t *testing.T) {
	t.Parallel()
	refused := errors.New("Error response from daemon: --storage-opt is not supported")
	cases := []struct {
		limit int64
		err   error
		named bool
	}{
		{10 << 30, refused, true},
		{10 << 30, errors.New("Error response from daemon: --storage-opt is supported only for overlay over xfs with 'pquota' mount option"), true},
		{10 << 30, errors.New("Error response from daemon: no such image"), false},
		{0, refused, false},
	}
	for _, c := range cases {
		d := newWithEngine(Config{Image: "i", ContainerPrefix: "p", DiskLimit: c.limit}, nil, slog.New(slog.DiscardHandler))
		err := d.createErr("0123456789abcdef", c.err)
		if strings.Contains(err.Error(), "docker_disk_limit") != c.named || !errors.Is(err, c.err) {
			t.Errorf("limit %d, %v: %v (want docker_disk_limit named: %v)", c.limit, c.err, err, c.named)
		}
	}
}

func TestSandboxURL(t *testing.T) {
	t.Parallel()
	d := newWithEngine(Config{Image: "i", ContainerPrefix: "p"}, nil, slog.New(slog.DiscardHandler))
	cases := []struct {
		ports nat.PortMap
		want  string
	}{
		{nat.PortMap{"8080/tcp": {{HostIP: "127.0.0.1", HostPort: "49153"}}}, "http://127.0.0.1:49153"},
		{nat.PortMap{"8080/tcp": {{HostIP: "0.0.0.0", HostPort: "1"}, {HostIP: "127.0.0.1", HostPort: "2"}}}, "http://127.0.0.1:2"},
		{nat.PortMap{"8080/tcp": {{HostIP: "0.0.0.0", HostPort: "1"}}}, ""}, // never used: not loopback
		{nat.PortMap{"9000/tcp": {{HostIP: "127.0.0.1", HostPort: "1"}}}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		got, err := d.sandboxURL("p-x", nil, nil, c.ports)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("%v: %q %v, want %q", c.ports, got, err, c.want)
		}
	}
	d.cfg.Network = "net"
	if got, err := d.sandboxURL("p-x", nil, nil, nil); got != "http://p-x:8080" || err != nil {
		t.Errorf("network URL %q %v", got, err)
	}
	// Our own server answers on its socket, whatever the network.
	unix := map[string]string{labelAPI: apiUnix, backend.LabelSandboxID: "0123456789abcdef"}
	mounts := []container.MountPoint{{Destination: backend.VirtualWorkspace, Source: "/w"}, {Destination: "/run/sandgate", Source: "/elsewhere/0123456789abcdef"}}
	if got, err := d.sandboxURL("p-x", unix, mounts, nil); got != "unix:///elsewhere/0123456789abcdef/api.sock" || err != nil {
		t.Errorf("socket URL of a container without its socket's name %q %v", got, err)
	}
	unix[labelAPISocket] = "api-0a1b2c3d.sock"
	if got, err := d.sandboxURL("p-x", unix, mounts, nil); got != "unix:///elsewhere/0123456789abcdef/api-0a1b2c3d.sock" || err != nil {
		t.Errorf("socket URL %q %v", got, err)
	}
	unix[labelAPISocket] = "../../elsewhere.sock"
	if got, _ := d.sandboxURL("p-x", unix, mounts, nil); got != "unix:///elsewhere/0123456789abcdef/api.sock" {
		t.Errorf("a socket name with a path escaped the socket dir: %q", got)
	}
	if got, err := d.sandboxURL("p-x", unix, mounts[:1], nil); err == nil {
		t.Errorf("socket URL without its mount: %q", got)
	}
	// This layout: the server's own dir api/, bound apart from egress/.
	unix[labelAPISocket] = "api-0a1b2c3d.sock"
	current := []container.MountPoint{mounts[0], {Destination: backend.EgressDir, Source: "/elsewhere/0123456789abcdef/egress"},
		{Destination: apiMount, Source: "/elsewhere/0123456789abcdef/api"}}
	if got, err := d.sandboxURL("p-x", unix, current, nil); got != "unix:///elsewhere/0123456789abcdef/api/api-0a1b2c3d.sock" || err != nil {
		t.Errorf("socket URL in api/ %q %v", got, err)
	}
	ports := summaryPorts([]container.Port{{IP: "127.0.0.1", PrivatePort: 8080, PublicPort: 40000, Type: "tcp"}, {PrivatePort: 22, Type: "tcp"}})
	d.cfg.Network = ""
	if got, _ := d.sandboxURL("p-x", nil, nil, ports); got != "http://127.0.0.1:40000" {
		t.Errorf("from list ports: %q (%v)", got, ports)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Image: "i", ContainerPrefix: "sandgate-sandbox"}
	cases := []struct {
		mut   func(*Config)
		field string
	}{
		{func(c *Config) { c.Image = "" }, "image"},
		{func(c *Config) { c.ContainerPrefix = "" }, "container_prefix"},
		{func(c *Config) { c.ContainerPrefix = "-x" }, "container_prefix"},
		{func(c *Config) { c.ContainerPrefix = "a/b" }, "container_prefix"},
		{func(c *Config) { c.Port = 70000 }, "port"},
		{func(c *Config) { c.PullPolicy = "sometimes" }, "docker_pull_policy"},
		{func(c *Config) { c.CapAdd = []string{"NET ADMIN"} }, "docker_cap_add"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		cfg := ok
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("%+v: error %v does not name %s", cfg, err, c.field)
		}
	}
}

func TestFollowPull(t *testing.T) {
	t.Parallel()
	stream := `{"status":"Pulling from library/debian","id":"bookworm"}
{"status":"Pulling fs layer","progressDetail":{},"id":"aaa"}
{"status":"Pulling fs layer","progressDetail":{},"id":"bbb"}
{"status":"Downloading","progressDetail":{"current":1048576,"total":4194304},"id":"aaa"}
{"status":"Downloading","progressDetail":{"current":2097152,"total":4194304},"id":"aaa"}
{"status":"Download complete","progressDetail":{},"id":"bbb"}
{"status":"Pull complete","progressDetail":{},"id":"aaa"}
{"status":"Digest: sha256:0123"}
{"status":"Status: Downloaded newer image for debian:bookworm"}
`
	var logs bytes.Buffer
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	var reports []backend.Progress
	report := func(p backend.Progress) { reports = append(reports, p) }
	if err := followPull(strings.NewReader(stream), slog.New(slog.NewTextHandler(&logs, nil)), 2*time.Second, now, report); err != nil {
		t.Fatal(err)
	}
	// One report per layer line (the caller paces them), then the last:
	// every layer done, 4 MiB of the known 4 MiB.
	if len(reports) != 7 || reports[2] != (backend.Progress{Step: backend.StepPulling, Bytes: 1 << 20, Total: 4 << 20}) ||
		reports[6] != (backend.Progress{Step: backend.StepPulling, Bytes: 4 << 20, Total: 4 << 20, Done: true}) {
		t.Errorf("progress reports = %+v", reports)
	}
	out := logs.String()
	for _, want := range []string{"Pulling from library/debian", "Status: Downloaded newer image", "pull progress", "layers=2", "downloaded_mb=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "pull progress"); n < 2 || n > 4 {
		t.Errorf("%d progress lines for 7 layer messages every 2s of 1s steps:\n%s", n, out)
	}

	failing := `{"status":"Pulling from x/y","id":"1"}
{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}
`
	reports = nil
	err := followPull(strings.NewReader(failing), slog.New(slog.DiscardHandler), time.Second, time.Now, report)
	if err == nil || err.Error() != "manifest unknown" {
		t.Fatalf("error line: %v", err)
	}
	if len(reports) != 0 {
		t.Errorf("a failed pull reported %+v", reports)
	}
	if err := followPull(strings.NewReader(`{"status":`), slog.New(slog.DiscardHandler), time.Second, time.Now, report); err == nil {
		t.Fatal("truncated stream accepted")
	}
}

// With no engine at the address, every call is ErrUnavailable (503, not 502).
func TestUnreachableEngineIsUnavailable(t *testing.T) {
	t.Parallel()
	d, err := New(Config{Host: "unix:///nonexistent/docker.sock", Image: "i", ContainerPrefix: "p"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Ping(ctx); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Ping: %v", err)
	}
	_, err = d.Create(ctx, backend.Spec{SandboxID: "0123456789abcdef"})
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Create: %v", err)
	}
	if _, err := d.Alive(ctx, backend.Info{SandboxID: "0123456789abcdef", Incarnation: "abc"}); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Alive: %v", err)
	}
	if _, err := d.List(ctx); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("List: %v", err)
	}
}

// The shipped sandbox images keep the lean server where the backends look
// for it: their label names it for this backend, and applecontainer, which
// reads no labels, starts sandboxspec.ServerImagePath.
func TestSandboxImagesLabelTheServer(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Dockerfile", "Dockerfile.full"} {
		data, err := os.ReadFile(filepath.Join(testutil.ModuleRoot(), "deployments", "sandbox-image", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`LABEL ` + LabelServer + `="` + sandboxspec.ServerImagePath + `"`,
			`ENTRYPOINT ["` + sandboxspec.ServerImagePath + `", "` + sandboxspec.ServerCommand + `"]`,
		} {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s lacks %s", name, want)
			}
		}
	}
}

// TestPortHost: a TCP image's ports are dialled at its address on its
// network (the first by name that has one), or by name on the gateway's
// network; our own server's containers have none (the bridge serves).
func TestPortHost(t *testing.T) {
	t.Parallel()
	d := newWithEngine(Config{Image: "i", ContainerPrefix: "p"}, nil, slog.New(slog.DiscardHandler))
	nets := map[string]*network.EndpointSettings{"b-net": {IPAddress: "172.18.0.5"}, "a-none": {}, "bridge": {IPAddress: "172.17.0.9"}}
	unix := map[string]string{labelAPI: apiUnix}
	for _, tc := range []struct {
		name     string
		network  string
		labels   map[string]string
		networks map[string]*network.EndpointSettings
		want     string
	}{
		{"own server", "", unix, nets, ""},
		{"own server on a network", "net", unix, nets, ""},
		{"tcp image", "", nil, nets, "172.18.0.5"},
		{"tcp image without an address", "", nil, map[string]*network.EndpointSettings{"none": {}}, ""},
		{"tcp image on the gateway's network", "net", nil, nets, "p-x"},
	} {
		d.cfg.Network = tc.network
		if got := d.portHost("p-x", tc.labels, tc.networks); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
