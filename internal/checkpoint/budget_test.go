package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A copy allocates what its source does: a hole stays a hole, and the
// names of one multiply-linked file stay links of one copy, in a
// checkpoint and again in the workspace it is restored to.
func TestCopyKeepsHolesAndLinks(t *testing.T) {
	t.Parallel()
	base := tempDir(t)
	ws := newWorkspace(t, base)
	sparse := filepath.Join(ws, "sparse")
	f, err := os.Create(sparse)
	must(t, err)
	_, err = f.WriteAt([]byte("data in the middle"), 32<<20)
	must(t, err)
	must(t, f.Truncate(64<<20))
	must(t, f.Close())
	write(t, filepath.Join(ws, "a"), randomBytes(t, 256<<10), 0o640)
	must(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	must(t, os.Link(filepath.Join(ws, "a"), filepath.Join(ws, "sub", "b")))
	must(t, os.Link(filepath.Join(ws, "a"), filepath.Join(ws, "c")))
	want := manifest(t, ws)

	s := openStore(t, filepath.Join(base, "ck"), Config{Method: MethodCopy})
	info, err := s.Create(ctxT(t), ws, "", nil)
	must(t, err)
	tree := filepath.Join(base, "ck", info.ID, treeName)
	sameManifest(t, "checkpoint", want, manifest(t, tree))
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(tree, "sparse"), &st))
	if st.Size != 64<<20 || st.Blocks*512 > 1<<20 {
		t.Errorf("checkpointed sparse file: size %d, %d bytes allocated; want 64 MiB with holes", st.Size, st.Blocks*512)
	}
	if a, b, c := inode(t, filepath.Join(tree, "a")), inode(t, filepath.Join(tree, "sub", "b")), inode(t, filepath.Join(tree, "c")); a != b || a != c {
		t.Errorf("checkpointed links are separate files: inodes %d %d %d", a, b, c)
	}

	must(t, os.Remove(filepath.Join(ws, "c")))
	must(t, s.Restore(ctxT(t), info.ID, ws, nil))
	sameManifest(t, "restored", want, manifest(t, ws))
	if inode(t, filepath.Join(ws, "a")) != inode(t, filepath.Join(ws, "c")) {
		t.Error("restored links are separate files")
	}
	must(t, syscall.Stat(sparse, &st))
	if st.Blocks*512 > 1<<20 {
		t.Errorf("restored sparse file allocates %d bytes", st.Blocks*512)
	}
}

// Each limit of the per-user budget refuses a copy before anything is made
// (BudgetError naming the setting), and a copy whose source grows past the
// budget after the check is stopped by its own count and leaves nothing.
func TestThreadsBudget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		cfg   Config
		files int // files of 64 KiB in the workspace
		limit string
		fork  bool
	}{
		{"bytes", Config{UserBytes: 1 << 20}, 6, LimitUserBytes, false},
		{"inodes", Config{UserInodes: 30}, 10, LimitUserInodes, false},
		{"floor", Config{FreeFloor: 1 << 60}, 1, LimitFreeFloor, false},
		{"threads", Config{UserThreads: 2}, 1, LimitUserThreads, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			data := tempDir(t)
			c.cfg.Method = MethodCopy
			th, err := NewThreads(data, c.cfg)
			must(t, err)
			ws := th.Workspace("u", "a")
			must(t, os.MkdirAll(ws, 0o700))
			old := time.Now().Add(-time.Hour) // not racy: linked by the next checkpoint
			for i := range c.files {
				p := filepath.Join(ws, "f"+string(rune('a'+i)))
				write(t, p, randomBytes(t, 64<<10), 0o600)
				must(t, os.Chtimes(p, old, old))
			}
			ctx := ctxT(t)
			var refused error
			if c.fork {
				direct := func(fn func() error) error { return fn() }
				must(t, th.Fork(ctx, "u", "a", "b", "", direct, direct))
				refused = th.Fork(ctx, "u", "a", "c", "", direct, direct)
				if _, err := os.Lstat(filepath.Join(data, "users", "u", "threads", "c")); !os.IsNotExist(err) {
					t.Errorf("the refused fork left its thread dir (%v)", err)
				}
			} else {
				// The first fits (bytes: 768 KiB of 1 MiB; inodes: 24 of
				// 30), and so does a second of the unchanged workspace (its
				// files are links to the first's); one more copy does not.
				_, err := th.Create(ctx, "u", "a", "", nil)
				if c.limit == LimitFreeFloor {
					refused = err
				} else {
					must(t, err)
					_, err = th.Create(ctx, "u", "a", "", nil)
					must(t, err)
					for i := range c.files {
						write(t, filepath.Join(ws, "f"+string(rune('a'+i))), randomBytes(t, 64<<10), 0o600)
					}
					_, refused = th.Create(ctx, "u", "a", "", nil)
				}
			}
			var be *BudgetError
			if !errors.As(refused, &be) || be.Limit != c.limit || !strings.Contains(be.Error(), c.limit) {
				t.Fatalf("copy past %s: %v, want a BudgetError naming it", c.limit, refused)
			}
			entries, _ := os.ReadDir(filepath.Join(data, "checkpoints", "u", "a"))
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), tmpPrefix) {
					t.Errorf("the refused copy left %s", e.Name())
				}
			}
		})
	}

	// Admitted while small, the workspace grows under the hold: the copy's
	// own count stops it.
	data := tempDir(t)
	th, err := NewThreads(data, Config{Method: MethodCopy, UserBytes: 1 << 20})
	must(t, err)
	ws := th.Workspace("u", "a")
	must(t, os.MkdirAll(ws, 0o700))
	write(t, filepath.Join(ws, "small"), "x", 0o600)
	_, err = th.Create(ctxT(t), "u", "a", "", func(copy func() error) error {
		write(t, filepath.Join(ws, "grown"), randomBytes(t, 2<<20), 0o600)
		return copy()
	})
	var be *BudgetError
	if !errors.As(err, &be) || be.Limit != LimitUserBytes {
		t.Fatalf("a workspace grown past the budget under the hold: %v, want a BudgetError", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(data, "checkpoints", "u", "a")); len(entries) > 1 { // .lock
		t.Errorf("the stopped copy left %v", entries)
	}
}
