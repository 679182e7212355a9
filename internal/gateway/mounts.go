package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/router"
	"github.com/sandgate/sandgate/internal/usage"
)

// mountPoints lists the paths every sandbox of this configuration has
// mounted beyond the thread's user data, for resolving DeerFlow's
// extra_mounts. The remote backend's provisioner decides its own mounts, so
// it has none here.
func mountPoints(cfg config.Config) []router.MountPoint {
	if cfg.Backend == "remote" {
		return nil
	}
	m := cfg.Pool.Mounts
	var out []router.MountPoint
	k := cfg.KubernetesConfig()
	if m.SkillsDir != "" || cfg.Backend == "kubernetes" && (k.SkillsPVC != "" || k.SkillsHostPath != "") {
		out = append(out, router.MountPoint{Path: backend.VirtualSkills, ReadOnly: true})
	}
	if m.ACPWorkspace != "" {
		out = append(out, router.MountPoint{Path: backend.VirtualACPWorkspace, ReadOnly: true})
	}
	for _, e := range m.Extra {
		out = append(out, router.MountPoint{Path: path.Clean(e.ContainerPath), ReadOnly: e.ReadOnly})
	}
	return out
}

// threadMeter measures thread data where the backend (by the name
// newBackend resolved) keeps it on this host: under data_dir. Kubernetes
// and remote keep it elsewhere: nil, and a quota there means nothing.
func threadMeter(cfg config.Config, backendName string, log *slog.Logger) router.Meter {
	quota := max(cfg.ThreadDataQuota, 0)
	switch backendName {
	case "process", "docker", "applecontainer":
		return usage.New(usage.Config{DataDir: cfg.DataDir, Quota: quota, Log: log})
	}
	if quota > 0 {
		log.Warn("thread_data_quota is ignored: the backend keeps thread data off the gateway host", "backend", backendName)
	}
	return nil
}

// samplerMeters measure for the metrics sampler each sandbox's thread
// data (with meter, when the backend keeps it on this host) and its bytes
// through the egress proxy.
func samplerMeters(meter router.Meter, proxy *egress.Proxy) pool.SamplerMeters {
	var m pool.SamplerMeters
	if um, ok := meter.(*usage.Meter); ok {
		m.ThreadDisk = func(ctx context.Context, user, thread string, maxAge time.Duration) (int64, error) {
			u, err := um.MeasureWithin(ctx, user, thread, maxAge)
			return u.Bytes, err
		}
	}
	if proxy != nil {
		m.Egress = func(sid string) (int64, int64, bool) {
			t, ok := proxy.Traffic(sid)
			return t.Sent, t.Received, ok
		}
	}
	return m
}

// threadCheckpoints keeps workspace checkpoints where the gateway reaches
// the thread data and can freeze the sandbox around the copy (process,
// docker; kubernetes on a volume data_dir is the root of); nil elsewhere
// (the routes answer 501).
func threadCheckpoints(ctx context.Context, cfg config.Config, backendName string, log *slog.Logger) (*checkpoint.Threads, error) {
	switch {
	case backendName == "process", backendName == "docker":
	case backendName == "kubernetes" && cfg.Kubernetes.SharedDataDir:
	default:
		return nil, nil
	}
	t, err := checkpoint.NewThreads(cfg.DataDir, cfg.Checkpoints)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	// Before the pool and the listener exist: no thread is served half
	// swapped by a restore the previous gateway was killed in.
	settled, err := t.Settle(ctx)
	if settled > 0 {
		log.Warn("rolled back checkpoint restores a crash interrupted", "threads", settled)
	}
	if err != nil {
		log.Error("checkpoint restores a crash interrupted could not be rolled back: those threads' checkpoints refuse until fixed", "err", err)
	}
	userBytes, userInodes, userThreads, floor := t.Limits()
	log.Info("workspace checkpoints", "method", t.Method(), "keep", cfg.Checkpoints.Keep, "max_age", cfg.Checkpoints.MaxAge,
		"user_bytes", userBytes, "user_inodes", userInodes, "user_threads", userThreads, "free_floor", floor)
	return t, nil
}
