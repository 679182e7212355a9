package backendtest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

// hostDirs: a backend that binds the thread's host dirs makes them itself
// (backend.ThreadMounts only names them), and a data dir that cannot hold
// them fails Create with ErrHostDirs and its cause before anything runs.
func (c *contract) hostDirs(t *testing.T) {
	fresh := Spec(t, backend.MountConfig{DataDir: filepath.Join(t.TempDir(), "data")}, "contract", "host-dirs")
	MustCreate(t, c.New(t), fresh)
	for _, m := range fresh.Mounts {
		if st, err := os.Stat(m.HostPath); err != nil || !st.IsDir() {
			t.Errorf("%s: host dir %s: %v", m.ContainerPath, m.HostPath, err)
		}
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b := c.New(t)
	bad := Spec(t, backend.MountConfig{DataDir: filepath.Join(file, "data")}, "contract", "host-dirs-bad")
	info, err := b.Create(Ctx(t), bad)
	if err == nil {
		destroyLater(t, b, info)
	}
	if !errors.Is(err, backend.ErrHostDirs) || !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("Create under a regular file = %v, want ErrHostDirs wrapping ENOTDIR", err)
	}
	list, err := b.List(Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range list {
		if info.SandboxID == bad.SandboxID {
			t.Fatalf("a failed create left a sandbox: %+v", info)
		}
	}
}
