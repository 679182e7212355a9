package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"

	"golang.org/x/sys/unix"
)

// roundTrip checkpoints a full tree, changes everything, restores and
// compares every entry; then forks the workspace and the checkpoint. It
// runs on the filesystem holding base (ext4 here, XFS in xfs_test.go).
func roundTrip(t *testing.T, base string, wantMethod Method) {
	ctx := ctxT(t)
	ws := newWorkspace(t, base)
	buildTree(t, ws)
	want := manifest(t, ws)
	wsIno, nestedIno := inode(t, ws), inode(t, filepath.Join(ws, "nested"))
	s := openStore(t, filepath.Join(base, "checkpoints"), Config{})

	holds := 0
	info, err := s.Create(ctx, ws, "before", countingHold(&holds))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	var files int
	var size int64
	for _, n := range want {
		if n.Type == "file" {
			files++
			size += n.Size
		}
	}
	if info.Files != files || info.Size != size || info.Label != "before" || holds != 1 {
		t.Fatalf("info %+v (holds %d), want %d files, %d bytes, label before, one hold", info, holds, files, size)
	}
	if wantMethod != "" && info.Method != string(wantMethod) {
		t.Fatalf("method %q, want %q", info.Method, wantMethod)
	}
	sameManifest(t, "workspace after Create", want, manifest(t, ws)) // Create changes nothing

	mutate(t, ws)
	if err := s.Restore(ctx, info.ID, ws, countingHold(&holds)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	sameManifest(t, "restored workspace", want, manifest(t, ws))
	if holds != 2 {
		t.Fatalf("Restore ran hold %d times", holds-1)
	}
	if inode(t, ws) != wsIno || inode(t, filepath.Join(ws, "nested")) != nestedIno {
		t.Fatal("Restore replaced the workspace dir or a dir present on both sides (bind mounts would go stale)")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(ws), ".ckpt-*")); len(left) > 0 {
		t.Fatalf("Restore left %v", left)
	}

	fork := filepath.Join(base, "fork")
	if err := CopyTree(ctx, ws, fork); err != nil {
		t.Fatalf("CopyTree: %v", err)
	}
	sameManifest(t, "CopyTree", want, manifest(t, fork))
	out := filepath.Join(base, "fork-from-checkpoint")
	if err := s.CopyOut(ctx, info.ID, out); err != nil {
		t.Fatalf("CopyOut: %v", err)
	}
	sameManifest(t, "CopyOut", want, manifest(t, out))
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	roundTrip(t, tempDir(t), "")
}

// Writes into the workspace after a checkpoint (in place, as editors and
// the sandbox's file API do) must not reach it: no checkpoint file is a
// hard link to a live file, before or after a restore.
func TestCheckpointIsolatedFromLiveWrites(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	buildTree(t, ws)
	want := manifest(t, ws)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	scribble := func() {
		writeInPlace(t, filepath.Join(ws, "a.txt"), "overwritten")
		must(t, os.Chmod(filepath.Join(ws, "ro.txt"), 0o644))
		writeInPlace(t, filepath.Join(ws, "ro.txt"), "overwritten")
		f, err := os.OpenFile(filepath.Join(ws, "big.bin"), os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("overwritten"), 0)
		must(t, err)
		must(t, f.Close())
	}
	check := func(what string) {
		out := filepath.Join(base, "out-"+what)
		must(t, s.CopyOut(ctx, info.ID, out))
		sameManifest(t, what, want, manifest(t, out))
	}
	scribble()
	check("after-write")
	must(t, s.Restore(ctx, info.ID, ws, nil))
	scribble()
	check("after-restore-and-write")
}

// A second checkpoint of an unchanged tree shares every file with the
// first; changing one file breaks only that one's sharing.
func TestDedupe(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	buildTree(t, ws)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	var infos []api.Checkpoint
	for i := range 3 {
		if i == 2 {
			writeInPlace(t, filepath.Join(ws, "a.txt"), "changed\n")
		}
		info, err := s.Create(ctx, ws, "", nil)
		must(t, err)
		infos = append(infos, info)
	}
	if infos[0].Linked != 0 || infos[1].Linked != infos[1].Files || infos[2].Linked != infos[2].Files-1 {
		t.Fatalf("linked counts: %+v", infos)
	}
	tree := func(i int, rel string) string { return filepath.Join(s.root, infos[i].ID, treeName, rel) }
	for _, rel := range []string{"a.txt", "big.bin", "empty", "ro.txt", "nested/deep/x/y.txt"} {
		if inode(t, tree(0, rel)) != inode(t, tree(1, rel)) {
			t.Errorf("%s: second checkpoint does not share the first's copy", rel)
		}
		shared := inode(t, tree(1, rel)) == inode(t, tree(2, rel))
		if shared != (rel != "a.txt") {
			t.Errorf("%s: shared with the previous checkpoint = %v", rel, shared)
		}
		if inode(t, tree(2, rel)) == inode(t, filepath.Join(ws, rel)) {
			t.Errorf("%s: checkpoint file is the live file", rel)
		}
	}
	got, err := os.ReadFile(tree(2, "a.txt"))
	if err != nil || string(got) != "changed\n" {
		t.Fatalf("third checkpoint's a.txt = %q, %v", got, err)
	}
}

// A write in the same timestamp tick as the previous checkpoint, same size,
// leaves size and mtime as they were: such a file is never linked.
func TestRacyFileNotLinked(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	f := filepath.Join(ws, "f")
	write(t, f, "first", 0o644)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	_, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	fi, err := os.Stat(f)
	must(t, err)
	writeInPlace(t, f, "other")
	must(t, os.Chtimes(f, fi.ModTime(), fi.ModTime()))
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	got, err := os.ReadFile(filepath.Join(s.root, info.ID, treeName, "f"))
	if err != nil || string(got) != "other" || info.Linked != 0 {
		t.Fatalf("second checkpoint holds %q (%v), linked %d: want the new bytes, nothing linked", got, err, info.Linked)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		cfg     Config
		steps   []time.Duration // clock offset of each Create
		pruneAt time.Duration   // then Prune at this offset (0: no Prune)
		want    []int           // indexes of steps still listed, newest first
	}{
		{"keep 3", Config{Keep: 3}, []time.Duration{0, 1, 2, 3, 4}, 0, []int{4, 3, 2}},
		{"default keep 20", Config{}, make([]time.Duration, 22), 0, []int{21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2}},
		{"unlimited", Config{Keep: -1, MaxAge: -1}, make([]time.Duration, 22), 100 * 24 * time.Hour,
			[]int{21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
		{"max age on create", Config{MaxAge: time.Hour}, []time.Duration{0, 50 * time.Minute, 100 * time.Minute}, 0, []int{2, 1}},
		{"clock steps back", Config{MaxAge: time.Hour}, []time.Duration{0, -5 * time.Hour}, 0, []int{1, 0}},
		{"prune by age", Config{MaxAge: time.Hour}, []time.Duration{0, 50 * time.Minute, 100 * time.Minute}, 150 * time.Minute, []int{2}},
		{"default max age", Config{}, []time.Duration{0, 24 * time.Hour}, 7*24*time.Hour + time.Minute, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, base := ctxT(t), tempDir(t)
			ws := newWorkspace(t, base)
			write(t, filepath.Join(ws, "f"), "x", 0o644)
			var now time.Time
			tc.cfg.Clock = func() time.Time { return now }
			s := openStore(t, filepath.Join(base, "ck"), tc.cfg)
			var ids []string
			for _, off := range tc.steps {
				now = t0.Add(off)
				info, err := s.Create(ctx, ws, "", nil)
				must(t, err)
				ids = append(ids, info.ID)
			}
			if tc.pruneAt != 0 {
				now = t0.Add(tc.pruneAt)
				_, err := s.Prune(ctx)
				must(t, err)
			}
			list, err := s.List(ctx)
			must(t, err)
			var got, want []string
			for _, in := range list {
				got = append(got, in.ID)
			}
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("listed %v, want %v", got, want)
			}
		})
	}
}

// A new Store on the same root (a restarted gateway) sees the same
// checkpoints.
func TestReopen(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	write(t, filepath.Join(ws, "f"), "x", 0o644)
	root := filepath.Join(base, "ck")
	s := openStore(t, root, Config{})
	for _, label := range []string{"one", "two"} {
		_, err := s.Create(ctx, ws, label, nil)
		must(t, err)
	}
	before, err := s.List(ctx)
	must(t, err)
	after, err := openStore(t, root, Config{}).List(ctx)
	must(t, err)
	if len(before) != 2 || len(after) != 2 || before[0].Label != "two" {
		t.Fatalf("before %+v, after %+v", before, after)
	}
	for i := range before {
		if after[i].ID != before[i].ID || after[i].Label != before[i].Label || !after[i].CreatedAt.Equal(before[i].CreatedAt) ||
			after[i].Size != before[i].Size || after[i].Files != before[i].Files || after[i].Method != before[i].Method {
			t.Fatalf("after restart %+v, before %+v", after[i], before[i])
		}
	}
}

// What a crash leaves (a temp dir with a tree but no meta.json, a delete
// halfway) is not listed, and the next Create or Prune removes it; a
// failed hold leaves nothing.
func TestIncompleteIgnoredAndCleaned(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	write(t, filepath.Join(ws, "f"), "x", 0o644)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	_, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	stale := []string{".tmp-ck-1700000000000-abcdef", ".tmp-del-ck-1700000000001-abcdef"}
	for _, d := range stale {
		write(t, filepath.Join(s.root, d, treeName, "sub", "f"), "half", 0o444)
		must(t, os.Chmod(filepath.Join(s.root, d, treeName, "sub"), 0o555))
	}
	// meta.json lost or truncated (power loss): not listed, Get says so,
	// Delete removes it.
	write(t, filepath.Join(s.root, "ck-1700000000002-abcdef", metaName), `{"id":"ck-17`, 0o600)
	must(t, os.MkdirAll(filepath.Join(s.root, "ck-1700000000003-abcdef", treeName), 0o700))
	list, err := s.List(ctx)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("listed %d checkpoints, want 1", len(list))
	}
	if _, err := s.Get(ctx, "ck-1700000000002-abcdef"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a corrupt checkpoint: %v", err)
	}
	must(t, s.Delete(ctx, "ck-1700000000002-abcdef"))
	must(t, s.Delete(ctx, "ck-1700000000003-abcdef"))
	boom := errors.New("freeze failed")
	if _, err := s.Create(ctx, ws, "", func(func() error) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Create with a failing hold: %v", err)
	}
	if _, err := s.Create(ctx, ws, "", func(func() error) error { return nil }); !errors.Is(err, errHold) {
		t.Fatalf("Create with a hold that skips copy: %v", err)
	}
	n, err := s.Prune(ctx)
	must(t, err)
	entries, err := os.ReadDir(s.root)
	must(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if n != 0 || len(names) != 2 || names[0] != lockName || !ValidID(names[1]) {
		t.Fatalf("after Prune (deleted %d): %v, want the lock and one checkpoint", n, names)
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	write(t, filepath.Join(ws, "f"), "x", 0o644)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	if !ValidID(info.ID) {
		t.Fatalf("Create made id %q, which ValidID refuses", info.ID)
	}
	// A real dir where "../victim" would lead: never touched.
	write(t, filepath.Join(base, "victim", treeName, "f"), "victim", 0o644)
	ops := map[string]func(id string) error{
		"Get":     func(id string) error { _, err := s.Get(ctx, id); return err },
		"Delete":  func(id string) error { return s.Delete(ctx, id) },
		"Restore": func(id string) error { return s.Restore(ctx, id, ws, nil) },
		"CopyOut": func(id string) error { return s.CopyOut(ctx, id, filepath.Join(base, "out")) },
	}
	tests := []struct {
		id   string
		want error
	}{
		{"../victim", ErrBadID},
		{"", ErrBadID},
		{"ck-../../victim", ErrBadID},
		{"ck-1700000000000-ABCDEF", ErrBadID},
		{"ck-1700000000000-abcdeg", ErrBadID},
		{"ck-170000000000-abcdef0", ErrBadID},
		{"ck-1700000000000-abcdef/..", ErrBadID},
		{info.ID + "/", ErrBadID},
		{"ck-1700000000000-abcdef", ErrNotFound},
	}
	for _, tc := range tests {
		for name, op := range ops {
			if err := op(tc.id); !errors.Is(err, tc.want) {
				t.Errorf("%s(%q) = %v, want %v", name, tc.id, err, tc.want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(base, "victim", treeName, "f")); err != nil {
		t.Fatalf("victim: %v", err)
	}
	if _, err := s.Create(ctx, ws, "bad\x00label", nil); !errors.Is(err, ErrBadLabel) {
		t.Fatalf("control character in label: %v", err)
	}
	if _, err := s.Create(ctx, ws, strings.Repeat("x", MaxLabelLen+1), nil); !errors.Is(err, ErrBadLabel) {
		t.Fatalf("long label: %v", err)
	}
	must(t, s.Delete(ctx, info.ID))
	if err := s.Delete(ctx, info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
}

// A FIFO in the workspace is recreated, never opened: Create does not wait
// for a writer that never comes. A socket is skipped and counted.
func TestFIFODoesNotHang(t *testing.T) {
	t.Parallel()
	base := tempDir(t)
	ws := newWorkspace(t, base)
	must(t, unix.Mkfifo(filepath.Join(ws, "pipe"), 0o644))
	write(t, filepath.Join(ws, "f"), "x", 0o644)
	ln, err := net.Listen("unix", filepath.Join(ws, "sock"))
	must(t, err)
	defer ln.Close()
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var info api.Checkpoint
	go func() {
		var err error
		info, err = s.Create(ctx, ws, "", nil)
		done <- err
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Create hangs on a FIFO")
	}
	fi, err := os.Lstat(filepath.Join(s.root, info.ID, treeName, "pipe"))
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("checkpoint's pipe: %v, %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(s.root, info.ID, treeName, "sock")); !os.IsNotExist(err) || info.Skipped != 1 || info.Files != 1 {
		t.Fatalf("socket in the checkpoint: %v; info %+v", err, info)
	}
}

// Symlinks are stored as links: what they point at outside the workspace
// is never read into a checkpoint, and a link planted where a directory
// was is never written through by Restore.
func TestSymlinkTargetsNeverFollowed(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	outside := filepath.Join(base, "outside")
	const secret = "TOP-SECRET-7f3a9c"
	write(t, filepath.Join(outside, "secret"), secret, 0o400)
	write(t, filepath.Join(outside, "dir", "secret2"), secret, 0o600)
	ws := newWorkspace(t, base)
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "leak")))
	must(t, os.Symlink(outside, filepath.Join(ws, "leakdir")))
	write(t, filepath.Join(ws, "d", "mine"), "mine", 0o644)
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	if info.Files != 1 {
		t.Fatalf("checkpoint has %d files, want only d/mine", info.Files)
	}
	tree := filepath.Join(s.root, info.ID, treeName)
	for rel, n := range manifest(t, tree) {
		if n.Type == "file" {
			data, err := os.ReadFile(filepath.Join(tree, rel))
			must(t, err)
			if strings.Contains(string(data), secret) {
				t.Fatalf("%s holds the symlink target's content", rel)
			}
		}
	}
	if got, err := os.Readlink(filepath.Join(tree, "leak")); err != nil || got != filepath.Join(outside, "secret") {
		t.Fatalf("leak: %q, %v", got, err)
	}

	// The sandbox swaps d for a link to outside: Restore replaces the link,
	// and writes nothing outside.
	must(t, os.RemoveAll(filepath.Join(ws, "d")))
	must(t, os.Symlink(filepath.Join(outside, "dir"), filepath.Join(ws, "d")))
	outsideBefore := manifest(t, outside)
	must(t, s.Restore(ctx, info.ID, ws, nil))
	sameManifest(t, "outside after Restore", outsideBefore, manifest(t, outside))
	if fi, err := os.Lstat(filepath.Join(ws, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("restored d: %v, %v", fi, err)
	}
}

// errAfter is a context whose Err turns to Canceled after n calls: it stops
// a copy in the middle, deterministically.
type errAfter struct {
	context.Context
	mu sync.Mutex
	n  int
}

func (c *errAfter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// A staging failure (here: cancelled in the middle) leaves the workspace
// exactly as it was, never runs hold, and removes the stage.
func TestStagingFailureLeavesWorkspace(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	for i := range 400 {
		write(t, filepath.Join(ws, "many", string(rune('a'+i%26)), fmt.Sprintf("f%03d", i)), "v1", 0o644)
	}
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	must(t, os.RemoveAll(filepath.Join(ws, "many", "b")))
	write(t, filepath.Join(ws, "x"), "x", 0o644)
	before := manifest(t, ws)
	holds := 0
	err = s.Restore(&errAfter{Context: ctx, n: 3}, info.ID, ws, countingHold(&holds))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Restore with a context ending mid-copy: %v", err)
	}
	sameManifest(t, "workspace after failed staging", before, manifest(t, ws))
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(ws), ".ckpt-*")); holds != 0 || len(left) > 0 {
		t.Fatalf("hold ran %d times, left %v", holds, left)
	}
	// A hold that never swaps leaves it too.
	if err := s.Restore(ctx, info.ID, ws, func(func() error) error { return nil }); !errors.Is(err, errHold) {
		t.Fatalf("Restore with a hold that skips swap: %v", err)
	}
	sameManifest(t, "workspace after skipped swap", before, manifest(t, ws))
}

func TestRefusesSymlinkedPaths(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	write(t, filepath.Join(ws, "f"), "x", 0o644)
	link := filepath.Join(base, "link")
	must(t, os.Symlink(ws, link))
	s := openStore(t, filepath.Join(base, "ck"), Config{})
	info, err := s.Create(ctx, ws, "", nil)
	must(t, err)
	full := filepath.Join(base, "full")
	write(t, filepath.Join(full, "x"), "x", 0o644)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"Create", func() error { _, err := s.Create(ctx, link, "", nil); return err }(), ErrNotDir},
		{"Restore", s.Restore(ctx, info.ID, link, nil), ErrNotDir},
		{"CopyTree src", CopyTree(ctx, link, filepath.Join(base, "dst1")), ErrNotDir},
		{"CopyTree dst link", CopyTree(ctx, ws, link), ErrNotDir},
		{"CopyTree dst full", CopyTree(ctx, ws, full), ErrNotEmpty},
		{"CopyOut dst full", s.CopyOut(ctx, info.ID, full), ErrNotEmpty},
		{"Open on a link", func() error { _, err := Open(link, Config{}); return err }(), ErrNotDir},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	inside := openStore(t, filepath.Join(ws, ".checkpoints"), Config{})
	if _, err := inside.Create(ctx, ws, "", nil); err == nil {
		t.Error("Create with its root inside the workspace")
	}
	if _, err := os.Stat(filepath.Join(base, "dst1")); !os.IsNotExist(err) {
		t.Errorf("failed CopyTree left its destination: %v", err)
	}
	empty := filepath.Join(base, "empty")
	must(t, os.Mkdir(empty, 0o700))
	must(t, CopyTree(ctx, ws, empty))
	sameManifest(t, "CopyTree into an empty dir", manifest(t, ws), manifest(t, empty))
}

// Creates from two Stores on one root (two requests, or two processes)
// are ordered by the root's lock.
func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	ctx, base := ctxT(t), tempDir(t)
	ws := newWorkspace(t, base)
	buildTree(t, ws)
	root := filepath.Join(base, "ck")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := Open(root, Config{})
			if err == nil {
				_, err = s.Create(ctx, ws, "", nil)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	list, err := openStore(t, root, Config{}).List(ctx)
	must(t, err)
	if len(list) != 4 || list[0].Linked != list[0].Files {
		t.Fatalf("listed %+v", list)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{Method: MethodCopy, Keep: -1, MaxAge: -1}, true},
		{Config{Method: MethodReflink}, true},
		{Config{Method: "rsync"}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
	if _, err := Open(tempDir(t), Config{Method: "rsync"}); err == nil {
		t.Error("Open took an invalid method")
	}
}
