package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/klog/v2"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/applecontainer"
	"github.com/sandgate/sandgate/internal/backend/docker"
	"github.com/sandgate/sandgate/internal/backend/kubernetes"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/backend/remote"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/imagestore"
)

// autoProbeTimeout bounds each runtime probe of `backend: auto`, so a
// gateway never hangs at startup on an engine that does not answer.
const autoProbeTimeout = 2 * time.Second

// newBackend builds the configured backend and returns it with its name.
func newBackend(ctx context.Context, cfg config.Config, log *slog.Logger, gate backend.EgressGate) (backend.Backend, string, error) {
	name := cfg.Backend
	if name == "auto" {
		return autoBackend(ctx, cfg, log, gate)
	}
	switch name {
	case "process":
		if cfg.ImageRequested() {
			log.Warn("image is set, so container sandboxes were asked for, but the backend is process: sandboxes run as "+
				"host processes (isolated by namespaces unless process_isolation: none) and the image is not used; set backend: "+
				"docker (or kubernetes, applecontainer) to run them in containers, or drop image", "image", cfg.Docker.Image)
		}
		pc := process.Config{
			Binary:        cfg.Process.Binary,
			StateDir:      filepath.Join(cfg.DataDir, "sandboxes", "process"),
			Instance:      cfg.Pool.Instance,
			Isolation:     cfg.Process.Isolation,
			Limits:        cfg.Process.Limits,
			Egress:        gate,
			ReadOnlyImage: cfg.Process.ReadOnlyImage,
		}
		if cfg.Process.Image != "" {
			img, err := importProcessImage(ctx, cfg, log)
			if err != nil {
				return nil, "", err
			}
			pc.SystemRoot, pc.SystemEnv = img.RootFS, img.Env
		}
		be, err := process.New(pc, log)
		if err != nil {
			return nil, "", fmt.Errorf("process backend: %w", err)
		}
		return be, name, nil
	case "docker":
		be, err := docker.New(dockerConfig(cfg, gate), log)
		if err != nil {
			return nil, "", err
		}
		checkImage(ctx, be, cfg)
		return be, name, nil
	case "applecontainer":
		be, err := applecontainer.New(appleConfig(cfg), log)
		if err != nil {
			return nil, "", err
		}
		return be, name, nil
	case "kubernetes":
		// client-go logs through klog; send it to the gateway's log, before
		// any client-go goroutine runs.
		klog.SetSlogLogger(log.With("component", "client-go"))
		// The Pod informer runs for the life of the process: ctx ends at
		// SIGTERM, and the pool still answers liveness questions while it drains.
		be, err := kubernetes.New(context.WithoutCancel(ctx), cfg.KubernetesConfig(), log)
		if err != nil {
			return nil, "", err
		}
		return be.Backend(), name, nil
	case "remote":
		be, err := remote.New(cfg.Remote, log)
		if err != nil {
			return nil, "", err
		}
		return be, name, nil
	default:
		return nil, "", fmt.Errorf("backend: unknown %q", name)
	}
}

// autoBackend picks as DeerFlow does: on macOS the `container` CLI when
// `container --version` answers, else Docker when its engine answers a
// ping, else the process backend; the log says which and why.
func autoBackend(ctx context.Context, cfg config.Config, log *slog.Logger, gate backend.EgressGate) (backend.Backend, string, error) {
	if runtime.GOOS == "darwin" {
		v, err := applecontainer.Version(ctx, "container")
		if err == nil {
			log.Info("backend auto: using applecontainer", "why", "`container --version` answered", "version", v)
			cfg.Backend = "applecontainer"
			return newBackend(ctx, cfg, log, gate)
		}
		log.Info("backend auto: no usable Apple container CLI", "err", err)
	}
	d, err := docker.New(dockerConfig(cfg, gate), log)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, autoProbeTimeout)
		err = d.Ping(pctx)
		cancel()
		var image *backend.ImageError
		if err == nil || errors.As(err, &image) { // the engine answered; a missing image is reported by checkImage
			log.Info("backend auto: using docker", "why", "the Docker engine answered a ping")
			checkImage(ctx, d, cfg)
			return d, "docker", nil
		}
		_ = d.Close()
	}
	if cfg.Auth.Enabled() && cfg.Process.Isolation == process.IsolationNone {
		// Credentials mean several users: the unisolated process backend
		// does not keep their code apart, so falling back to it would fail
		// open.
		return nil, "", fmt.Errorf("%w (docker: %w)", errAutoUnisolated, err)
	}
	log.Warn("backend auto: using process: sandboxes are host processes in namespaces of their own",
		"why", "no container runtime answered", "docker_err", err, "image_ignored", cfg.ImageRequested())
	cfg.Backend = "process"
	return newBackend(ctx, cfg, log, gate)
}

// importProcessImage imports process_image into {data_dir}/images, or finds
// it stored there.
func importProcessImage(ctx context.Context, cfg config.Config, log *slog.Logger) (imagestore.Image, error) {
	store, err := openImageStore(cfg)
	if err != nil {
		return imagestore.Image{}, fmt.Errorf("process_image: %w", err)
	}
	img, err := timedImport(ctx, log, "process_image", func(ctx context.Context) (imagestore.Image, error) {
		return store.ImportArchive(ctx, cfg.Process.Image)
	})
	if err != nil {
		return imagestore.Image{}, fmt.Errorf("process_image: %w", err)
	}
	return img, nil
}

// errAutoUnisolated refuses `auto` falling back to the process backend
// while credentials are configured.
var errAutoUnisolated = errors.New("backend auto: no container runtime answered and authentication is configured " +
	"(several users): refusing to fall back to the process backend with process_isolation: none; make the Docker engine " +
	"reachable (docker_host / DOCKER_HOST), or keep process_isolation: namespaces")

// checkImage runs the docker backend's start-up check of its image and
// the templates', bounded.
func checkImage(ctx context.Context, d *docker.Docker, cfg config.Config) {
	cctx, cancel := context.WithTimeout(ctx, autoProbeTimeout)
	defer cancel()
	var images []string
	for _, t := range cfg.Pool.Templates {
		images = append(images, t.Backend.Image)
	}
	d.CheckImage(cctx, images...)
}

func dockerConfig(cfg config.Config, gate backend.EgressGate) docker.Config {
	d := cfg.Docker
	d.Instance = cfg.Pool.Instance
	d.SocketDir = filepath.Join(cfg.DataDir, "sandboxes", "docker")
	d.Egress = gate
	return d
}

// appleConfig takes the container settings the two CLI-compatible backends
// share; limits of 0 in the docker settings (none) leave the CLI's defaults.
func appleConfig(cfg config.Config) applecontainer.Config {
	d := cfg.Docker
	cpus := 0
	if d.NanoCPUs > 0 {
		cpus = int((d.NanoCPUs + 1e9 - 1) / 1e9) // whole CPUs for a VM
	}
	return applecontainer.Config{
		Image: d.Image, ContainerPrefix: d.ContainerPrefix, Port: d.Port,
		Memory: d.Memory, CPUs: cpus, User: d.User, CapAdd: d.CapAdd, Instance: cfg.Pool.Instance,
	}
}
