// Package docker runs every sandbox as a Docker container, through the
// Docker Engine API (github.com/docker/docker/client, API version
// negotiated, so engines from 20.10 on work).
//
// A sandbox is the container {container_prefix}-{sandbox_id}, labelled with
// its identity (backend.IdentityLabels), so any gateway process finds it by
// name (Discover) or by label (List) and the container id is its
// incarnation. A pre-started one (the prewarm pool) gets its thread's name
// when claimed, and the identity its labels cannot take in a claim record
// (claim.go). The thread's user-data dirs are bind-mounted at the virtual
// paths, the skills and ACP dirs read-only; the sandbox server therefore runs
// in container mode, without path mapping.
//
// Safer defaults than DeerFlow's `docker run --security-opt seccomp=unconfined`:
//
//   - A container of our own server has no network (--network none) unless
//     its egress is open: no route to another sandbox or a host port. The
//     gateway reaches it on a Unix socket, and it reaches the egress proxy
//     on another (network.go). An image serving its own API gets its port
//     published on 127.0.0.1 only, with a host port the engine picks (no
//     port scanning, never 0.0.0.0); with Network set (the gateway itself
//     in a container on that network) nothing is published and the URL is
//     http://{container name}:{port}.
//   - The engine's default seccomp profile; seccomp=unconfined only when
//     SeccompUnconfined is set (the all-in-one image's browser needs it),
//     and then logged as a warning at startup.
//   - no-new-privileges, and every capability dropped. The sandbox needs
//     none: it owns every process it signals and binds an unprivileged
//     port. CapAdd gives some back for images that must run as root and
//     switch users (e.g. CHOWN, SETUID, SETGID for apt).
//   - A uid of the sandbox's own, never the gateway's (user.go): 2^30 +
//     a hash of the sandbox id (jail.SandboxHostID), a range no account
//     uses. A root gateway runs it as id:id and hands it the thread's
//     writable dirs (workspace, uploads, outputs) at 0700; an unprivileged
//     gateway, which cannot chown, runs it as id:{its own gid} with the
//     dirs 2770 in its group. Our server's umask is 077 (007 for the
//     unprivileged gateway, whose group must read), so what the sandbox
//     writes has no bit for other host users. The read-only skills and
//     ACP dirs stay the operator's and must be readable by others.
//     docker_user overrides this: "uid:gid" (a root gateway hands it the
//     dirs too), a name, or "image"; root is allowed, with a warning.
//   - No nosuid/nodev on the bind mounts: the engine's bind mounts take no
//     such flags, and a local volume with o=bind,nosuid,nodev drops them
//     (the kernel ignores mount flags on a bind without a remount; checked
//     on this engine). Nothing is lost: inside, no-new-privileges makes
//     setuid bits inert and the sandbox's files are its own anyway; on the
//     host, a setuid file it plants is its own uid's, so at most it runs as
//     that unprivileged uid, and it sits in a 0700 dir no other host user
//     can reach. Device files need CAP_MKNOD, which is dropped.
//   - DiskLimit (docker_disk_limit) caps each writable layer where the
//     storage driver supports a size (overlay2 on xfs with pquota, btrfs,
//     zfs); elsewhere every create fails with an error naming the setting.
//   - Memory, CPU and pids limits (DefaultMemory, DefaultNanoCPUs,
//     DefaultPidsLimit unless configured), and a minimal init (docker-init)
//     as PID 1 that forwards SIGTERM and reaps the orphans agents leave.
//
// Images built from deployments/sandbox-image carry the label
// LabelServer=/sandgate-sandbox (sandboxspec.ServerImagePath; older images
// /gateway): the backend then runs `{label} sandbox --listen
// unix:/run/sandgate/api/api-*.sock --home /mnt/user-data/workspace
// --secret-file ... [--egress-socket ...]`, with the sandbox's own secret
// delivered as a file (secret.go). Any other image
// (the all-in-one sandbox DeerFlow uses) runs its own entrypoint, must serve
// the sandbox API on Port, and gets no secret: the gateway sends it the
// shared sandbox_api_key.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/singleflight"

	"github.com/sandgate/sandgate/internal/backend"
)

// Name is the backend's name in Info.Backend and logs.
const Name = "docker"

// Defaults, documented in docs/CONFIG.md.
const (
	DefaultImage     = "sandgate-sandbox:latest"
	DefaultPrefix    = "sandgate-sandbox"
	DefaultPort      = 8080
	DefaultMemory    = 2 << 30 // bytes
	DefaultNanoCPUs  = 2e9     // two CPUs
	DefaultPidsLimit = 1024

	defaultReadyTimeout = 60 * time.Second
	defaultStopTimeout  = 5 * time.Second
	// discoverReadyTimeout bounds Discover's readiness check: the sandbox
	// was ready once, so it answers at once unless it is hung.
	discoverReadyTimeout = 2 * time.Second
)

// Pull policies.
const (
	PullAlways       = "always"
	PullIfNotPresent = "if-not-present"
	PullNever        = "never"
)

// UserImage as Config.User keeps the image's own USER.
const UserImage = "image"

// LabelServer marks an image whose sandbox server the backend starts
// itself: the value is the server binary's path in the image, the lean
// server's or the gateway's (both serve sandboxspec.ServerCommand).
const LabelServer = "io.sandgate.sandbox-server"

// Config of the docker backend. Zero limits mean the defaults; negative
// limits mean none.
type Config struct {
	// Host is the engine address (unix:///var/run/docker.sock,
	// tcp://host:2376); "" = DOCKER_HOST and friends, else the default socket.
	Host            string
	Image           string
	ContainerPrefix string
	// Port is the sandbox server's port inside the container.
	Port int
	// Network, when set, attaches sandboxes to this Docker network and
	// reaches them by container name; nothing is published on the host.
	Network           string
	Memory            int64 // bytes
	NanoCPUs          int64 // 1e9 = one CPU
	PidsLimit         int
	SeccompUnconfined bool
	CapAdd            []string
	// User runs the sandbox as this user ("uid:gid", "name"); "" = a host
	// uid of the sandbox's own, never the gateway's (user.go); UserImage =
	// the image's USER.
	User string
	// DiskLimit bounds each container's writable layer, in bytes (the
	// engine's --storage-opt size); 0 or negative = none. Only some storage
	// drivers support it: the others fail every create, saying so.
	DiskLimit  int64
	PullPolicy string // PullAlways | PullIfNotPresent (default) | PullNever
	// Instance is the gateway instance id recorded in the labels.
	Instance string
	// ReadyTimeout bounds the wait for the first 200 after start (the pool's
	// create_timeout bounds the whole create, pull included). 0 = 60s.
	ReadyTimeout time.Duration
	// StopTimeout is the grace between SIGTERM and SIGKILL on Destroy. 0 = 5s.
	StopTimeout time.Duration
	// SocketDir holds each sandbox's socket dir (network.go); the gateway
	// passes {data_dir}/sandboxes/docker. "" = a dir in the temp dir.
	SocketDir string
	// OpenNetwork is the network of sandboxes with egress open; "" =
	// DefaultOpenNetwork, created when first needed.
	OpenNetwork string
	// Egress serves the sandboxes' egress proxies (nil = none: the proxy
	// mode then lets nothing out).
	Egress backend.EgressGate
}

// containerName is what Docker accepts as a name; the prefix leaves room
// for "-{sandbox id}".
var containerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`)

// Validate names the first bad setting by its configuration name.
func (c Config) Validate() error {
	switch {
	case c.Image == "":
		return errors.New("image: must be set")
	case !containerName.MatchString(c.ContainerPrefix):
		return fmt.Errorf("container_prefix: %q is not a valid container name prefix ([a-zA-Z0-9][a-zA-Z0-9_.-]*)", c.ContainerPrefix)
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("port: %d is not a TCP port", c.Port)
	case c.PullPolicy != "" && !slices.Contains([]string{PullAlways, PullIfNotPresent, PullNever}, c.PullPolicy):
		return fmt.Errorf("docker_pull_policy: %q is not always, if-not-present or never", c.PullPolicy)
	case c.ReadyTimeout < 0 || c.StopTimeout < 0:
		return errors.New("docker backend: timeouts must not be negative")
	}
	for _, capName := range c.CapAdd {
		if capName == "" || strings.ContainsAny(capName, " ,=") {
			return fmt.Errorf("docker_cap_add: %q is not a capability name", capName)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Memory == 0 {
		c.Memory = DefaultMemory
	}
	if c.NanoCPUs == 0 {
		c.NanoCPUs = DefaultNanoCPUs
	}
	if c.PidsLimit == 0 {
		c.PidsLimit = DefaultPidsLimit
	}
	if c.PullPolicy == "" {
		c.PullPolicy = PullIfNotPresent
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = defaultReadyTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = defaultStopTimeout
	}
	if c.SocketDir == "" {
		c.SocketDir = filepath.Join(os.TempDir(), "sandgate-docker-"+strconv.Itoa(os.Getuid()))
	}
	if abs, err := filepath.Abs(c.SocketDir); err == nil {
		c.SocketDir = abs
	}
	if c.OpenNetwork == "" {
		c.OpenNetwork = DefaultOpenNetwork
	}
	return c
}

// engine is the part of the Docker client this backend uses.
type engine interface {
	Ping(ctx context.Context) (types.Ping, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error)
	ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig,
		net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	CopyToContainer(ctx context.Context, id, dstPath string, content io.Reader, opts container.CopyToContainerOptions) error
	ContainerWait(ctx context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerInspectWithRaw(ctx context.Context, id string, getSize bool) (container.InspectResponse, []byte, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerStatsOneShot(ctx context.Context, id string) (container.StatsResponseReader, error)
	ContainerStop(ctx context.Context, id string, opts container.StopOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (network.Inspect, error)
	NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error)
	ContainerPause(ctx context.Context, id string) error
	ContainerUnpause(ctx context.Context, id string) error
	ContainerRename(ctx context.Context, id, name string) error
	Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error)
	Close() error
}

// Docker implements backend.Backend, backend.Freezer and backend.Binder
// (claim.go) with containers.
type Docker struct {
	cfg   Config
	api   engine
	log   *slog.Logger
	pulls singleflight.Group // one pull per image at a time
	// pullWatch reports a pull's progress to every create waiting for it.
	pullWatch pullWatchers
	// egressWarning says once that an image without our server cannot be
	// held to an egress policy.
	egressWarning sync.Once
}

var (
	_ backend.Backend = (*Docker)(nil)
	_ backend.Freezer = (*Docker)(nil)
)

// New checks cfg and connects to the engine (lazily: nothing is sent until
// the first call, so a gateway starts while the engine is down and /readyz
// says so).
func New(cfg Config, log *slog.Logger) (*Docker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, err := engineClient(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("docker backend: %w", err)
	}
	return newWithEngine(cfg, api, log), nil
}

func newWithEngine(cfg Config, api engine, log *slog.Logger) *Docker {
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	d := &Docker{cfg: cfg, api: api, log: log.With("backend", Name)}
	if cfg.SeccompUnconfined {
		d.log.Warn("sandboxes run with seccomp=unconfined (docker_seccomp_unconfined): every syscall is open to sandboxed code")
	}
	if rootUser(cfg.User) {
		d.log.Warn("sandboxes run as root (docker_user): only no-new-privileges and the dropped capabilities stand between their code and root on the thread's files")
	}
	if len(cfg.CapAdd) > 0 {
		d.log.Info("sandboxes get capabilities back", "cap_add", strings.Join(cfg.CapAdd, ","))
	}
	return d
}

// Ping reports whether the engine answers and has the sandbox image (for
// /readyz): a missing image is an *backend.ImageError naming it.
func (d *Docker) Ping(ctx context.Context) error {
	if _, err := d.api.Ping(ctx); err != nil {
		return fmt.Errorf("%w: docker engine: %w", backend.ErrUnavailable, err)
	}
	return d.imagePresent(ctx, d.cfg.Image)
}

// Close releases the engine client.
func (d *Docker) Close() error { return d.api.Close() }

// engineErr marks errors that mean the engine itself cannot be reached.
func engineErr(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: %w: %w", what, backend.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
