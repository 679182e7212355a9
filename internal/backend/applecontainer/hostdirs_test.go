package applecontainer

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// The pool hands over paths only (backend.ThreadMounts creates nothing): the
// backend makes the thread's host dirs before its first CLI call, and a
// failed mkdir is ErrHostDirs with its cause, without calling the CLI. The
// CLI here is a script noting, per call, whether the workspace dir exists.
func TestCreateMakesTheHostDirs(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		dataDir      string
		wantHostDirs bool // Create fails with ErrHostDirs, never calling the CLI
	}{
		{"fresh data dir", t.TempDir(), false},
		{"parent is a regular file", filepath.Join(file, "data"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: tc.dataDir}, "alice", "t1")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			calls, bin := filepath.Join(dir, "calls"), filepath.Join(dir, "container")
			script := fmt.Sprintf("#!/bin/sh\nif [ -d '%s' ]; then echo dir; else echo nodir; fi >> '%s'\nexit 1\n", mounts[0].HostPath, calls)
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			a, err := New(Config{Binary: bin, Image: "sandgate-sandbox:latest", ContainerPrefix: "sgt", ReadyTimeout: 5 * time.Second},
				slog.New(slog.NewTextHandler(t.Output(), nil)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.Create(t.Context(), backend.Spec{SandboxID: identity.SandboxID("alice", "t1"), User: "alice", Thread: "t1", Mounts: mounts})
			if err == nil {
				t.Fatal("Create succeeded against a CLI that always fails")
			}
			if hostDirs := errors.Is(err, backend.ErrHostDirs) && errors.Is(err, syscall.ENOTDIR); hostDirs != tc.wantHostDirs {
				t.Fatalf("Create = %v; want ErrHostDirs wrapping ENOTDIR: %v", err, tc.wantHostDirs)
			}
			got, err := os.ReadFile(calls)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			want := "dir" // the first call already sees the workspace dir
			if tc.wantHostDirs {
				want = "" // no call
			}
			if first, _, _ := strings.Cut(string(got), "\n"); first != want {
				t.Fatalf("CLI calls saw %q, want the first to see %q", got, want)
			}
		})
	}
}
