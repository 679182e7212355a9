package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/api"

	"golang.org/x/sys/unix"
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
	limits  limits
	usage   usageCache
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
	l, err := resolveLimits(cfg, root)
	if err != nil {
		return nil, err
	}
	return &Threads{dataDir: dataDir, cfg: cfg, limits: l}, nil
}

// Settle settles the journal of every restore a crash stopped
// (journal.go), rolling its swap back, so that no thread is served half
// swapped: the gateway calls it at start, before it serves anything (a
// thread's own checkpoint requests settle it too, when they open its
// store). It returns how many it settled; the error names those it could
// not, whose checkpoint requests then fail until an operator looks.
func (t *Threads) Settle(ctx context.Context) (int, error) {
	root := filepath.Join(t.dataDir, "checkpoints")
	users, err := listNames(root)
	if err != nil {
		return 0, fmt.Errorf("settle restores: %w", err)
	}
	settled := 0
	var errs []error
	for _, user := range users {
		threads, err := listNames(filepath.Join(root, user))
		if errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("settle restores: %w", err))
			continue
		}
		for _, thread := range threads {
			if err := ctx.Err(); err != nil {
				return settled, err
			}
			dir := filepath.Join(root, user, thread)
			s := &Store{root: dir, cfg: t.cfg}
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || !s.hasJournal() {
				continue
			}
			if err := s.settleIdle(ctx); err != nil {
				errs = append(errs, fmt.Errorf("thread %s/%s: %w", user, thread, err))
			} else if !s.hasJournal() {
				settled++ // else another process's restore is running
			}
		}
	}
	return settled, errors.Join(errs...)
}

// Limits are the per-user budget in force (0 = none): bytes, inodes,
// threads with data, and the free-space floor of data_dir.
func (t *Threads) Limits() (bytes, inodes int64, threads int, freeFloor int64) {
	return t.limits.user.Bytes, t.limits.user.Inodes, t.limits.threads, t.limits.freeFloor
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
func (t *Threads) Create(ctx context.Context, user, thread, label string, hold Hold) (api.Checkpoint, error) {
	ws := t.Workspace(user, thread)
	if _, err := os.Lstat(ws); errors.Is(err, fs.ErrNotExist) {
		return api.Checkpoint{}, ErrNoThread
	}
	s, err := t.store(user, thread)
	if err != nil {
		return api.Checkpoint{}, err
	}
	s.admit = func(need Usage) (Budget, error) { return t.admit(ctx, user, need, false) }
	info, err := s.Create(ctx, ws, label, hold)
	if err == nil || errors.Is(err, ErrRetention) {
		// The tree, and the checkpoint's own dir and meta.json.
		t.usage.add(user, s.added.plus(Usage{Bytes: 2 * metaBlock, Inodes: 2}))
	}
	return info, err
}

// List is (user, thread)'s checkpoints, newest first.
func (t *Threads) List(ctx context.Context, user, thread string) ([]api.Checkpoint, error) {
	s, err := t.store(user, thread)
	if err != nil {
		return nil, err
	}
	list, err := s.List(ctx)
	if err == nil && len(list) == 0 {
		// No checkpoints and no workspace: a thread that does not exist
		// (a typo, another user's), not one with an empty list.
		if _, serr := os.Lstat(t.Workspace(user, thread)); errors.Is(serr, fs.ErrNotExist) {
			return nil, ErrNoThread
		}
	}
	return list, err
}

// Get is one of (user, thread)'s checkpoints.
func (t *Threads) Get(ctx context.Context, user, thread, id string) (api.Checkpoint, error) {
	s, err := t.store(user, thread)
	if err != nil {
		return api.Checkpoint{}, err
	}
	return s.Get(ctx, id)
}

// Delete removes one of (user, thread)'s checkpoints.
func (t *Threads) Delete(ctx context.Context, user, thread, id string) error {
	s, err := t.store(user, thread)
	if err != nil {
		return err
	}
	defer t.usage.drop(user)
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
// or be empty (ErrNotEmpty): a fork never overwrites a thread. The copy is
// checked against the user's budget first (BudgetError); a fork that fails
// leaves nothing behind, not even to's thread directory if it made it.
func (t *Threads) Fork(ctx context.Context, user, from, to, id string, holdFrom, holdTo Hold) (err error) {
	dst := t.Workspace(user, to)
	if err := emptyOrAbsent(dst); err != nil {
		return err
	}
	src := t.Workspace(user, from)
	var s *Store
	if id != "" {
		if !ValidID(id) {
			return ErrBadID
		}
		if s, err = t.store(user, from); err != nil {
			return err
		}
		if _, err := s.Get(ctx, id); err != nil {
			return err
		}
		src = filepath.Join(s.root, id, treeName)
	} else if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return ErrNoThread
	}
	threadDir := filepath.Dir(dst)
	_, serr := os.Lstat(threadDir)
	newThread := errors.Is(serr, fs.ErrNotExist)
	var need Usage
	if err := measurePath(ctx, src, map[fileKey]struct{}{}, &need); err != nil {
		return fmt.Errorf("measure the fork: %w", err)
	}
	b, err := t.admit(ctx, user, need, newThread)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(threadDir, 0o755); err != nil {
		return fmt.Errorf("create thread dir: %w", err)
	}
	if newThread {
		defer func() {
			if err != nil {
				_ = os.Remove(threadDir) // only if empty: never what a sandbox made meanwhile
			}
		}()
	}
	stage, err := os.MkdirTemp(threadDir, ".fork-")
	if err != nil {
		return fmt.Errorf("stage fork: %w", err)
	}
	defer removePath(context.WithoutCancel(ctx), stage)
	staged := filepath.Join(stage, "user-data")
	var added Usage
	if s != nil {
		s.budget = b
		err = s.CopyOut(ctx, id, staged)
		added = s.added
	} else {
		err = holdFrom(func() (err error) {
			added, err = copyTree(ctx, src, staged, b)
			return err
		})
	}
	if err != nil {
		return err
	}
	t.usage.add(user, added)
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

// Unfork removes thread's data again after a fork whose sandbox was
// refused (create_rate, quotas, a failed start), so the refused fork
// leaves no copy and does not keep the thread's name. The caller runs it
// under the thread's hold, having seen it has no sandbox.
func (t *Threads) Unfork(ctx context.Context, user, thread string) error {
	defer t.usage.drop(user)
	dir := filepath.Dir(t.Workspace(user, thread))
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := removePath(ctx, dir); err != nil {
		return fmt.Errorf("remove refused fork: %w", err)
	}
	return nil
}

// RemoveThread deletes (user, thread)'s checkpoints (an operator removing
// the thread); false when it had none.
func (t *Threads) RemoveThread(ctx context.Context, user, thread string) (bool, error) {
	dir := filepath.Join(t.dataDir, "checkpoints", user, thread)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	defer t.usage.drop(user)
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
