package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdoptPrewarmDirs: the pre-started sandbox's user data becomes the
// thread's when the thread has none (no dir, or only empty dirs); a thread
// with a file keeps it and nothing moves.
func TestAdoptPrewarmDirs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, threadDir string)
		wantErr error
	}{
		{name: "no thread dir"},
		{name: "only empty dirs", prepare: func(t *testing.T, dir string) {
			must(t, os.MkdirAll(filepath.Join(dir, "workspace", "sub"), 0o700))
			must(t, os.MkdirAll(filepath.Join(dir, "outputs"), 0o700))
		}},
		{name: "a file deep down", prepare: func(t *testing.T, dir string) {
			must(t, os.MkdirAll(filepath.Join(dir, "workspace", "sub"), 0o700))
			must(t, os.WriteFile(filepath.Join(dir, "workspace", "sub", "keep"), []byte("x"), 0o600))
		}, wantErr: ErrThreadHasData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			pw := "00112233aabbccdd"
			must(t, os.MkdirAll(filepath.Join(PrewarmDir(data, pw), "workspace"), 0o700))
			must(t, os.WriteFile(filepath.Join(PrewarmDir(data, pw), "workspace", "marker"), []byte("pw"), 0o600))
			dst := ThreadDir(data, "u", "t")
			if tc.prepare != nil {
				tc.prepare(t, dst)
			}
			unused, err := ThreadDirUnused(data, "u", "t")
			if err != nil || unused != (tc.wantErr == nil) {
				t.Fatalf("ThreadDirUnused = %v %v", unused, err)
			}
			err = AdoptPrewarmDirs(data, pw, "u", "t")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("AdoptPrewarmDirs = %v, want %v", err, tc.wantErr)
			}
			_, moved := os.Stat(filepath.Join(dst, "workspace", "marker"))
			if (moved == nil) != (tc.wantErr == nil) {
				t.Fatalf("moved = %v, want %v", moved == nil, tc.wantErr == nil)
			}
			if tc.wantErr != nil {
				if b, err := os.ReadFile(filepath.Join(dst, "workspace", "sub", "keep")); err != nil || string(b) != "x" {
					t.Fatalf("the thread's file: %q %v", b, err)
				}
				return
			}
			if _, err := os.Stat(filepath.Dir(PrewarmDir(data, pw))); !os.IsNotExist(err) {
				t.Fatalf("the prewarm dir is left: %v", err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A failed move says why without the host paths (it is logged).
func TestAdoptPrewarmDirsErrorHasNoHostPath(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	err := AdoptPrewarmDirs(data, "00112233aabbccdd", "u", "t") // nothing to move
	if err == nil || !errors.Is(err, ErrHostDirs) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrHostDirs wrapping ENOENT", err)
	}
	if strings.Contains(err.Error(), data) {
		t.Fatalf("error shows a host path: %v", err)
	}
}
