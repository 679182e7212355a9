package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// LoopFS mounts a fresh ext4 filesystem of size bytes (a sparse image, a
// loop device, no reserved blocks) on a temp dir and returns the mount
// point; it is unmounted and its image removed at cleanup. It needs root,
// mkfs.ext4 and loop devices, and fails the test (never skips) without
// them: disk limits are tested on a real, small, fillable filesystem.
func LoopFS(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("loop fs image: %v", err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", img)
	run("mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "umount", mnt).CombinedOutput(); err != nil {
			// Something (a sandbox being torn down) still holds it: detach
			// lazily, the loop device goes when the last user does.
			t.Logf("umount %s: %v %s; detaching lazily", mnt, err, out)
			_ = exec.CommandContext(ctx, "umount", "-l", mnt).Run()
		}
	})
	return mnt
}

// FSFree is the bytes an unprivileged writer may still use on path's
// filesystem, and its free inodes.
func FSFree(t testing.TB, path string) (bytes int64, inodes uint64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize), st.Ffree
}

// MiB formats a byte count for messages.
func MiB(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }
