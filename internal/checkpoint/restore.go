package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Restore makes the workspace's contents what checkpoint id holds: every
// file's bytes, mode and times, symlinks and their targets, empty dirs,
// FIFOs, dir modes and times, owners as root.
//
// The checkpoint is first staged into a sibling temp dir of workspace
// (.ckpt-stage-*, same filesystem), cloned or copied: if that fails the
// workspace is untouched. Then, inside hold (the caller freezes the
// sandbox, calls swap, thaws it), the swap is renames only: workspace
// entries move into a sibling trash dir and staged entries move in. A
// directory present in both as a directory keeps its inode and is merged
// entry by entry, at every depth: the sandbox's bind mounts (user-data's
// workspace, uploads, outputs) and its processes' working directories stay
// valid, and the workspace dir itself always keeps its inode. A failed
// swap is rolled back. Trash and stage are removed after hold.
func (s *Store) Restore(ctx context.Context, id, workspace string, hold func(swap func() error) error) error {
	if !ValidID(id) {
		return ErrBadID
	}
	ws, err := openRoot(workspace)
	if err != nil {
		return err
	}
	defer unix.Close(ws)
	wsSt, err := fstat(ws)
	if err != nil {
		return err
	}
	parent, base, err := openParent(workspace, wsSt)
	if err != nil {
		return err
	}
	defer unix.Close(parent)

	stageName, stage, want, err := s.stage(ctx, id, parent, wsSt.dev)
	if err != nil {
		return err
	}
	defer unix.Close(stage)
	trashName := ""
	err = held(hold, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		trashName = ".ckpt-trash-" + randHex()
		if err := unix.Mkdirat(parent, trashName, 0o700); err != nil {
			trashName = ""
			return fmt.Errorf("trash dir: %w", err)
		}
		trash, err := openDirAt(parent, trashName)
		if err != nil {
			return fmt.Errorf("trash dir: %w", err)
		}
		defer unix.Close(trash)
		return swap(ws, stage, trash, parent, base, want)
	})
	var rb *rollbackError
	if errors.As(err, &rb) { // the workspace may hold entries of trash and stage: keep both
		dir := filepath.Dir(filepath.Clean(workspace))
		return fmt.Errorf("restore %s: %w (kept %s and %s)", id, err, filepath.Join(dir, stageName), filepath.Join(dir, trashName))
	}
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("restore %s: %w", id, err))
	}
	for _, n := range []string{stageName, trashName} {
		if n == "" {
			continue
		}
		if err := removeAt(context.WithoutCancel(ctx), parent, n); err != nil {
			errs = append(errs, fmt.Errorf("restore %s: remove temp dir: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// stage copies checkpoint id's tree into a new temp dir in parent (which
// must be on the workspace's device dev: the swap renames) and returns its
// name, the open dir and the tree root's attributes. On failure it removes
// what it made.
func (s *Store) stage(ctx context.Context, id string, parent int, dev uint64) (string, int, stat, error) {
	unlock, err := s.lock(ctx, unix.LOCK_SH) // no Delete while the tree is read
	if err != nil {
		return "", -1, stat{}, err
	}
	defer unlock()
	tree, want, err := s.openTree(id)
	if err != nil {
		return "", -1, stat{}, err
	}
	defer unix.Close(tree)
	name := ".ckpt-stage-" + randHex()
	if err := unix.Mkdirat(parent, name, 0o700); err != nil {
		return "", -1, stat{}, fmt.Errorf("restore: stage dir: %w", err)
	}
	stage, err := openDirAt(parent, name)
	if err == nil {
		var st stat
		if st, err = fstat(stage); err == nil && st.dev != dev {
			err = fmt.Errorf("workspace is a mount point, cannot stage beside it: %w", unix.EXDEV)
		}
		if err == nil {
			err = newCopier(ctx, s.cfg.Method, Budget{}).tree(tree, stage, -1)
		}
		if err != nil {
			unix.Close(stage)
		}
	}
	if err != nil {
		_ = removeAt(context.WithoutCancel(ctx), parent, name)
		return "", -1, stat{}, fmt.Errorf("restore: stage %s: %w", id, err)
	}
	return name, stage, want, nil
}

// openTree opens checkpoint id's tree and returns its root's attributes.
func (s *Store) openTree(id string) (int, stat, error) {
	tree, err := openDirAt(unix.AT_FDCWD, filepath.Join(s.root, id, treeName))
	if errors.Is(err, unix.ENOENT) {
		return -1, stat{}, ErrNotFound
	}
	if err != nil {
		return -1, stat{}, fmt.Errorf("open checkpoint %s: %w", id, err)
	}
	st, err := fstat(tree)
	if err != nil {
		unix.Close(tree)
		return -1, stat{}, err
	}
	return tree, st, nil
}

// openParent opens dir's parent (the gateway's own path) and checks that
// its entry base is still the directory st describes.
func openParent(dir string, st stat) (int, string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return -1, "", err
	}
	parent, err := unix.Open(filepath.Dir(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open parent of %s: %w", dir, err)
	}
	base := filepath.Base(abs)
	if got, err := lstatAt(parent, base); err != nil || got.dev != st.dev || got.ino != st.ino {
		unix.Close(parent)
		return -1, "", fmt.Errorf("%s changed while opening it: %w", dir, ErrNotDir)
	}
	return parent, base, nil
}

// rollbackError: a swap failed and could not be fully undone.
type rollbackError struct{ err error }

func (e *rollbackError) Error() string { return "rollback incomplete: " + e.err.Error() }
func (e *rollbackError) Unwrap() error { return e.err }

// swapper moves entries between the workspace, the stage and the trash,
// journaling an undo for each step. Journal entries name directories by
// path relative to the three roots and reopen them component by component,
// so they never depend on a descriptor being kept for every directory.
type swapper struct {
	ws, stage, trash int
	parent           int    // the workspace's parent dir
	base             string // the workspace's name in parent
	chown            bool
	undo             []func() error
}

// swap merges stage into ws (moving replaced entries to trash), then gives
// ws want's mode, owner and times (ws is base in parent). On failure it
// undoes its steps.
func swap(ws, stage, trash, parent int, base string, want stat) error {
	w := &swapper{ws: ws, stage: stage, trash: trash, parent: parent, base: base, chown: isRoot()}
	err := w.merge("", ws, stage, trash)
	if err == nil {
		err = w.dirAttrs(ws, parent, base, want)
	}
	if err == nil {
		return nil
	}
	var errs []error
	for i := len(w.undo) - 1; i >= 0; i-- {
		if uerr := w.undo[i](); uerr != nil {
			errs = append(errs, uerr)
		}
	}
	if len(errs) > 0 {
		return &rollbackError{errors.Join(append([]error{err}, errs...)...)}
	}
	return fmt.Errorf("swap (rolled back): %w", err)
}

// merge makes the dir ws (at rel) hold what the dir stage holds.
func (w *swapper) merge(rel string, ws, stage, trash int) error {
	if err := w.journalAttrs(rel, ws); err != nil {
		return err
	}
	// Renames in and out need u+wx on both dirs (root needs nothing): the
	// stage is ours, and the workspace dir's mode is set after the merge
	// (or put back by the journal).
	for _, fd := range []int{ws, stage} {
		if err := ownerWritable(fd); err != nil {
			return err
		}
	}
	wsNames, err := readNames(ws)
	if err != nil {
		return err
	}
	stNames, err := readNames(stage)
	if err != nil {
		return err
	}
	staged := make(map[string]bool, len(stNames))
	for _, n := range stNames {
		staged[n] = true
	}
	var kept []string
	for _, n := range wsNames {
		if staged[n] && bothDirs(ws, stage, n) {
			kept = append(kept, n)
			continue
		}
		if err := w.move(w.ws, ws, w.trash, trash, rel, n); err != nil {
			return err
		}
	}
	isKept := make(map[string]bool, len(kept))
	for _, n := range kept {
		isKept[n] = true
		if err := w.mergeDir(rel, n, ws, stage, trash); err != nil {
			return err
		}
	}
	for _, n := range stNames {
		if isKept[n] {
			continue
		}
		if err := w.move(w.stage, stage, w.ws, ws, rel, n); err != nil {
			return err
		}
	}
	return nil
}

// ownerWritable gives a non-root gateway's dir fd u+wx if it lacks them.
func ownerWritable(fd int) error {
	if isRoot() {
		return nil
	}
	st, err := fstat(fd)
	if err != nil || st.perm()&0o300 == 0o300 {
		return err
	}
	return unix.Fchmod(fd, st.perm()|0o300)
}

func bothDirs(a, b int, name string) bool {
	sa, err := lstatAt(a, name)
	if err != nil || !sa.isDir() {
		return false
	}
	sb, err := lstatAt(b, name)
	return err == nil && sb.isDir()
}

// mergeDir merges the dir name, present in ws and stage, keeping ws's and
// giving it the staged dir's attributes.
func (w *swapper) mergeDir(rel, name string, ws, stage, trash int) error {
	sub := path.Join(rel, name)
	if err := unix.Mkdirat(trash, name, 0o700); err != nil {
		return fmt.Errorf("%s: trash dir: %w", sub, err)
	}
	fds := make([]int, 0, 3)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, dir := range []int{ws, stage, trash} {
		fd, err := openDirAt(dir, name)
		if err != nil {
			return fmt.Errorf("%s: %w", sub, err)
		}
		fds = append(fds, fd)
	}
	want, err := fstat(fds[1]) // before merge changes its mode and times
	if err != nil {
		return err
	}
	if err := w.merge(sub, fds[0], fds[1], fds[2]); err != nil {
		return err
	}
	if err := w.dirAttrs(fds[0], ws, name, want); err != nil {
		return fmt.Errorf("%s: %w", sub, err)
	}
	return nil
}

// move renames name from dir fromDir (rel below root fromRoot) to the same
// name in toDir (rel below toRoot).
func (w *swapper) move(fromRoot, fromDir, toRoot, toDir int, rel, name string) error {
	if err := renameEntry(fromDir, toDir, name); err != nil {
		return fmt.Errorf("move %s: %w", path.Join(rel, name), err)
	}
	w.undo = append(w.undo, func() error {
		from, err := openRel(fromRoot, rel)
		if err != nil {
			return err
		}
		defer unix.Close(from)
		to, err := openRel(toRoot, rel)
		if err != nil {
			return err
		}
		defer unix.Close(to)
		return renameEntry(to, from, name)
	})
	return nil
}

// renameEntry moves name from dir from to dir to. Moving a directory to
// another parent rewrites its "..", which needs write permission on it: a
// non-root gateway lends a read-only one (0555, as Go's module cache
// makes) u+w for the move.
func renameEntry(from, to int, name string) error {
	if isRoot() {
		return unix.Renameat(from, name, to, name)
	}
	st, err := lstatAt(from, name)
	if err != nil || !st.isDir() || st.perm()&0o200 != 0 {
		return unix.Renameat(from, name, to, name)
	}
	fd, err := openDirAt(from, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, st.perm()|0o200); err != nil {
		return err
	}
	err = unix.Renameat(from, name, to, name)
	return errors.Join(err, unix.Fchmod(fd, st.perm()))
}

// journalAttrs records the workspace dir fd's (at rel) owner, mode and
// times before merge changes them (the renames in it move its times); its
// undo runs after the undos of those renames.
func (w *swapper) journalAttrs(rel string, fd int) error {
	old, err := fstat(fd)
	if err != nil {
		return err
	}
	w.undo = append(w.undo, func() error {
		if rel == "" {
			return w.dirAttrs(w.ws, w.parent, w.base, old)
		}
		dir, err := openRel(w.ws, rel)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		up, err := openRel(w.ws, strings.TrimSuffix(path.Dir(rel), "."))
		if err != nil {
			return err
		}
		defer unix.Close(up)
		return w.dirAttrs(dir, up, path.Base(rel), old)
	})
	return nil
}

func (w *swapper) dirAttrs(fd, parent int, name string, st stat) error {
	if w.chown {
		if err := unix.Fchown(fd, int(st.uid), int(st.gid)); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(fd, st.perm()); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := setTimes(parent, name, st); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// CopyTree copies the contents of the directory src into dst for a fork:
// dst must not exist (its parent must) or be an empty directory, and ends
// with src's mode, times and (as root) owner. Files are cloned where the
// filesystem can, else copied; src is read like a workspace (symlinks not
// followed, FIFOs recreated, sockets and devices skipped). The caller
// freezes src's sandbox around the call if it wants a consistent copy. On
// failure dst is left as it was found (absent or empty).
func CopyTree(ctx context.Context, src, dst string) error {
	in, err := openRoot(src)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	_, err = copyInto(ctx, in, dst, MethodReflink, Budget{})
	return err
}

// copyTree is CopyTree under a budget; it returns what the copy made.
func copyTree(ctx context.Context, src, dst string, b Budget) (Usage, error) {
	in, err := openRoot(src)
	if err != nil {
		return Usage{}, err
	}
	defer unix.Close(in)
	return copyInto(ctx, in, dst, MethodReflink, b)
}

// CopyOut copies checkpoint id's tree into dst like CopyTree (a fork from a
// checkpoint).
func (s *Store) CopyOut(ctx context.Context, id, dst string) error {
	if !ValidID(id) {
		return ErrBadID
	}
	unlock, err := s.lock(ctx, unix.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	tree, _, err := s.openTree(id)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	s.added, err = copyInto(ctx, tree, dst, s.cfg.Method, s.budget)
	return err
}

// copyInto copies the tree src into dst (absent or empty) under b and
// returns what it made.
func copyInto(ctx context.Context, src int, dst string, m Method, b Budget) (Usage, error) {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return Usage{}, err
	}
	parent, err := unix.Open(filepath.Dir(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Usage{}, fmt.Errorf("open parent of %s: %w", dst, err)
	}
	defer unix.Close(parent)
	name := filepath.Base(abs)
	created := unix.Mkdirat(parent, name, 0o700) == nil
	out, err := openDirAt(parent, name)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return Usage{}, fmt.Errorf("%w: %s", ErrNotDir, dst)
	}
	if err != nil {
		return Usage{}, fmt.Errorf("open %s: %w", dst, err)
	}
	defer unix.Close(out)
	if !created {
		if names, err := readNames(out); err != nil || len(names) > 0 {
			return Usage{}, fmt.Errorf("%w: %s", ErrNotEmpty, dst)
		}
	}
	c := newCopier(ctx, m, b)
	err = c.root(src, parent, name, -1)
	if err == nil {
		return c.added, nil
	}
	undo := context.WithoutCancel(ctx)
	if created {
		_ = removeAt(undo, parent, name)
	} else if names, rerr := readNames(out); rerr == nil {
		for _, n := range names {
			_ = removeAt(undo, out, n)
		}
	}
	return Usage{}, fmt.Errorf("copy tree to %s: %w", dst, err)
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
