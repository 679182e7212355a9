package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// manifest describes every entry under dir: type, mode, content hash or
// link target. Two trees with equal manifests are byte-identical.
func manifest(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%s %o", info.Mode().Type(), info.Mode().Perm())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d %s", len(b), hex.EncodeToString(sum[:]))
		}
		m[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return m
}

func diffManifests(a, b map[string]string) []string {
	var diff []string
	for k, v := range a {
		if b[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %q vs %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: absent vs %q", k, v))
		}
	}
	slices.Sort(diff)
	return diff
}

// userData is thread's user-data dir on the host.
func (f *fleet) userData(thread string) string {
	return filepath.Join(f.dataDir, "users", "default", "threads", thread, "user-data")
}

// workspaceBuild makes a workspace of every kind of entry a checkpoint
// keeps; workspaceMutation then changes it every way.
var (
	workspaceBuild = strings.Join([]string{
		"cd /mnt/user-data/workspace",
		"mkdir -p src/deep/er empty",
		"printf 'package main\\n' > src/main.go",
		"head -c 200000 /dev/urandom > src/blob.bin",
		": > zero",
		"printf secret > src/deep/er/key; chmod 600 src/deep/er/key",
		"printf '#!/bin/sh\\n' > run.sh; chmod 755 run.sh",
		"ln -s src/main.go link; ln -s /etc/hostname abs; ln -s missing dangling",
		"chmod 700 empty",
		"echo built",
	}, " && ")
	workspaceMutation = strings.Join([]string{
		"cd /mnt/user-data/workspace",
		"printf 'package evil\\n' >> src/main.go",
		"rm -rf src/deep empty zero",
		"chmod 644 run.sh",
		"rm link; ln -s run.sh link",
		"echo new > added; mkdir newdir; echo x > newdir/f",
		"echo mutated",
	}, " && ")
)

// checkRestored fails unless thread's user data ws is want again, and its
// sandbox sees that (workspaceBuild's file, not workspaceMutation's).
func checkRestored(t *testing.T, base, thread, ws string, want map[string]string) {
	t.Helper()
	if d := diffManifests(want, manifest(t, ws)); len(d) > 0 {
		t.Fatalf("restored tree differs from the checkpoint:\n%s", strings.Join(d, "\n"))
	}
	if out := shell(t, base, thread, "cat /mnt/user-data/workspace/src/main.go; ls /mnt/user-data/workspace/added 2>&1 || true"); !strings.Contains(out.Output, "package main") ||
		strings.Contains(out.Output, "evil") || !strings.Contains(out.Output, "No such file") {
		t.Fatalf("the sandbox does not see the restored tree: %q", out.Output)
	}
}

type checkpointInfo struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Size   int64  `json:"size"`
	Files  int    `json:"files"`
	Method string `json:"method"`
}

func createCheckpoint(t *testing.T, base, thread, label string) checkpointInfo {
	t.Helper()
	code, body, _ := call(t, "POST", base+"/threads/"+thread+"/checkpoints", map[string]any{"label": label})
	if code != 201 {
		t.Fatalf("checkpoint %s: %d %s", thread, code, body)
	}
	var ck checkpointInfo
	if err := json.Unmarshal(body, &ck); err != nil {
		t.Fatal(err)
	}
	return ck
}

// A workspace built in the sandbox, checkpointed, changed every way, then
// restored through another replica is byte-identical to the checkpoint
// (content hashes, modes, symlinks); the sandbox sees the restored files.
// A restore under a running command is refused unless forced. The
// checkpoints outlive the gateways. A fork starts from the thread's state
// (or a checkpoint) and the two threads' later writes stay apart.
func TestCheckpointRestoreAndFork(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g1, g2 := f.start(), f.start()
	since := "?since=" + time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	if out := shell(t, g1.URL, "ck", workspaceBuild); !strings.Contains(out.Output, "built") {
		t.Fatalf("build workspace: %+v", out)
	}
	ws := f.userData("ck")
	want := manifest(t, ws)

	ck := createCheckpoint(t, g1.URL, "ck", "before the bad turn")
	if ck.Files < 5 || ck.Size < 200000 || ck.Label != "before the bad turn" {
		t.Fatalf("checkpoint: %+v", ck)
	}

	shell(t, g1.URL, "ck", workspaceMutation)
	if len(diffManifests(want, manifest(t, ws))) == 0 {
		t.Fatal("the mutation changed nothing")
	}

	// Refused under a running command, unless forced.
	code, body, _ := call(t, "POST", g1.URL+"/threads/ck/v1/shell/exec", map[string]any{"command": "sleep 30", "async_mode": true})
	if code != 200 {
		t.Fatalf("async exec: %d %s", code, body)
	}
	code, body, _ = call(t, "POST", g2.URL+"/threads/ck/checkpoints/"+ck.ID+"/restore", nil)
	if code != 409 || errorCode(t, body) != "sandbox_busy" {
		t.Fatalf("restore under a running command: %d %s, want 409 sandbox_busy", code, body)
	}
	code, body, _ = call(t, "POST", g2.URL+"/threads/ck/checkpoints/"+ck.ID+"/restore", map[string]any{"force": true})
	if code != 200 {
		t.Fatalf("forced restore: %d %s", code, body)
	}
	checkRestored(t, g1.URL, "ck", ws, want)
	shell(t, g1.URL, "ck", "pkill sleep || true")

	// Bad ids are refused, unknown ones are 404.
	for id, status := range map[string]int{"..%2F..%2Fetc": 400, "ck-0000000000000-000000": 404, "nope": 400} {
		if code, body, _ := call(t, "POST", g1.URL+"/threads/ck/checkpoints/"+id+"/restore", nil); code != status {
			t.Errorf("restore %s: %d %s, want %d", id, code, body, status)
		}
	}

	// The checkpoints outlive every gateway.
	g1.stop()
	g2.stop()
	g3 := f.start()
	code, body, _ = call(t, "GET", g3.URL+"/threads/ck/checkpoints", nil)
	var list struct {
		Method      string           `json:"method"`
		Checkpoints []checkpointInfo `json:"checkpoints"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Checkpoints) != 1 || list.Checkpoints[0].ID != ck.ID {
		t.Fatalf("list after restart: %d %s", code, body)
	}
	if list.Method != "copy" && list.Method != "reflink" {
		t.Fatalf("method %q", list.Method)
	}

	// Fork of the current state: same files, then the two diverge.
	shell(t, g3.URL, "ck", "echo ck-only-before > /mnt/user-data/workspace/pre")
	code, body, _ = call(t, "POST", g3.URL+"/threads/ck/fork", map[string]any{"thread": "ck-fork"})
	if code != 201 {
		t.Fatalf("fork: %d %s", code, body)
	}
	if d := diffManifests(manifest(t, ws), manifest(t, f.userData("ck-fork"))); len(d) > 0 {
		t.Fatalf("fork differs from its origin:\n%s", strings.Join(d, "\n"))
	}
	shell(t, g3.URL, "ck-fork", "echo fork > /mnt/user-data/workspace/pre; echo f > /mnt/user-data/workspace/fork-only")
	shell(t, g3.URL, "ck", "echo origin-only > /mnt/user-data/workspace/origin-only")
	if out := shell(t, g3.URL, "ck", "cat /mnt/user-data/workspace/pre; ls /mnt/user-data/workspace"); !strings.Contains(out.Output, "ck-only-before") || strings.Contains(out.Output, "fork-only") {
		t.Fatalf("the fork's writes reached its origin: %q", out.Output)
	}
	if out := shell(t, g3.URL, "ck-fork", "ls /mnt/user-data/workspace"); strings.Contains(out.Output, "origin-only") {
		t.Fatalf("the origin's writes reached the fork: %q", out.Output)
	}
	if sandboxOf(t, g3.URL, "ck-fork").SandboxID == sandboxOf(t, g3.URL, "ck").SandboxID {
		t.Fatal("the fork shares its origin's sandbox")
	}

	// Fork of a checkpoint, and never onto a thread that exists.
	code, body, _ = call(t, "POST", g3.URL+"/threads/ck/fork", map[string]any{"thread": "ck-from-cp", "checkpoint": ck.ID})
	if code != 201 {
		t.Fatalf("fork of a checkpoint: %d %s", code, body)
	}
	if d := diffManifests(want, manifest(t, f.userData("ck-from-cp"))); len(d) > 0 {
		t.Fatalf("fork of a checkpoint differs from it:\n%s", strings.Join(d, "\n"))
	}
	for _, onto := range []string{"ck-fork", "ck"} {
		code, body, _ = call(t, "POST", g3.URL+"/threads/ck/fork", map[string]any{"thread": onto})
		if want := map[string]int{"ck-fork": 409, "ck": 400}[onto]; code != want {
			t.Fatalf("fork onto %s: %d %s, want %d", onto, code, body, want)
		}
	}

	// The fleet's event stream kept each step, published by replicas
	// since stopped, for a client that asks from a time on.
	steps := watchProgress(t, g3.URL, "ck", since).until(t, "restored", 10*time.Second)
	if !strings.Contains(typesOfProgress(steps), "checkpointed") {
		t.Fatalf("ck's events %s lack checkpointed before restored", typesOfProgress(steps))
	}
	if got := watchProgress(t, g3.URL, "ck-fork", since).until(t, "forked", 10*time.Second); got[len(got)-1].From != "ck" {
		t.Fatalf("ck-fork's forked event %+v, want from ck", got[len(got)-1])
	}

	// Delete.
	if code, _, _ := call(t, "DELETE", g3.URL+"/threads/ck/checkpoints/"+ck.ID, nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _, _ := call(t, "GET", g3.URL+"/threads/ck/checkpoints/"+ck.ID, nil); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
}

// Checkpoints are the user's own: another user naming the same thread and
// the same checkpoint id lists nothing, restores nothing and forks nothing
// of them; and no sandbox reaches the checkpoint store, which lies outside
// every mount.
func TestCheckpointsAreTheirUsersOwn(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key")+",bob="+sha("bob-key"))
	g := f.start()
	alice, bob := []string{"Authorization", "Bearer alice-key"}, []string{"Authorization", "Bearer bob-key"}
	code, body, _ := call(t, "POST", g.URL+"/threads/t/v1/shell/exec", map[string]any{"command": "echo alice-secret > /mnt/user-data/workspace/s"}, alice...)
	if code != 200 {
		t.Fatalf("alice exec: %d %s", code, body)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/t/checkpoints", nil, alice...)
	var ck checkpointInfo
	if code != 201 || json.Unmarshal(body, &ck) != nil {
		t.Fatalf("alice checkpoint: %d %s", code, body)
	}
	// bob has no thread t: 404, and never alice's list.
	if code, body, _ := call(t, "GET", g.URL+"/threads/t/checkpoints", nil, bob...); code != 404 || strings.Contains(string(body), ck.ID) {
		t.Fatalf("bob lists alice's checkpoints: %d %s", code, body)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/threads/t/checkpoints/" + ck.ID},
		{"POST", "/threads/t/checkpoints/" + ck.ID + "/restore"},
		{"DELETE", "/threads/t/checkpoints/" + ck.ID},
	} {
		if code, body, _ := call(t, r.method, g.URL+r.path, nil, bob...); code != 404 {
			t.Errorf("bob %s %s: %d %s, want 404", r.method, r.path, code, body)
		}
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/t/fork", map[string]any{"thread": "stolen", "checkpoint": ck.ID}, bob...)
	if code != 404 {
		t.Fatalf("bob forks alice's checkpoint: %d %s, want 404", code, body)
	}
	// From inside bob's sandbox, the store's host path does not exist.
	store := filepath.Join(f.dataDir, "checkpoints", "alice", "t", ck.ID, "tree", "workspace", "s")
	if b, err := os.ReadFile(store); err != nil || strings.TrimSpace(string(b)) != "alice-secret" {
		t.Fatalf("alice's checkpoint on the host: %q %v", b, err)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/b/v1/shell/exec", map[string]any{"command": "cat " + store + " 2>&1; ls " + f.dataDir + " 2>&1"}, bob...)
	if code != 200 || strings.Contains(string(body), "alice-secret") || strings.Contains(string(body), "checkpoints\\n") {
		t.Fatalf("bob's sandbox reads the checkpoint store: %d %s", code, body)
	}
	if code, body, _ := call(t, "GET", g.URL+"/threads/t/checkpoints/"+ck.ID, nil, alice...); code != 200 {
		t.Fatalf("alice's checkpoint after bob's attempts: %d %s", code, body)
	}
}
