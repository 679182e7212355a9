package pool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
)

// The pool creates no host directory: a backend that binds none (kubernetes,
// remote; here the fake) creates sandboxes even when the gateway's data dir
// cannot be written.
func TestCreateNeedsNoWritableDataDir(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		dataDir func(t *testing.T) (dataDir, watched string)
	}{
		{"parent is a regular file", func(t *testing.T) (string, string) {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(file, "data"), filepath.Dir(file)
		}},
		{"writable", func(t *testing.T) (string, string) {
			dir := t.TempDir()
			return dir, dir
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			dataDir, watched := tc.dataDir(t)
			e.cfg.Mounts.DataDir = dataDir
			before, err := os.ReadDir(watched)
			if err != nil {
				t.Fatal(err)
			}
			if _, o, err := e.replica().Acquire(ctx, "u", "t1"); err != nil || o != OutcomeCold {
				t.Fatalf("Acquire = %v, %v", o, err)
			}
			if n := e.be.count(e.be.creates, identity.SandboxID("u", "t1")); n != 1 {
				t.Fatalf("%d creates, want 1", n)
			}
			if after, err := os.ReadDir(watched); err != nil || len(after) != len(before) {
				t.Fatalf("the pool wrote to the data dir: %v -> %v (%v)", before, after, err)
			}
		})
	}
}

// A backend that cannot make its host dirs answers 507 (ErrStorage), not 502,
// and gives the capacity it reserved back.
func TestHostDirFailureIsErrStorage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: 1, HardCap: true})
	p := e.replica()
	e.be.createErr = fmt.Errorf("create sandbox x: %w: create dir: %w", backend.ErrHostDirs, syscall.ENOSPC)
	_, _, err := p.Acquire(ctx, "u", "x")
	if !errors.Is(err, ErrStorage) || errors.Is(err, ErrCreate) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("want ErrStorage wrapping ENOSPC, got %v", err)
	}
	e.be.createErr = nil
	if _, _, err := p.Acquire(ctx, "u", "y"); err != nil {
		t.Fatalf("capacity leaked by the failed create: %v", err)
	}
}
