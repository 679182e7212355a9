package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The pool hands over paths only (backend.ThreadMounts creates nothing):
// the docker backend makes the thread's host dirs itself before the engine
// binds them, and a failed mkdir is ErrHostDirs with its cause, before any
// container exists.
func TestCreateMakesTheHostDirs(t *testing.T) {
	t.Parallel()
	image := testutil.SandboxImage(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		dataDir string
		wantErr bool
	}{
		{"fresh data dir", t.TempDir(), false},
		{"parent is a regular file", filepath.Join(file, "data"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			suffix := make([]byte, 4)
			_, _ = rand.Read(suffix)
			prefix := "sgt-" + hex.EncodeToString(suffix)
			d, err := New(Config{Image: image, ContainerPrefix: prefix, Instance: "test",
				PullPolicy: PullNever, ReadyTimeout: 30 * time.Second}, slog.New(slog.NewTextHandler(t.Output(), nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: tc.dataDir}, "alice", "t1")
			if err != nil {
				t.Fatal(err)
			}
			sid := identity.SandboxID("alice", "t1")
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			info, err := d.Create(ctx, backend.Spec{SandboxID: sid, User: "alice", Thread: "t1", Mounts: mounts})
			if err == nil {
				t.Cleanup(func() { _ = d.Destroy(context.Background(), info) })
			}
			if tc.wantErr {
				if !errors.Is(err, backend.ErrHostDirs) || !errors.Is(err, syscall.ENOTDIR) {
					t.Fatalf("Create = %v, want ErrHostDirs wrapping ENOTDIR", err)
				}
				all, err := d.api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", prefix))})
				if err != nil || len(all) != 0 {
					t.Fatalf("containers after a failed create: %v, %v", all, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			for _, m := range mounts {
				if st, err := os.Stat(m.HostPath); err != nil || !st.IsDir() {
					t.Errorf("%s: host dir %s: %v", m.ContainerPath, m.HostPath, err)
				}
			}
		})
	}
}
