package jail

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Own hands a tenant's tree to its uid without following the symlinks in
// it: a file and a dir outside the tree, linked from inside, keep their
// owner.
func TestOwnFollowsNoSymlink(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("Own chowns: run as root")
	}
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	for _, p := range []string{"a/b", "c"} {
		if err := os.MkdirAll(filepath.Join(tree, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "a/b/f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"a/file-link": victim, "c/dir-link": outside} {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	const id = 1<<30 + 4711
	if err := Own(tree, id, id); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	for _, p := range []string{".", "a", "a/b", "a/b/f", "c", "a/file-link", "c/dir-link"} {
		if got := owner(filepath.Join(tree, p)); got != id {
			t.Errorf("%s: owner %d, want %d", p, got, id)
		}
	}
	for _, p := range []string{outside, victim} {
		if got := owner(p); got != 0 {
			t.Errorf("%s outside the tree: owner %d, want 0", p, got)
		}
	}
}
