package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/api"

	"golang.org/x/sys/unix"
)

// errHold: a hold func that returned without running the func it was given
// (or ran it twice).
var errHold = errors.New("checkpoint: hold must run its func exactly once")

// Create snapshots the workspace directory's tree as a new checkpoint.
//
// hold wraps the part that reads the workspace: the caller freezes the
// sandbox, calls copy, thaws it and returns copy's error (or its own).
// nil runs copy directly. Everything else (listing, meta.json, the rename
// into place, retention) happens outside hold.
//
// After a successful create, retention (Config.Keep, Config.MaxAge) drops
// older checkpoints, never this one; if only that fails, the error wraps
// ErrRetention and the returned checkpoint is valid.
func (s *Store) Create(ctx context.Context, workspace, label string, hold func(copy func() error) error) (api.Checkpoint, error) {
	if !validLabel(label) {
		return api.Checkpoint{}, ErrBadLabel
	}
	if abs, err := filepath.Abs(workspace); err != nil || within(s.root, abs) {
		return api.Checkpoint{}, fmt.Errorf("checkpoint root %s must be outside the workspace %s", s.root, workspace)
	}
	ws, err := openRoot(workspace)
	if err != nil {
		return api.Checkpoint{}, err
	}
	defer unix.Close(ws)
	unlock, err := s.lock(ctx, unix.LOCK_EX)
	if err != nil {
		return api.Checkpoint{}, err
	}
	defer unlock()
	// Leftovers of a crash: best effort here, Prune reports what remains.
	_ = s.removeStale(ctx)
	metas, err := s.list(ctx)
	if err != nil {
		return api.Checkpoint{}, err
	}
	var prev *meta
	if len(metas) > 0 {
		prev = &metas[0]
	}
	m, err := s.build(ctx, ws, prev, hold)
	if err != nil {
		return api.Checkpoint{}, err
	}
	m.Label = label
	if err := s.commit(ctx, m); err != nil {
		return api.Checkpoint{}, err
	}
	if _, err := s.retain(ctx, m.ID); err != nil {
		return m.Checkpoint, fmt.Errorf("%w: %w", ErrRetention, err)
	}
	return m.Checkpoint, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// build copies the workspace into root/.tmp-<id>/tree under hold.
func (s *Store) build(ctx context.Context, ws int, prev *meta, hold func(func() error) error) (meta, error) {
	var m meta
	newest := ""
	if prev != nil {
		newest = prev.ID
	}
	id, err := s.newID(newest)
	if err != nil {
		return m, fmt.Errorf("checkpoint id: %w", err)
	}
	m.ID, m.CreatedAt = id, s.cfg.Clock()
	c := newCopier(ctx, s.cfg.Method, s.budget)
	prevTree := -1
	if prev != nil {
		if fd, err := openDirAt(unix.AT_FDCWD, filepath.Join(s.root, prev.ID, treeName)); err == nil {
			prevTree = fd
			defer unix.Close(prevTree)
			c.linkBefore = prev.CopyStarted - racyMargin.Nanoseconds()
		}
	}
	if s.admit != nil {
		var need Usage
		if err := measure(ctx, ws, prevTree, map[fileKey]struct{}{}, &need, 1, c.unchanged); err != nil {
			return m, fmt.Errorf("measure the workspace: %w", err)
		}
		need.Inodes++ // the tree's root
		if c.budget, err = s.admit(need); err != nil {
			return m, err
		}
	}
	tmp, err := s.mkTemp(id)
	if err != nil {
		return m, err
	}
	defer unix.Close(tmp)

	err = held(hold, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.CopyStarted = time.Now().UnixNano()
		return c.root(ws, tmp, treeName, prevTree)
	})
	if err != nil {
		_ = removePath(context.WithoutCancel(ctx), filepath.Join(s.root, tmpPrefix+id))
		return m, fmt.Errorf("checkpoint workspace: %w", err)
	}
	m.Size, m.Files, m.Linked, m.Skipped, m.Method = c.size, c.files, c.linked, c.skipped, string(c.method())
	s.added = c.added
	return m, nil
}

// held runs fn under hold (directly when hold is nil) and makes sure hold
// ran it exactly once.
func held(hold func(func() error) error, fn func() error) error {
	if hold == nil {
		return fn()
	}
	ran := false
	err := hold(func() error {
		if ran {
			return errHold
		}
		ran = true
		return fn()
	})
	if err == nil && !ran {
		return errHold
	}
	return err
}

// mkTemp makes root/.tmp-<id>/tree and returns the .tmp- dir open.
func (s *Store) mkTemp(id string) (int, error) {
	path := filepath.Join(s.root, tmpPrefix+id)
	if err := unix.Mkdir(path, 0o700); err != nil {
		return -1, fmt.Errorf("checkpoint temp dir: %w", err)
	}
	fd, err := openRoot(path)
	if err != nil {
		return -1, err
	}
	if err := unix.Mkdirat(fd, treeName, 0o700); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("checkpoint temp dir: %w", err)
	}
	return fd, nil
}

// commit writes meta.json into the temp dir and renames it into place: the
// checkpoint appears in List complete or not at all.
func (s *Store) commit(ctx context.Context, m meta) error {
	tmp := filepath.Join(s.root, tmpPrefix+m.ID)
	err := writeMeta(tmp, m)
	if err == nil {
		err = unix.Rename(tmp, filepath.Join(s.root, m.ID))
	}
	if err != nil {
		_ = removePath(context.WithoutCancel(ctx), tmp)
		return fmt.Errorf("commit checkpoint %s: %w", m.ID, err)
	}
	return nil
}

func writeMeta(dir string, m meta) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, metaName), createFlags, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
