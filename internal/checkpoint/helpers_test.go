package checkpoint

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// node is one manifest entry: everything Restore promises to bring back.
type node struct {
	Type     string
	Mode     fs.FileMode
	SHA256   string
	Target   string
	Size     int64
	MtimeNs  int64
	UID, GID uint32
}

// manifest describes dir's tree ("." is dir itself), never following links.
func manifest(t *testing.T, dir string) map[string]node {
	t.Helper()
	m := map[string]node{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		n := node{Mode: fi.Mode(), MtimeNs: st.Mtim.Nano(), UID: st.Uid, GID: st.Gid}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			n.Type = "link"
			n.Target, err = os.Readlink(path)
		case fi.IsDir():
			n.Type = "dir"
		case fi.Mode()&fs.ModeNamedPipe != 0:
			n.Type = "fifo"
		case fi.Mode().IsRegular():
			n.Type, n.Size = "file", fi.Size()
			data, rerr := os.ReadFile(path)
			if rerr != nil {
				return rerr
			}
			sum := sha256.Sum256(data)
			n.SHA256 = hex.EncodeToString(sum[:])
		default:
			n.Type = "other"
		}
		m[rel] = n
		return err
	})
	if err != nil {
		t.Fatalf("manifest %s: %v", dir, err)
	}
	return m
}

// sameManifest fails t with every difference between want and got.
func sameManifest(t *testing.T, what string, want, got map[string]node) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %s", p))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: want %+v, got %+v", p, w, g))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra %s", p))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%s: %d differences:\n%s", what, len(diffs), strings.Join(diffs, "\n"))
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func write(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// writeInPlace rewrites path's bytes through the same inode (O_TRUNC, no
// rename), as a sandbox editing a file does.
func writeInPlace(t *testing.T, path, data string) {
	t.Helper()
	before := inode(t, path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) != before {
		t.Fatal("in-place write changed the inode")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randomBytes(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// buildTree fills ws with every kind of entry the engine handles: nested
// and empty dirs, modes 0600/0755/0444, a read-only dir, an empty and a
// large-ish file, relative, dangling and absolute symlinks and a link to a
// dir, a FIFO, and (as root) foreign owners.
func buildTree(t *testing.T, ws string) {
	t.Helper()
	write(t, filepath.Join(ws, "a.txt"), "hello\n", 0o644)
	write(t, filepath.Join(ws, "empty"), "", 0o600)
	write(t, filepath.Join(ws, "ro.txt"), "read only\n", 0o444)
	write(t, filepath.Join(ws, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(ws, "big.bin"), randomBytes(t, 3<<20+17), 0o644)
	write(t, filepath.Join(ws, "nested/deep/x/y.txt"), "deep\n", 0o600)
	write(t, filepath.Join(ws, "nested/n.txt"), "n\n", 0o640)
	write(t, filepath.Join(ws, "rodir/inside.txt"), "inside\n", 0o644)
	must(t, os.Mkdir(filepath.Join(ws, "emptydir"), 0o750))
	must(t, os.Mkdir(filepath.Join(ws, "todir"), 0o700))
	must(t, os.Symlink("a.txt", filepath.Join(ws, "link-rel")))
	must(t, os.Symlink("does/not/exist", filepath.Join(ws, "link-dangling")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(ws, "link-abs")))
	must(t, os.Symlink("nested", filepath.Join(ws, "link-dir")))
	must(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o620))
	if os.Geteuid() == 0 {
		must(t, os.Lchown(filepath.Join(ws, "a.txt"), 1234, 5678))
		must(t, os.Lchown(filepath.Join(ws, "link-abs"), 1234, 5678))
		must(t, os.Lchown(filepath.Join(ws, "nested"), 4321, 8765))
	}
	must(t, os.Chmod(filepath.Join(ws, "rodir"), 0o555))
	must(t, os.Chmod(ws, 0o751))
	// Times in the past, as in a workspace edited a while ago: different
	// per entry, dirs last (their entries' creation moved them).
	past := time.Now().Add(-time.Hour)
	var paths []string
	must(t, filepath.WalkDir(ws, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i := len(paths) - 1; i >= 0; i-- {
		ts := []unix.Timespec{unix.NsecToTimespec(past.UnixNano()), unix.NsecToTimespec(past.UnixNano() + int64(i)*1001)}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

// mutate changes everything buildTree made, as a sandbox might.
func mutate(t *testing.T, ws string) {
	t.Helper()
	writeInPlace(t, filepath.Join(ws, "a.txt"), "changed in place, longer than before\n")
	writeInPlace(t, filepath.Join(ws, "empty"), "not empty any more")
	writeInPlace(t, filepath.Join(ws, "nested/deep/x/y.txt"), "DEEP\n") // same size
	f, err := os.OpenFile(filepath.Join(ws, "big.bin"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("scribble"), 1<<20)
	must(t, err)
	must(t, f.Close())
	must(t, os.Remove(filepath.Join(ws, "run.sh")))
	must(t, os.Chmod(filepath.Join(ws, "ro.txt"), 0o600))
	must(t, os.Remove(filepath.Join(ws, "link-rel")))
	must(t, os.Symlink("ro.txt", filepath.Join(ws, "link-rel")))
	must(t, os.Remove(filepath.Join(ws, "link-dir")))
	must(t, os.Mkdir(filepath.Join(ws, "link-dir"), 0o755)) // a symlink became a dir
	must(t, os.RemoveAll(filepath.Join(ws, "nested/deep")))
	must(t, os.Remove(filepath.Join(ws, "emptydir")))
	write(t, filepath.Join(ws, "emptydir"), "a dir became a file", 0o644)
	must(t, os.Remove(filepath.Join(ws, "todir")))
	must(t, os.Symlink("/tmp", filepath.Join(ws, "todir")))
	must(t, os.Chmod(filepath.Join(ws, "rodir"), 0o755))
	write(t, filepath.Join(ws, "rodir/added.txt"), "added", 0o644)
	write(t, filepath.Join(ws, "new.txt"), "new", 0o644)
	write(t, filepath.Join(ws, "newdir/sub/f"), "f", 0o644)
	must(t, os.Remove(filepath.Join(ws, "fifo")))
	must(t, os.Chmod(ws, 0o700))
}

// newWorkspace returns a fresh workspace dir ("user-data") in its own
// thread dir, as the gateway lays them out.
func newWorkspace(t *testing.T, base string) string {
	t.Helper()
	ws := filepath.Join(base, "thread", "user-data")
	must(t, os.MkdirAll(ws, 0o700))
	return ws
}

func openStore(t *testing.T, root string, cfg Config) *Store {
	t.Helper()
	s, err := Open(root, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// countingHold is a hold func that records that it ran.
func countingHold(n *int) func(func() error) error {
	return func(fn func() error) error {
		*n++
		return fn()
	}
}

// tempDir is t.TempDir, emptied first by removePath: copies keep
// read-only dirs (0555), which a non-root test's own cleanup cannot remove.
func tempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if err := removePath(context.Background(), filepath.Join(dir, e.Name())); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return dir
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
