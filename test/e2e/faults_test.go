package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// Faults the other e2e files do not cover: a sandbox binary that cannot
// start, and a data dir the gateway cannot write (not a directory,
// permission denied, read-only, full). Each breaks a real gateway's
// environment, checks the client gets a clear JSON error and nothing is
// leaked, then repairs it and checks the same thread works.

// A process backend whose sandbox binary cannot start answers 502
// sandbox_start_failed and leaks nothing: no record, no capacity
// reservation (a hard cap of 1 would turn a leaked one into 503 capacity
// on the next try), no lock, no process; once repaired the thread works.
func TestSandboxBinaryThatCannotStartLeaksNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		breakIt func(t *testing.T, script, pids string)
		spawns  bool // the broken binary runs (and records its pids)
	}{
		{"exits at once", func(t *testing.T, script, pids string) {
			writeScript(t, script, "echo $$ >> "+pids+"\nexit 3")
		}, true},
		{"never answers", func(t *testing.T, script, pids string) {
			writeScript(t, script, "echo $$ >> "+pids+"\nsleep 600 &\necho $! >> "+pids+"\nwait")
		}, true},
		{"no longer executable", func(t *testing.T, script, _ string) {
			if err := os.Chmod(script, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"deleted", func(t *testing.T, script, _ string) {
			if err := os.Remove(script); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The plain child: a script cannot be an isolated sandbox's
			// init (that is the gateway binary itself).
			f := newFleet(t, "--max-sandboxes", "1", "--cap-mode", "hard", "--create-timeout", "3s", "--process-isolation", "none")
			dir := t.TempDir()
			script, pids := filepath.Join(dir, "sandbox"), filepath.Join(dir, "pids")
			working := "exec " + f.bin + ` "$@"`
			writeScript(t, script, working) // the gateway checks its binary at start
			g := f.start("--process-binary", script)
			tc.breakIt(t, script, pids)

			var slowest time.Duration
			for try := range 2 {
				began := time.Now()
				code, body, _ := call(t, "POST", g.URL+"/threads/doomed/v1/shell/exec", map[string]any{"command": "true"})
				slowest = max(slowest, time.Since(began))
				if code != 502 || errorCode(t, body) != "sandbox_start_failed" {
					t.Fatalf("try %d: %d %s, want 502 sandbox_start_failed", try, code, body)
				}
				if strings.Contains(string(body), dir) || strings.Contains(string(body), f.dataDir) {
					t.Fatalf("error body names a host path: %s", body)
				}
			}
			assertNothingLeaked(t, f, g, "doomed")
			if tc.spawns {
				assertPidsGone(t, pids)
			}
			if code, _, _ := call(t, "GET", g.URL+"/readyz", nil); code != 200 {
				t.Errorf("readyz after failed creates: %d", code)
			}

			writeScript(t, script, working)
			repaired := time.Now()
			if d := shell(t, g.URL, "doomed", "echo back"); strings.TrimSpace(d.Output) != "back" {
				t.Fatalf("after repair: %+v", d)
			}
			if n := len(f.sandboxes()); n != 1 {
				t.Fatalf("%d sandboxes after repair, want 1", n)
			}
			measured(t, "502 sandbox_start_failed ×2 in ≤ %s, 0 leaked; repaired: 200 in %s, 1 sandbox", round(slowest), round(time.Since(repaired)))
		})
	}
}

// A sandbox binary that is not executable when the gateway starts is a
// configuration error: the gateway refuses to start and names it.
func TestUnexecutableSandboxBinaryRefusedAtStart(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	script := filepath.Join(t.TempDir(), "sandbox")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // generous: a loaded 2-core machine took 20 s to start and refuse
	defer cancel()
	out, err := exec.CommandContext(ctx, f.bin, "--listen", "127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)),
		"--redis-url", f.redis.URL(), "--data-dir", f.dataDir, "--process-binary", script).CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "not an executable file") {
		t.Fatalf("want a refusal naming the binary, got err=%v out=%s", err, out)
	}
}

// The thread's data directory cannot be made: 507 storage_unavailable (507
// insufficient_storage when the disk is full, naming what ran out), a
// message without the host path, nothing leaked; repaired, the thread works.
// The tests run as root, so mode bits would not bind: the faults are a file
// where a directory must be, the immutable attribute (EPERM even for root),
// a read-only tmpfs and a full tmpfs (blocks and inodes).
func TestDataDirErrorsAre507WithoutHostPath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		want string // the error code
		// breakIt breaks the data dir (before the gateway starts) and
		// returns the repair.
		breakIt func(t *testing.T, dataDir string) (repair func())
	}{
		{"not a directory", "storage_unavailable", func(t *testing.T, dataDir string) func() {
			threads := filepath.Join(dataDir, "users", "default", "threads")
			if err := os.MkdirAll(threads, 0o755); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(threads, "stored")
			if err := os.WriteFile(file, []byte("not a dir"), 0o644); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := os.Remove(file); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"permission denied", "storage_unavailable", func(t *testing.T, dataDir string) func() {
			threads := filepath.Join(dataDir, "users", "default", "threads")
			if err := os.MkdirAll(threads, 0o755); err != nil {
				t.Fatal(err)
			}
			immutable(t, threads, true)
			return func() { immutable(t, threads, false) }
		}},
		{"read-only filesystem", "storage_unavailable", func(t *testing.T, dataDir string) func() {
			users := filepath.Join(dataDir, "users")
			mountTmpfs(t, users, "size=1m")
			remount(t, users, true)
			return func() { remount(t, users, false) }
		}},
		{"disk full", "insufficient_storage", func(t *testing.T, dataDir string) func() {
			users := filepath.Join(dataDir, "users")
			mountTmpfs(t, users, "size=256k,nr_inodes=64")
			return fill(t, users)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, "--max-sandboxes", "1", "--cap-mode", "hard")
			repair := tc.breakIt(t, f.dataDir)
			g := f.start()
			var slowest time.Duration
			for try := range 2 {
				began := time.Now()
				code, body, hdr := call(t, "POST", g.URL+"/threads/stored/v1/shell/exec", map[string]any{"command": "true"})
				slowest = max(slowest, time.Since(began))
				if code != 507 || errorCode(t, body) != tc.want {
					t.Fatalf("try %d: %d %s, want 507 %s", try, code, body, tc.want)
				}
				if strings.Contains(string(body), f.dataDir) || strings.Contains(string(body), "/users/") {
					t.Fatalf("error body names a host path: %s", body)
				}
				if hdr.Get("Retry-After") != "" {
					t.Errorf("507 with Retry-After %q: an operator must act, retrying does not help", hdr.Get("Retry-After"))
				}
			}
			assertNothingLeaked(t, f, g, "stored")

			repair()
			repaired := time.Now()
			shell(t, g.URL, "stored", "echo kept > /mnt/user-data/workspace/k.txt")
			host := filepath.Join(f.dataDir, "users", "default", "threads", "stored", "user-data", "workspace", "k.txt")
			if b, err := os.ReadFile(host); err != nil || string(b) != "kept\n" {
				t.Fatalf("after repair, host file %q %v", b, err)
			}
			measured(t, "507 %s ×2 in ≤ %s, no Retry-After, no host path, 0 leaked; repaired: 200 in %s", tc.want, round(slowest), round(time.Since(repaired)))
		})
	}
}

// A disk that fills up under a running sandbox: its writes fail with 507
// naming only the virtual path, reads and the sandbox itself carry on, and
// once space is freed the same sandbox writes again.
func TestDiskFullUnderARunningSandbox(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	users := filepath.Join(f.dataDir, "users")
	mountTmpfs(t, users, "size=512k,nr_inodes=128")
	g := f.start()
	shell(t, g.URL, "tenant", "echo hello > /mnt/user-data/workspace/a.txt")
	before := incarnations(f)
	free := fill(t, users)

	code, body, _ := call(t, "POST", g.URL+"/threads/tenant/v1/file/write",
		map[string]any{"file": "/mnt/user-data/workspace/b.txt", "content": strings.Repeat("x", 8192)})
	if code != 507 || !strings.Contains(string(body), "/mnt/user-data/workspace/b.txt") || strings.Contains(string(body), f.dataDir) {
		t.Fatalf("write on a full disk: %d %s", code, body)
	}
	d := shell(t, g.URL, "tenant", "echo more > /mnt/user-data/workspace/c.txt")
	if d.ExitCode == nil || *d.ExitCode == 0 {
		t.Fatalf("shell write on a full disk succeeded: %+v", d)
	}
	shellExit := *d.ExitCode
	if d := shell(t, g.URL, "tenant", "cat /mnt/user-data/workspace/a.txt"); strings.TrimSpace(d.Output) != "hello" {
		t.Fatalf("read on a full disk: %+v", d)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/newcomer/v1/shell/exec", map[string]any{"command": "true"})
	if code != 507 || errorCode(t, body) != "insufficient_storage" {
		t.Fatalf("new thread on a full disk: %d %s", code, body)
	}

	free()
	code, body, _ = call(t, "POST", g.URL+"/threads/tenant/v1/file/write",
		map[string]any{"file": "/mnt/user-data/workspace/b.txt", "content": "fits"})
	if code != 200 {
		t.Fatalf("write after freeing space: %d %s", code, body)
	}
	if after := incarnations(f); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("the sandbox was replaced: %v -> %v", before, after)
	}
	measured(t, "file write 507 (virtual path only), shell write exit %d, reads 200, new thread 507; freed: writes 200, same incarnation, 0 lost", shellExit)
}

// A full disk under the backend's own state dir ({data_dir}/sandboxes) while
// the thread's directories already exist: a clear JSON 5xx without host
// paths, nothing leaked, and the thread's files intact once space is freed.
//
// ENOSPC anywhere is 507 insufficient_storage; a backend that reports it
// as a failed start (502 sandbox_start_failed) is accepted too.
func TestFullStateDirIsAClearError(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	mountTmpfs(t, f.dataDir, "size=512k,nr_inodes=128")
	// Runs before the unmount (cleanups run last first): once the tmpfs is
	// detached the fleet's own cleanup could no longer find the sandboxes.
	t.Cleanup(func() { destroyAll(f) })
	g := f.start()
	shell(t, g.URL, "again", "echo kept > /mnt/user-data/workspace/k.txt")
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/again/sandbox?destroy=true", nil); code != 204 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	free := fill(t, f.dataDir)

	code, body, _ := call(t, "POST", g.URL+"/threads/again/v1/shell/exec", map[string]any{"command": "true"})
	c := errorCode(t, body)
	if !(code == 507 && c == "insufficient_storage") && !(code == 502 && c == "sandbox_start_failed") {
		t.Fatalf("full state dir: %d %s", code, body)
	}
	if strings.Contains(string(body), f.dataDir) {
		t.Fatalf("error body names a host path: %s", body)
	}
	assertNothingLeaked(t, f, g, "again")

	free()
	if d := shell(t, g.URL, "again", "cat /mnt/user-data/workspace/k.txt"); strings.TrimSpace(d.Output) != "kept" {
		t.Fatalf("after freeing space: %+v", d)
	}
	measured(t, "%d %s, no host path, 0 leaked; freed: 200, files intact", code, c)
}

func destroyAll(f *fleet) {
	for _, info := range f.sandboxes() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = f.backend().Destroy(ctx, info)
		cancel()
	}
}
