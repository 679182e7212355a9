package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// assertNothingLeaked checks that a failed acquire of thread left nothing
// behind: no record, no capacity reservation, no provisioning lock, no
// sandbox process and no state file.
func assertNothingLeaked(t *testing.T, f *fleet, g *gateway, thread string) {
	t.Helper()
	sid := identity.SandboxID("default", thread)
	if code, body, _ := call(t, "GET", g.URL+"/threads/"+thread+"/sandbox", nil); code != 404 {
		t.Errorf("record left for %s: %d %s", thread, code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := leftKeys(ctx, f, thread); err != nil || n != 0 {
		t.Errorf("record, lock or capacity reservation left for %s: %d (%v)", thread, n, err)
	}
	for _, s := range f.sandboxes() {
		if s.SandboxID == sid {
			t.Errorf("sandbox process left for %s: %+v", thread, s)
		}
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, "sandboxes", "process", sid+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left for %s: %v", thread, err)
	}
}

// leftKeys counts what a failed acquire of thread may leave in Redis: its
// record, its provisioning lock and capacity reservations.
func leftKeys(ctx context.Context, f *fleet, thread string) (int64, error) {
	sid := identity.SandboxID("default", thread)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	keys := statedb.NewKeys("", 0)
	n, err := rdb.Exists(ctx, keys.Sandbox(sid), keys.Lock(sid)).Result()
	if err != nil {
		return 0, fmt.Errorf("exists: %w", err)
	}
	reserved, err := rdb.ZCard(ctx, keys.Creating()).Result()
	if err != nil {
		return 0, fmt.Errorf("zcard: %w", err)
	}
	return n + reserved, nil
}

// measured logs one measured outcome of a fault test. The reliability
// report (go run ./test/soak -report) runs these tests with -json and
// copies the lines into its table, so keep them short and numeric.
func measured(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("measured: "+format, args...)
}

// round keeps a duration readable in a measured line.
func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// waitForIn is waitFor with a bound of the caller's choosing.
func waitForIn(t *testing.T, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %s", bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertPidsGone checks that every pid listed in file (one a line, written
// by a test sandbox script) has exited: a failed create killed its tree.
func assertPidsGone(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pids := strings.Fields(string(data))
	if len(pids) == 0 {
		t.Fatal("the sandbox script never ran")
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range pids {
		pid, _ := strconv.Atoi(s)
		for running(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d of the failed create still runs", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// writeScript atomically replaces path with an executable shell script, so
// a gateway that runs it never sees half a file.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// requireOrSkip skips the test for a reason this machine gives, or fails it
// under CI=true, where every check must run (CI runs as root on a host that
// can mount and set attributes).
func requireOrSkip(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (required under CI=true)", args...)
	}
	t.Skipf(format, args...)
}

// mountTmpfs mounts a tmpfs with opts (e.g. "size=512k,nr_inodes=64") on
// dir, detached at cleanup. Where this machine does not let the tests mount
// (an unprivileged container) it skips, or fails under CI=true: the
// disk-full and read-only cases need a real filesystem limit, and there is
// no honest stand-in for one.
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		requireOrSkip(t, "cannot mount a tmpfs here (%v): the disk-full and read-only cases need one", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// remount switches the tmpfs on dir between read-only and read-write.
func remount(t *testing.T, dir string, readOnly bool) {
	t.Helper()
	flags := uintptr(syscall.MS_REMOUNT)
	if readOnly {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, ""); err != nil {
		t.Fatalf("remount %s (read-only %v): %v", dir, readOnly, err)
	}
}

// fill uses up dir's filesystem, blocks first, then inodes, and returns a
// func that frees it again.
func fill(t *testing.T, dir string) (free func()) {
	t.Helper()
	spill := filepath.Join(dir, ".fill")
	if err := os.MkdirAll(spill, 0o755); err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	big, err := os.Create(filepath.Join(spill, "blocks"))
	if err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err = big.Write(chunk); err != nil {
			break
		}
	}
	big.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s ended with %v, not ENOSPC", dir, err)
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(spill, strconv.Itoa(i)))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s inodes ended with %v, not ENOSPC", dir, err)
			}
			break
		}
		f.Close()
	}
	return func() {
		if err := os.RemoveAll(spill); err != nil {
			t.Fatalf("free %s: %v", dir, err)
		}
	}
}

// immutable sets or clears the immutable attribute on path: the one
// permission that binds root too (the tests run as root, so mode bits do not).
func immutable(t *testing.T, path string, on bool) {
	t.Helper()
	if _, err := exec.LookPath("chattr"); err != nil {
		requireOrSkip(t, "chattr (e2fsprogs) not installed: the permission-denied case needs it")
	}
	flag := "-i"
	if on {
		flag = "+i"
	}
	if out, err := exec.Command("chattr", flag, path).CombinedOutput(); err != nil {
		if on {
			requireOrSkip(t, "this filesystem refuses the immutable attribute: %v %s", err, out)
		}
		t.Fatalf("chattr %s %s: %v %s", flag, path, err, out)
	}
	if on {
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
	}
}
