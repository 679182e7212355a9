package backend

import (
	"fmt"
	"os"
	"path/filepath"
)

// Virtual paths every sandbox sees, whatever the backend (DeerFlow's layout).
const (
	VirtualUserData     = "/mnt/user-data"
	VirtualWorkspace    = "/mnt/user-data/workspace"
	VirtualUploads      = "/mnt/user-data/uploads"
	VirtualOutputs      = "/mnt/user-data/outputs"
	VirtualSkills       = "/mnt/skills"
	VirtualACPWorkspace = "/mnt/acp-workspace"
)

// MountConfig says where the host side of the standard mounts lives.
type MountConfig struct {
	DataDir      string  // {data_dir}/users/{user}/threads/{thread}/user-data/...
	SkillsDir    string  // read-only at /mnt/skills; skipped when empty
	ACPWorkspace string  // read-only at /mnt/acp-workspace; skipped when empty
	Extra        []Mount // configured mounts, after the standard ones
}

// ThreadDir is the host directory holding a thread's user data. It outlives
// every sandbox of the thread, so a recreated sandbox finds its files again.
func ThreadDir(dataDir, user, thread string) string {
	return filepath.Join(dataDir, "users", user, "threads", thread, "user-data")
}

// ThreadMounts returns the mounts for one thread's sandbox, creating the
// thread's host directories on demand. user and thread must already be
// validated path-safe identifiers.
func ThreadMounts(cfg MountConfig, user, thread string) ([]Mount, error) {
	base, err := filepath.Abs(ThreadDir(cfg.DataDir, user, thread))
	if err != nil {
		return nil, fmt.Errorf("resolve data dir: %w", err)
	}
	mounts := make([]Mount, 0, 5+len(cfg.Extra))
	for _, sub := range []struct{ name, virtual string }{
		{"workspace", VirtualWorkspace},
		{"uploads", VirtualUploads},
		{"outputs", VirtualOutputs},
	} {
		dir := filepath.Join(base, sub.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create thread %s dir: %w", sub.name, err)
		}
		mounts = append(mounts, Mount{HostPath: dir, ContainerPath: sub.virtual})
	}
	for _, ro := range []struct{ host, virtual string }{
		{cfg.SkillsDir, VirtualSkills},
		{cfg.ACPWorkspace, VirtualACPWorkspace},
	} {
		if ro.host == "" {
			continue
		}
		abs, err := filepath.Abs(ro.host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", ro.virtual, err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("create %s dir: %w", ro.virtual, err)
		}
		mounts = append(mounts, Mount{HostPath: abs, ContainerPath: ro.virtual, ReadOnly: true})
	}
	return append(mounts, cfg.Extra...), nil
}
