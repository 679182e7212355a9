package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Hold runs fn with the thread's sandbox stopped (pool.Pool.Hold): the
// gateway's side of Create's, Restore's and Fork's critical sections.
type Hold func(fn func() error) error

// Threads keeps the checkpoints of every thread whose data lies under one
// data_dir: the workspace of (user, thread) is its user-data directory,
// {data_dir}/users/{user}/threads/{thread}/user-data, and its checkpoints
// live beside the threads, in {data_dir}/checkpoints/{user}/{thread}, so
// a thread's directory keeps holding only user-data. user and thread must
// be validated (identity) by the caller.
type Threads struct {
	dataDir string
	cfg     Config
}

// NewThreads detects the copy method of dataDir once (cfg.Method "" =
// detect) and returns the threads' checkpoints under it.
func NewThreads(dataDir string, cfg Config) (*Threads, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root := filepath.Join(dataDir, "checkpoints")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint dir: %w", err)
	}
	if cfg.Method == "" {
		m, err := Detect(root)
		if err != nil {
			return nil, err
		}
		cfg.Method = m
	}
	return &Threads{dataDir: dataDir, cfg: cfg}, nil
}

// Method is how checkpoints are copied on this data_dir.
func (t *Threads) Method() Method { return t.cfg.Method }

// Workspace is (user, thread)'s user-data directory.
func (t *Threads) Workspace(user, thread string) string {
	return filepath.Join(t.dataDir, "users", user, "threads", thread, "user-data")
}

func (t *Threads) store(user, thread string) (*Store, error) {
	return Open(filepath.Join(t.dataDir, "checkpoints", user, thread), t.cfg)
}

// Create checkpoints (user, thread)'s workspace; ErrNotFound when the
// thread has none yet.
func (t *Threads) Create(ctx context.Context, user, thread, label string, hold Hold) (Info, error) {
	ws := t.Workspace(user, thread)
	if _, err := os.Lstat(ws); errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("%w: the thread has no workspace yet", ErrNotFound)
	}
	s, err := t.store(user, thread)
	if err != nil {
		return Info{}, err
	}
	return s.Create(ctx, ws, label, hold)
}

// List is (user, thread)'s checkpoints, newest first.
func (t *Threads) List(ctx context.Context, user, thread string) ([]Info, error) {
	s, err := t.store(user, thread)
	if err != nil {
		return nil, err
	}
	return s.List(ctx)
}

// Get is one of (user, thread)'s checkpoints.
func (t *Threads) Get(ctx context.Context, user, thread, id string) (Info, error) {
	s, err := t.store(user, thread)
	if err != nil {
		return Info{}, err
	}
	return s.Get(ctx, id)
}

// Delete removes one of (user, thread)'s checkpoints.
func (t *Threads) Delete(ctx context.Context, user, thread, id string) error {
	s, err := t.store(user, thread)
	if err != nil {
		return err
	}
	return s.Delete(ctx, id)
}

// Restore rolls (user, thread)'s workspace back to checkpoint id.
func (t *Threads) Restore(ctx context.Context, user, thread, id string, hold Hold) error {
	s, err := t.store(user, thread)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(t.Workspace(user, thread), 0o755); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	return s.Restore(ctx, id, t.Workspace(user, thread), hold)
}

// Fork makes thread to's workspace a copy of thread from's (its current
// state, read under holdFrom, or checkpoint id when set). The copy is
// built beside to's workspace and moved in under holdTo, which must keep
// to's sandbox from being created meanwhile; to's workspace must not exist
// or be empty (ErrNotEmpty): a fork never overwrites a thread.
func (t *Threads) Fork(ctx context.Context, user, from, to, id string, holdFrom, holdTo Hold) error {
	dst := t.Workspace(user, to)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create thread dir: %w", err)
	}
	if err := emptyOrAbsent(dst); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(filepath.Dir(dst), ".fork-")
	if err != nil {
		return fmt.Errorf("stage fork: %w", err)
	}
	defer os.RemoveAll(stage)
	staged := filepath.Join(stage, "user-data")
	if id != "" {
		s, err := t.store(user, from)
		if err != nil {
			return err
		}
		err = s.CopyOut(ctx, id, staged)
		if err != nil {
			return err
		}
	} else {
		src := t.Workspace(user, from)
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: the thread has no workspace yet", ErrNotFound)
		}
		if err := holdFrom(func() error { return CopyTree(ctx, src, staged) }); err != nil {
			return err
		}
	}
	return holdTo(func() error {
		if err := emptyOrAbsent(dst); err != nil {
			return err
		}
		if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replace empty workspace: %w", err)
		}
		if err := os.Rename(staged, dst); err != nil {
			return fmt.Errorf("move fork into place: %w", err)
		}
		return nil
	})
}

// RemoveThread deletes (user, thread)'s checkpoints (an operator removing
// the thread); false when it had none.
func (t *Threads) RemoveThread(ctx context.Context, user, thread string) (bool, error) {
	dir := filepath.Join(t.dataDir, "checkpoints", user, thread)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := removePath(ctx, dir); err != nil {
		return false, fmt.Errorf("remove checkpoints: %w", err)
	}
	return true, nil
}

// emptyOrAbsent: dir does not exist, or is an empty directory.
func emptyOrAbsent(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read workspace: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: the thread already has files", ErrNotEmpty)
	}
	return nil
}
