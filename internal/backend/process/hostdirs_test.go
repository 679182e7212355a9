package process

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The pool hands over paths only (backend.ThreadMounts creates nothing):
// the process backend makes the thread's host dirs itself, and a failed
// mkdir is ErrHostDirs with its cause, before any process starts.
func TestCreateMakesTheHostDirs(t *testing.T) {
	t.Parallel()
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
			p, err := New(Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir(), Instance: "test"},
				slog.New(slog.NewTextHandler(t.Output(), nil)))
			if err != nil {
				t.Fatal(err)
			}
			mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: tc.dataDir}, "alice", "t1")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			info, err := p.Create(ctx, backend.Spec{SandboxID: identity.SandboxID("alice", "t1"), User: "alice", Thread: "t1", Mounts: mounts})
			if err == nil {
				t.Cleanup(func() { _ = p.Destroy(context.Background(), info) })
			}
			if tc.wantErr {
				if !errors.Is(err, backend.ErrHostDirs) || !errors.Is(err, syscall.ENOTDIR) {
					t.Fatalf("Create = %v, want ErrHostDirs wrapping ENOTDIR", err)
				}
				if list, err := p.List(ctx); err != nil || len(list) != 0 {
					t.Fatalf("List after a failed create = %v, %v", list, err)
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
