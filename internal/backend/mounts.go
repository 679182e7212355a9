package backend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Virtual paths every sandbox sees, whatever the backend (DeerFlow's layout).
const (
	VirtualUserData     = "/mnt/user-data"
	VirtualWorkspace    = sandboxspec.VirtualWorkspace
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

// ErrHostDirs marks a mount's host directory that cannot be created (disk
// full, read-only filesystem, a file in its place): the gateway host's
// fault, not the sandbox's, so callers answer 507 rather than 502.
var ErrHostDirs = errors.New("mount host directory unavailable")

// ThreadMounts returns the mounts for one thread's sandbox. It creates
// nothing: only the backends that bind host directories make them
// (EnsureHostDirs), so kubernetes and remote never touch the gateway's disk.
// user and thread must already be validated path-safe identifiers.
func ThreadMounts(cfg MountConfig, user, thread string) ([]Mount, error) {
	return mountsUnder(ThreadDir(cfg.DataDir, user, thread), cfg)
}

// mountsUnder returns the standard mounts with the user data under dir.
func mountsUnder(dir string, cfg MountConfig) ([]Mount, error) {
	base, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve data dir: %w", err)
	}
	mounts := make([]Mount, 0, 5+len(cfg.Extra))
	for _, sub := range []struct{ name, virtual string }{
		{"workspace", VirtualWorkspace},
		{"uploads", VirtualUploads},
		{"outputs", VirtualOutputs},
	} {
		mounts = append(mounts, Mount{HostPath: filepath.Join(base, sub.name), ContainerPath: sub.virtual})
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
		mounts = append(mounts, Mount{HostPath: abs, ContainerPath: ro.virtual, ReadOnly: true})
	}
	return append(mounts, cfg.Extra...), nil
}

// EnsureHostDirs creates the standard mounts' missing host directories:
// the thread's own 0o700 (its files are nobody else's business; backends
// whose sandboxes have a uid of their own then hand them over), the
// read-only skills and ACP dirs 0o755 (the operator's, readable by every
// sandbox uid; an empty one beats a failed bind). Backends that bind host
// paths call it at the start of Create. Configured extra mounts are the
// operator's and must already exist. Errors wrap ErrHostDirs and the cause
// (errors.Is(err, syscall.ENOSPC) holds).
func EnsureHostDirs(mounts []Mount) error {
	for _, m := range mounts {
		if !standardMount(m.ContainerPath) {
			continue
		}
		perm := os.FileMode(0o700)
		if m.ReadOnly {
			perm = 0o755
		}
		if err := os.MkdirAll(m.HostPath, perm); err != nil {
			return fmt.Errorf("%w: create %s dir: %w", ErrHostDirs, m.ContainerPath, err)
		}
	}
	return nil
}

// ChmodDir sets a directory's mode through its descriptor, opened without
// following a symlink: never a chmod by path, which would follow one a
// sandbox put in the directory's place.
func ChmodDir(path string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(mode)
}

// SandboxOwned reports whether m is one of the thread's writable dirs, which
// a sandbox with a host uid of its own owns; read-only and other configured
// mounts keep their owner (they may be shared).
func SandboxOwned(m Mount) bool {
	return !m.ReadOnly && strings.HasPrefix(m.ContainerPath, VirtualUserData+"/")
}

// standardMount: a virtual path ThreadMounts makes from MountConfig.
func standardMount(virtual string) bool {
	switch virtual {
	case VirtualWorkspace, VirtualUploads, VirtualOutputs, VirtualSkills, VirtualACPWorkspace:
		return true
	}
	return false
}
