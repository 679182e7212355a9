//go:build linux

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/testutil"
)

// xfsMount mounts a fresh 512 MiB XFS image made with reflink=1 and
// returns its mount point; Cleanup unmounts it.
func xfsMount(t *testing.T) string {
	t.Helper()
	testutil.Require(t, os.Geteuid() == 0, "root (to mount an XFS image)")
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		mkfs, err = exec.LookPath("/usr/sbin/mkfs.xfs")
	}
	testutil.Require(t, err == nil, "mkfs.xfs (xfsprogs)")
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "xfs.img"), filepath.Join(dir, "mnt")
	f, err := os.Create(img)
	must(t, err)
	must(t, f.Truncate(512<<20))
	must(t, f.Close())
	if out, err := exec.CommandContext(t.Context(), mkfs, "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	must(t, os.Mkdir(mnt, 0o755))
	out, err := exec.CommandContext(t.Context(), "mount", "-o", "loop", img, mnt).CombinedOutput()
	testutil.Require(t, err == nil, fmt.Sprintf("mount -o loop (%v: %s)", err, out))
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// On a filesystem that clones, Detect says so and the whole round trip
// (Create, Restore, CopyTree, CopyOut) clones.
func TestReflinkXFS(t *testing.T) {
	t.Parallel()
	mnt := xfsMount(t)
	m, err := Detect(mnt)
	if err != nil || m != MethodReflink {
		t.Fatalf("Detect on XFS reflink=1: %q, %v", m, err)
	}
	roundTrip(t, mnt, MethodReflink)
}

// A swap that fails halfway (a mount point in the workspace cannot be
// moved: EBUSY) is rolled back: the workspace is as it was, and nothing is
// left beside it.
func TestSwapRollback(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (to bind-mount)")
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	for i := range 20 {
		write(t, filepath.Join(ws, fmt.Sprintf("t%02d", i)), "v1", 0o644)
	}
	write(t, filepath.Join(ws, "k", "m"), "m is a file", 0o644)
	want := manifest(t, ws)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)

	// Top-level entries are moved before the kept dir k is merged, so the
	// failure at k/m comes after moves that must be undone.
	for i := range 20 {
		writeInPlace(t, filepath.Join(ws, fmt.Sprintf("t%02d", i)), "v2")
	}
	must(t, os.Remove(filepath.Join(ws, "k", "m")))
	must(t, os.Mkdir(filepath.Join(ws, "k", "m"), 0o755))
	src := filepath.Join(base, "mounted")
	write(t, filepath.Join(src, "inside"), "inside", 0o644)
	must(t, unix.Mount(src, filepath.Join(ws, "k", "m"), "", unix.MS_BIND, ""))
	mounted := true
	unmount := func() {
		if mounted {
			must(t, unix.Unmount(filepath.Join(ws, "k", "m"), 0))
			mounted = false
		}
	}
	t.Cleanup(unmount)
	before := manifest(t, ws)

	err = s.Restore(ctx, info.ID, ws, nil)
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("Restore over a mount point: %v, want EBUSY", err)
	}
	sameManifest(t, "workspace after a rolled-back swap", before, manifest(t, ws))
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(ws), ".ckpt-*")); len(left) > 0 {
		t.Fatalf("left %v", left)
	}
	unmount()
	must(t, s.Restore(ctx, info.ID, ws, nil))
	sameManifest(t, "workspace restored after unmounting", want, manifest(t, ws))
}
