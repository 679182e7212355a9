package e2e

import (
	"encoding/json"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// Disk is budgeted, not hoped for (issue 33, findings 5 and 10): each test
// runs a gateway whose data_dir is a small ext4 filesystem of its own, so
// a copy that costs more than its source, or one nothing bounds, fills it
// for real.

// diskSize is the loop filesystem's size: a 200 MB sparse file, 21 names of
// a 5 MB file and a handful of checkpoints do not fit when copied naively.
const diskSize = 128 << 20

// diskFleet is a fleet whose data_dir is on a fresh loop-mounted ext4
// filesystem (returned: its mount point); env is given to every replica
// (SANDGATE_* settings: the old code ignores the ones it lacks).
func diskFleet(t *testing.T, env ...string) (*fleet, string) {
	t.Helper()
	mnt := testutil.LoopFS(t, diskSize) // first: unmounted after the fleet's sandboxes are gone
	f := newFleet(t)
	f.dataDir = filepath.Join(mnt, "data")
	if err := os.Mkdir(f.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f.env = env
	return f, mnt
}

// diskUsed is what the files below dirs allocate, each hard-linked file
// counted once (du).
func diskUsed(t *testing.T, dirs ...string) int64 {
	t.Helper()
	seen := map[[2]uint64]bool{}
	var n int64
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) != nil {
				return nil
			}
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if !seen[k] {
				seen[k] = true
				n += st.Blocks * 512
			}
			return nil
		})
	}
	return n
}

// leftovers are the entries of a thread's checkpoint dir that are not
// complete checkpoints: a half-made copy a refused or failed one left.
func leftovers(t *testing.T, f *fleet, thread string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(f.dataDir, "checkpoints", "default", thread))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != ".lock" && !strings.HasPrefix(e.Name(), "ck-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func checkpointIDs(t *testing.T, base, thread string) []string {
	t.Helper()
	code, body, _ := call(t, "GET", base+"/threads/"+thread+"/checkpoints", nil)
	var list struct{ Checkpoints []checkpointInfo }
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list checkpoints of %s: %d %s", thread, code, body)
	}
	var ids []string
	for _, c := range list.Checkpoints {
		ids = append(ids, c.ID)
	}
	return ids
}

// A 200 MB sparse file checkpointed (and forked) on a 128 MB filesystem
// costs next to nothing: the copies keep the hole, and the tenant's and
// everyone's later writes still work.
func TestDiskSparseWorkspaceCheckpoint(t *testing.T) {
	t.Parallel()
	f, _ := diskFleet(t)
	g := f.start()
	if out := shell(t, g.URL, "sparse", "truncate -s 200M /mnt/user-data/workspace/sparse && echo -n made"); out.Output != "made" {
		t.Fatalf("make the sparse file: %+v", out)
	}
	before, _ := testutil.FSFree(t, f.dataDir)
	code, body, _ := call(t, "POST", g.URL+"/threads/sparse/checkpoints", map[string]any{"label": "sparse"})
	if code != 201 {
		t.Fatalf("checkpoint of a 200 MB sparse file on a 128 MB filesystem: %d %s, want 201", code, body)
	}
	var ck checkpointInfo
	if err := json.Unmarshal(body, &ck); err != nil {
		t.Fatal(err)
	}
	after, _ := testutil.FSFree(t, f.dataDir)
	if cost := before - after; cost > 1<<20 {
		t.Fatalf("the checkpoint of a sparse file took %s of disk, want ~0", testutil.MiB(cost))
	}
	st := testutil.Stat(t, filepath.Join(f.dataDir, "checkpoints", "default", "sparse", ck.ID, "tree", "workspace", "sparse"))
	if st.Size != 200<<20 || st.Blocks*512 > 1<<20 {
		t.Fatalf("checkpointed copy: size %d, %d bytes allocated; want 200 MiB with a hole", st.Size, st.Blocks*512)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/sparse/fork", map[string]any{"thread": "sparse-fork"})
	if code != 201 {
		t.Fatalf("fork of the sparse workspace: %d %s", code, body)
	}
	if free, _ := testutil.FSFree(t, f.dataDir); before-free > 2<<20 {
		t.Fatalf("checkpoint and fork took %s, want ~0", testutil.MiB(before-free))
	}
	for _, thread := range []string{"sparse", "sparse-fork", "other"} {
		out := shell(t, g.URL, thread, "head -c 20M /dev/urandom > /mnt/user-data/workspace/after && echo -n wrote")
		if out.Output != "wrote" {
			t.Fatalf("a 20 MB write in %s after the checkpoint: %+v", thread, out)
		}
	}
}

// A 5 MB file with 20 more hard links checkpoints as one 5 MB copy whose
// 21 names share it, not 21 copies; a restore keeps the links.
func TestDiskHardLinkedWorkspaceCheckpoint(t *testing.T) {
	t.Parallel()
	f, _ := diskFleet(t)
	g := f.start()
	build := "cd /mnt/user-data/workspace && head -c 5M /dev/urandom > f0 && for i in $(seq 1 20); do ln f0 l$i; done && echo -n made"
	if out := shell(t, g.URL, "links", build); out.Output != "made" {
		t.Fatalf("build: %+v", out)
	}
	before, _ := testutil.FSFree(t, f.dataDir)
	code, body, _ := call(t, "POST", g.URL+"/threads/links/checkpoints", nil)
	after, _ := testutil.FSFree(t, f.dataDir)
	if code != 201 {
		t.Fatalf("checkpoint of 21 names of a 5 MB file: %d %s, want 201", code, body)
	}
	if cost := before - after; cost > 6<<20 {
		t.Fatalf("the checkpoint took %s of disk, want ~5 MiB (one copy of the linked file)", testutil.MiB(cost))
	}
	var ck checkpointInfo
	if err := json.Unmarshal(body, &ck); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(f.dataDir, "checkpoints", "default", "links", ck.ID, "tree", "workspace")
	first := testutil.Stat(t, filepath.Join(tree, "f0"))
	if last := testutil.Stat(t, filepath.Join(tree, "l20")); last.Ino != first.Ino || first.Nlink != 21 {
		t.Fatalf("checkpoint: f0 inode %d (%d links), l20 inode %d; want one inode of 21 links", first.Ino, first.Nlink, last.Ino)
	}
	shell(t, g.URL, "links", "rm /mnt/user-data/workspace/l*")
	if code, body, _ := call(t, "POST", g.URL+"/threads/links/checkpoints/"+ck.ID+"/restore", map[string]any{"force": true}); code != 200 {
		t.Fatalf("restore: %d %s", code, body)
	}
	ws := filepath.Join(f.userData("links"), "workspace")
	if a, b := testutil.Stat(t, filepath.Join(ws, "f0")), testutil.Stat(t, filepath.Join(ws, "l7")); a.Ino != b.Ino {
		t.Fatalf("restored f0 and l7 are different files (inodes %d, %d)", a.Ino, b.Ino)
	}
}

// Checkpoints count against the user's byte budget: past it a checkpoint is
// refused before it copies (507 insufficient_storage naming
// checkpoint_user_bytes), leaves nothing behind, and the user's data stays
// within the budget.
func TestDiskCheckpointsPastUserBudget(t *testing.T) {
	t.Parallel()
	const budget = 24 << 20
	f, _ := diskFleet(t, "SANDGATE_CHECKPOINT_USER_BYTES=24m")
	g := f.start()
	var made []string
	refused := false
	for i := 0; i < 10 && !refused; i++ {
		if out := shell(t, g.URL, "budget", "head -c 6M /dev/urandom > /mnt/user-data/workspace/blob && echo -n ok"); out.Output != "ok" {
			t.Fatalf("write round %d: %+v", i, out)
		}
		code, body, _ := call(t, "POST", g.URL+"/threads/budget/checkpoints", nil)
		switch {
		case code == 201:
			var ck checkpointInfo
			if err := json.Unmarshal(body, &ck); err != nil {
				t.Fatal(err)
			}
			made = append(made, ck.ID)
		case code == 507 && errorCode(t, body) == "insufficient_storage" && strings.Contains(string(body), "checkpoint_user_bytes"):
			refused = true
		default:
			t.Fatalf("checkpoint %d: %d %s; want 201, or 507 insufficient_storage naming checkpoint_user_bytes", i, code, body)
		}
	}
	used := diskUsed(t, filepath.Join(f.dataDir, "checkpoints", "default"), filepath.Join(f.dataDir, "users", "default"))
	if !refused {
		t.Fatalf("%d checkpoints of a 6 MB workspace passed a 24 MB budget: the user's data takes %s", len(made), testutil.MiB(used))
	}
	if len(made) == 0 {
		t.Fatal("the first checkpoint, well within the budget, was refused")
	}
	if used > budget {
		t.Fatalf("the user's checkpoints and data take %s, over the %s budget", testutil.MiB(used), testutil.MiB(budget))
	}
	if ids := checkpointIDs(t, g.URL, "budget"); len(ids) != len(made) {
		t.Fatalf("checkpoints after the refusal: %v, want %v", ids, made)
	}
	if l := leftovers(t, f, "budget"); len(l) > 0 {
		t.Fatalf("the refused checkpoint left %v", l)
	}
}

// A fork refused by create_rate leaves no copy behind and does not keep the
// thread's name: once creates are allowed, a fork onto the same name works.
// bob is no admin (admins are exempt from create_rate).
func TestDiskForkRefusedByCreateRate(t *testing.T) {
	t.Parallel()
	f, _ := diskFleet(t)
	f.extra = []string{"--auth-api-keys", "bob=" + sha("bob-key") + ":threads"}
	limited := f.start("--create-rate", "1/1h")
	unlimited := f.start("--create-rate", "0")
	bob := []string{"Authorization", "Bearer bob-key"}
	code, body, _ := call(t, "POST", limited.URL+"/threads/origin/v1/shell/exec",
		map[string]any{"command": "head -c 8M /dev/urandom > /mnt/user-data/workspace/blob && echo -n ok"}, bob...)
	if code != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("build: %d %s", code, body)
	}
	before, _ := testutil.FSFree(t, f.dataDir)
	code, body, _ = call(t, "POST", limited.URL+"/threads/origin/fork", map[string]any{"thread": "forked"}, bob...)
	if code != 429 || errorCode(t, body) != "rate_limited" {
		t.Fatalf("fork past create_rate 1/1h: %d %s, want 429 rate_limited", code, body)
	}
	forked := filepath.Join(f.dataDir, "users", "bob", "threads", "forked")
	if _, err := os.Lstat(forked); !os.IsNotExist(err) {
		t.Fatalf("the refused fork left %s (%v, %s of data)", forked, err, testutil.MiB(diskUsed(t, forked)))
	}
	if after, _ := testutil.FSFree(t, f.dataDir); before-after > 1<<20 {
		t.Fatalf("the refused fork took %s of disk", testutil.MiB(before-after))
	}
	code, body, _ = call(t, "POST", unlimited.URL+"/threads/origin/fork", map[string]any{"thread": "forked"}, bob...)
	if code != 201 {
		t.Fatalf("fork onto the name a refused fork tried: %d %s, want 201", code, body)
	}
}

// An upload cut off by a destroy leaves its temporary file in the thread's
// data; the sandbox's next start sweeps it.
func TestDiskUploadCutByDestroyIsSwept(t *testing.T) {
	t.Parallel()
	f, _ := diskFleet(t)
	g := f.start()
	const thread = "cut-upload"
	shell(t, g.URL, thread, "true")
	pr, pw := io.Pipe()
	defer pw.Close()
	mw := multipart.NewWriter(pw)
	go func() {
		if err := mw.WriteField("path", "/mnt/user-data/workspace/big.bin"); err != nil {
			pw.CloseWithError(err)
			return
		}
		part, err := mw.CreateFormFile("file", "big.bin")
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		chunk := make([]byte, 64<<10)
		for i := 0; i < 16; i++ {
			if _, err := part.Write(chunk); err != nil {
				return
			}
		}
		// Then the body stalls: the upload is in progress when the destroy comes.
	}()
	req, _ := http.NewRequest("POST", g.URL+"/threads/"+thread+"/v1/file/upload", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	go func() {
		if resp, err := g.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	ws := filepath.Join(f.userData(thread), "workspace")
	temps := func() []string {
		m, _ := filepath.Glob(filepath.Join(ws, ".upload.sandgate-tmp-*"))
		return m
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(temps()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the upload's temporary file never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // some bytes in it
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/"+thread+"/sandbox?destroy=true", nil); code/100 != 2 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	cut := temps()
	if len(cut) == 0 {
		t.Log("the destroy left no temporary file this time (the server cleaned up itself)")
	}
	if out := shell(t, g.URL, thread, "echo -n alive"); out.Output != "alive" {
		t.Fatalf("after the destroy: %+v", out)
	}
	deadline = time.Now().Add(15 * time.Second)
	for len(temps()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off upload's temporary files survive the sandbox's next start: %v", temps())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A checkpoint that runs the data filesystem out of space answers 507
// insufficient_storage, not 502 sandbox_connection_lost, and leaves nothing
// behind; with space again checkpoints work. The budget and the free-space
// floor are off, so the copy really meets ENOSPC.
func TestDiskCheckpointENOSPCIs507(t *testing.T) {
	t.Parallel()
	f, mnt := diskFleet(t, "SANDGATE_CHECKPOINT_USER_BYTES=0", "SANDGATE_CHECKPOINT_FREE_FLOOR=0")
	g := f.start()
	if out := shell(t, g.URL, "full", "head -c 30M /dev/urandom > /mnt/user-data/workspace/blob && echo -n ok"); out.Output != "ok" {
		t.Fatalf("build: %+v", out)
	}
	filler := filepath.Join(mnt, "filler")
	free, _ := testutil.FSFree(t, mnt)
	fh, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fallocate(int(fh.Fd()), 0, 0, free-10<<20); err != nil {
		t.Fatalf("fill the filesystem: %v", err)
	}
	fh.Close()
	code, body, _ := call(t, "POST", g.URL+"/threads/full/checkpoints", nil)
	if code != 507 || errorCode(t, body) != "insufficient_storage" || !strings.Contains(string(body), "ENOSPC") {
		t.Fatalf("checkpoint of 30 MB with 10 MB free: %d %s, want 507 insufficient_storage naming ENOSPC", code, body)
	}
	if l := leftovers(t, f, "full"); len(l) > 0 {
		t.Fatalf("the failed checkpoint left %v", l)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := call(t, "POST", g.URL+"/threads/full/checkpoints", nil); code != 201 {
		t.Fatalf("checkpoint with space again: %d %s", code, body)
	}
}

// Threads with data are bounded per user: past checkpoint_user_threads a
// new thread gets no sandbox (and so no data dir), nor a fork onto a new
// thread; the user's existing threads go on.
func TestDiskThreadsPerUserBounded(t *testing.T) {
	t.Parallel()
	f, _ := diskFleet(t, "SANDGATE_CHECKPOINT_USER_THREADS=2")
	g := f.start()
	shell(t, g.URL, "t1", "true")
	shell(t, g.URL, "t2", "true")
	code, body, _ := call(t, "POST", g.URL+"/threads/t3/v1/shell/exec", map[string]any{"command": "true"})
	if code != 507 || errorCode(t, body) != "insufficient_storage" || !strings.Contains(string(body), "checkpoint_user_threads") {
		t.Fatalf("a third thread past checkpoint_user_threads=2: %d %s, want 507 insufficient_storage naming it", code, body)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/t1/fork", map[string]any{"thread": "t4"})
	if code != 507 || !strings.Contains(string(body), "checkpoint_user_threads") {
		t.Fatalf("a fork onto a third thread: %d %s, want 507 naming checkpoint_user_threads", code, body)
	}
	for _, thread := range []string{"t3", "t4"} {
		if _, err := os.Lstat(filepath.Dir(f.userData(thread))); !os.IsNotExist(err) {
			t.Errorf("refused thread %s has a data dir (%v)", thread, err)
		}
	}
	if out := shell(t, g.URL, "t1", "echo -n alive"); out.Output != "alive" {
		t.Fatalf("an existing thread after the refusals: %+v", out)
	}
}
