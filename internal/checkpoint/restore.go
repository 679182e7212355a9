package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

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
// valid, and the workspace dir itself always keeps its inode. Trash and
// stage are removed after hold.
//
// Every step is journaled on disk first (journal.go): a failed swap is
// rolled back, and so is one a crash stopped, by the next Restore or Open
// of this Store. A swap that cannot be rolled back keeps its journal,
// stage and trash, and the error says so.
func (s *Store) Restore(ctx context.Context, id, workspace string, hold func(swap func() error) error) error {
	if !ValidID(id) {
		return ErrBadID
	}
	abs, err := filepath.Abs(workspace)
	if err != nil {
		return err
	}
	ws, err := openRoot(abs)
	if err != nil {
		return err
	}
	defer unix.Close(ws)
	wsSt, err := fstat(ws)
	if err != nil {
		return err
	}
	parent, base, err := openParent(abs, wsSt)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	unlock, err := s.flock(ctx, restoreLockName, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.settle(ctx); err != nil {
		return fmt.Errorf("restore %s: an earlier restore: %w", id, err)
	}

	j := &journal{Phase: phaseStage, Workspace: abs, Dev: wsSt.dev, Ino: wsSt.ino,
		Stage: stagePrefix + randHex(), Trash: trashPrefix + randHex()}
	if err := s.writeJournal(j); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	hook()
	stage, want, err := s.stage(ctx, id, parent, j.Stage, wsSt.dev)
	if err == nil {
		defer unix.Close(stage)
		hook()
		err = held(hold, func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return s.swap(ws, stage, parent, base, want, j)
		})
	}
	if err != nil {
		err = fmt.Errorf("restore %s: %w", id, err)
	}
	if j.Phase == phaseSwap { // neither finished nor undone: keep what settling needs
		return err
	}
	return errors.Join(err, s.clean(context.WithoutCancel(ctx), parent, j))
}

// Temp dirs beside the workspace.
const (
	stagePrefix = ".ckpt-stage-"
	trashPrefix = ".ckpt-trash-"
)

// stage copies checkpoint id's tree into the new dir name in parent (which
// must be on the workspace's device dev: the swap renames) and returns it
// open with the tree root's attributes. On failure the caller removes it.
func (s *Store) stage(ctx context.Context, id string, parent int, name string, dev uint64) (int, stat, error) {
	unlock, err := s.lock(ctx, unix.LOCK_SH) // no Delete while the tree is read
	if err != nil {
		return -1, stat{}, err
	}
	defer unlock()
	tree, want, err := s.openTree(id)
	if err != nil {
		return -1, stat{}, err
	}
	defer unix.Close(tree)
	if err := unix.Mkdirat(parent, name, 0o700); err != nil {
		return -1, stat{}, fmt.Errorf("stage dir: %w", err)
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
		return -1, stat{}, fmt.Errorf("stage %s: %w", id, err)
	}
	return stage, want, nil
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

// openParent opens the absolute path dir's parent (the gateway's own path)
// and checks that its entry base is still the directory st describes.
func openParent(dir string, st stat) (int, string, error) {
	parent, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open parent of %s: %w", dir, err)
	}
	base := filepath.Base(dir)
	if got, err := lstatAt(parent, base); err != nil || got.dev != st.dev || got.ino != st.ino {
		unix.Close(parent)
		return -1, "", fmt.Errorf("%s changed while opening it: %w", dir, ErrNotDir)
	}
	return parent, base, nil
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
