package backend

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A data dir whose parent is a regular file: every mkdir under it fails with
// ENOTDIR, even for root.
func unmakeableDir(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(file, "data")
}

// ThreadMounts only computes paths: backends without host binds (kubernetes,
// remote) must get their spec even when the gateway's disk is unusable.
func TestThreadMountsCreatesNothing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, dataDir := range []string{filepath.Join(root, "data"), unmakeableDir(t)} {
		mounts, err := ThreadMounts(MountConfig{DataDir: dataDir, SkillsDir: filepath.Join(root, "skills"),
			ACPWorkspace: filepath.Join(root, "acp")}, "alice", "t1")
		if err != nil {
			t.Fatalf("%s: %v", dataDir, err)
		}
		if len(mounts) != 5 || mounts[0].HostPath != filepath.Join(dataDir, "users", "alice", "threads", "t1", "user-data", "workspace") {
			t.Fatalf("%s: mounts %+v", dataDir, mounts)
		}
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Fatalf("ThreadMounts created %v (%v)", entries, err)
	}
}

func TestEnsureHostDirs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	extra := Mount{HostPath: filepath.Join(root, "operator-extra"), ContainerPath: "/mnt/shared", ReadOnly: true}
	mounts, err := ThreadMounts(MountConfig{DataDir: filepath.Join(root, "data"), SkillsDir: filepath.Join(root, "skills"),
		Extra: []Mount{extra}}, "alice", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureHostDirs(mounts); err != nil {
		t.Fatalf("EnsureHostDirs: %v", err)
	}
	for i, m := range mounts[:4] { // workspace, uploads, outputs: the thread's; skills: shared, read-only
		want := os.FileMode(0o700)
		if i == 3 {
			want = 0o755
		}
		if st, err := os.Stat(m.HostPath); err != nil || !st.IsDir() || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want a dir %o", m.ContainerPath, st, err, want)
		}
	}
	// Configured extra mounts are the operator's: never made on their behalf.
	if _, err := os.Stat(extra.HostPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("extra mount's host dir: %v, want it not created", err)
	}
	if err := EnsureHostDirs(mounts); err != nil {
		t.Errorf("EnsureHostDirs on existing dirs: %v", err)
	}
}

// A failed mkdir carries ErrHostDirs (the pool's 507) and its cause.
func TestEnsureHostDirsFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mc   func(bad string) MountConfig
	}{
		{"thread dir", func(bad string) MountConfig { return MountConfig{DataDir: bad} }},
		{"skills dir", func(bad string) MountConfig {
			return MountConfig{DataDir: t.TempDir(), SkillsDir: filepath.Join(bad, "skills")}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mounts, err := ThreadMounts(tc.mc(unmakeableDir(t)), "alice", "t1")
			if err != nil {
				t.Fatal(err)
			}
			err = EnsureHostDirs(mounts)
			if !errors.Is(err, ErrHostDirs) || !errors.Is(err, syscall.ENOTDIR) {
				t.Fatalf("EnsureHostDirs = %v, want ErrHostDirs wrapping ENOTDIR", err)
			}
		})
	}
}

// SandboxOwned: only the thread's writable dirs are handed to a sandbox uid.
func TestSandboxOwned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    Mount
		want bool
	}{
		{Mount{ContainerPath: VirtualWorkspace}, true},
		{Mount{ContainerPath: VirtualOutputs}, true},
		{Mount{ContainerPath: VirtualUserData + "/extra"}, true},
		{Mount{ContainerPath: VirtualWorkspace, ReadOnly: true}, false},
		{Mount{ContainerPath: VirtualSkills, ReadOnly: true}, false},
		{Mount{ContainerPath: "/mnt/shared"}, false},
		{Mount{ContainerPath: VirtualUserData}, false},
		{Mount{ContainerPath: VirtualUserData + "-other/x"}, false},
	} {
		if got := SandboxOwned(c.m); got != c.want {
			t.Errorf("%+v: %v, want %v", c.m, got, c.want)
		}
	}
}
