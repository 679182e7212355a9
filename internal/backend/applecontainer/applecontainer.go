// Package applecontainer runs every sandbox with Apple's `container` CLI on
// macOS, where each container is a lightweight VM with its own IP address on
// a host-only network. The command is built from the same spec as the
// docker backend's container: name {container_prefix}-{sandbox_id}, identity
// labels, the thread's dirs bind-mounted at the virtual paths (skills and
// ACP read-only), the configured env, user, CPUs and memory, and the sandbox
// server started as `/gateway sandbox --listen 0.0.0.0:{port} --home
// /mnt/user-data/workspace`.
//
// Where it differs from the docker backend, and why:
//
//   - The URL is http://{container IP}:{port}. Every container's IP is
//     reachable from the host (and only from it and its network), so nothing
//     is published on a host port at all; the CLI cannot publish on an
//     engine-chosen port, and port scanning is what this project avoids.
//   - The environment goes through a 0600 --env-file removed after the run,
//     so secret values never appear in a process list or a log; a value with
//     a newline cannot be passed that way and is refused.
//   - Capabilities (--cap-drop ALL plus docker_cap_add) and --init are used
//     when the CLI offers them (read from `container run --help` once); older
//     CLIs run without them, with a warning. seccomp, no-new-privileges and
//     pids limits have no CLI flags: the VM boundary is the isolation.
//   - No pause: the CLI has none, so pause_warm does not apply (not a Freezer).
//   - The CLI has no container ids apart from names, so the incarnation is a
//     random nonce in the label sandgate.incarnation, written at run time.
//   - The image must carry the sandbox server at sandboxspec.ServerImagePath
//     (/sandgate-sandbox: images from deployments/sandbox-image do); the
//     label-based choice of the server binary, or of an image's own
//     entrypoint, is docker-only, for want of a stable image-inspect format.
package applecontainer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// Name is the backend's name in Info.Backend and logs.
const Name = "applecontainer"

// LabelIncarnation holds the nonce that tells one run of a name from the next.
const LabelIncarnation = "sandgate.incarnation"

// labelCreated holds the creation time (RFC 3339), for the reconciler's grace.
const labelCreated = "sandgate.created"

const (
	defaultReadyTimeout  = 60 * time.Second
	defaultStopTimeout   = 5 * time.Second
	discoverReadyTimeout = 2 * time.Second
	cliTimeout           = 30 * time.Second
)

// Config of the applecontainer backend.
type Config struct {
	// Binary is the CLI, looked up on PATH; "" = "container".
	Binary          string
	Image           string
	ContainerPrefix string
	Port            int   // sandbox server port in the container; 0 = 8080
	Memory          int64 // bytes; <= 0 = the CLI's default (1 GiB)
	CPUs            int   // <= 0 = the CLI's default (4)
	// User: "uid:gid" or a name; "" = the gateway's uid:gid; "image" = the
	// image's USER.
	User     string
	CapAdd   []string
	Instance string
	// ReadyTimeout bounds the wait for the first 200 after run. 0 = 60s.
	ReadyTimeout time.Duration
	// StopTimeout is the grace before SIGKILL on Destroy. 0 = 5s.
	StopTimeout time.Duration
}

// AppleContainer implements backend.Backend with the `container` CLI.
type AppleContainer struct {
	cfg  Config
	bin  string
	user string
	log  *slog.Logger

	featuresOnce sync.Once
	features     features
}

var _ backend.Backend = (*AppleContainer)(nil)

// features are the optional `container run` flags this CLI offers.
type features struct{ capDrop, init bool }

// New finds the CLI and checks cfg. Nothing is run until the first call.
func New(cfg Config, log *slog.Logger) (*AppleContainer, error) {
	if cfg.Image == "" || cfg.ContainerPrefix == "" {
		return nil, errors.New("applecontainer backend: image and container_prefix are required")
	}
	if cfg.Binary == "" {
		cfg.Binary = "container"
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("applecontainer backend: %w", err)
	}
	if cfg.Port == 0 {
		cfg.Port = 8080
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = defaultReadyTimeout
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = defaultStopTimeout
	}
	if log == nil {
		log = slog.Default()
	}
	return &AppleContainer{cfg: cfg, bin: bin, user: resolveUser(cfg.User), log: log.With("backend", Name)}, nil
}

// Version runs `container --version` with a short timeout; backend auto
// uses it to decide whether the CLI is there and answers.
func Version(ctx context.Context, binary string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := runCLI(ctx, binary, nil, "--version")
	return strings.TrimSpace(string(out)), err
}

// Ping reports whether the container services answer (for /readyz).
func (a *AppleContainer) Ping(ctx context.Context) error {
	if _, err := a.cli(ctx, "list", "--quiet"); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return nil
}

func (a *AppleContainer) name(sid string) string { return a.cfg.ContainerPrefix + "-" + sid }

// cli runs the CLI and returns its stdout; the error carries its stderr.
func (a *AppleContainer) cli(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	return runCLI(ctx, a.bin, nil, args...)
}

func runCLI(ctx context.Context, bin string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2048 {
			msg = msg[:2048] + "..."
		}
		verb := "container"
		if len(args) > 0 {
			verb += " " + args[0]
		}
		if msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", verb, err, msg)
		}
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	return stdout.Bytes(), nil
}

// detectFeatures reads `container run --help` once for the optional flags
// (on its own context: one caller's cancellation must not decide for all).
func (a *AppleContainer) detectFeatures() features {
	a.featuresOnce.Do(func() {
		out, err := a.cli(context.Background(), "run", "--help")
		help := string(out)
		a.features = features{capDrop: strings.Contains(help, "--cap-drop"), init: strings.Contains(help, "--init")}
		if err != nil || !a.features.capDrop {
			a.log.Warn("this container CLI has no --cap-drop: sandboxes keep its default capabilities; update the CLI", "err", err)
		}
	})
	return a.features
}

// snapshot is one entry of `container list --format json`.
type snapshot struct {
	Configuration struct {
		ID     string            `json:"id"`
		Labels map[string]string `json:"labels"`
	} `json:"configuration"`
	Status   string `json:"status"`
	Networks []struct {
		Address     string `json:"address"`
		IPv4Address string `json:"ipv4Address"` // newer CLIs
	} `json:"networks"`
}

func (s snapshot) running() bool { return s.Status == "running" }

// ip is the container's IPv4 address on its first network.
func (s snapshot) ip() (string, error) {
	for _, n := range s.Networks {
		addr := n.IPv4Address
		if addr == "" {
			addr = n.Address
		}
		addr, _, _ = strings.Cut(addr, "/")
		if ip := net.ParseIP(addr); ip != nil {
			return ip.String(), nil
		}
	}
	return "", fmt.Errorf("container %s has no IP address yet", s.Configuration.ID)
}

// list returns the CLI's containers; all includes stopped ones.
func (a *AppleContainer) list(ctx context.Context, all bool) ([]snapshot, error) {
	args := []string{"list", "--format", "json"}
	if all {
		args = append(args, "--all")
	}
	out, err := a.cli(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	var snaps []snapshot
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(out, &snaps); err != nil {
		return nil, fmt.Errorf("decode container list: %w", err)
	}
	return snaps, nil
}

// find returns the container named name, in any state.
func (a *AppleContainer) find(ctx context.Context, name string) (snapshot, bool, error) {
	snaps, err := a.list(ctx, true)
	if err != nil {
		return snapshot{}, false, err
	}
	for _, s := range snaps {
		if s.Configuration.ID == name {
			return s, true, nil
		}
	}
	return snapshot{}, false, nil
}

// info describes a running container of ours.
func (a *AppleContainer) info(s snapshot) (backend.Info, error) {
	ip, err := s.ip()
	if err != nil {
		return backend.Info{}, err
	}
	l := s.Configuration.Labels
	created, _ := time.Parse(time.RFC3339Nano, l[labelCreated])
	return backend.Info{
		SandboxID: l[backend.LabelSandboxID], User: l[backend.LabelUser], Thread: l[backend.LabelThread],
		URL:         "http://" + net.JoinHostPort(ip, fmt.Sprint(a.cfg.Port)),
		Incarnation: l[LabelIncarnation], Backend: Name, Labels: l, CreatedAt: created,
	}, nil
}

// ours reports whether a container carries Sandgate's labels for sid.
func ours(s snapshot, sid string) bool {
	l := s.Configuration.Labels
	return l[backend.LabelManagedBy] == backend.ManagedByValue && l[backend.LabelSandboxID] == sid && l[LabelIncarnation] != ""
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
