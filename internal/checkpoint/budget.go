package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Disk is budgeted per user, not hoped for: a checkpoint or a fork first
// measures what it would copy and is refused (BudgetError, nothing made)
// when that would take the user's checkpoints and thread data past
// Config.UserBytes or Config.UserInodes, when a fork would give the user
// more than Config.UserThreads threads with data, or when it would leave
// data_dir's filesystem with less than Config.FreeFloor free. The copy
// itself counts what it makes against the same budget, so a workspace that
// grows between the measurement and the copy is stopped at the budget too.

// Defaults of the per-user budget (Config); the byte and inode budgets
// default to a share of data_dir's filesystem (defaultShare).
const (
	DefaultUserThreads = 1000
	DefaultFreeFloor   = 1 << 30
	// defaultShare: a user may take 1/defaultShare of the filesystem.
	defaultShare = 4
	// usageTTL is how long a user's measured usage is trusted; the copies
	// this gateway makes meanwhile are added to it.
	usageTTL = 10 * time.Second
	// metaBlock is what a checkpoint's dir or meta.json allocates, about.
	metaBlock = 4096
)

// Names of the limits a BudgetError reports: the settings that set them.
const (
	LimitUserBytes   = "checkpoint_user_bytes"
	LimitUserInodes  = "checkpoint_user_inodes"
	LimitUserThreads = "checkpoint_user_threads"
	LimitFreeFloor   = "checkpoint_free_floor"
)

// BudgetError refuses a checkpoint or fork that would pass a disk limit.
type BudgetError struct {
	Limit string // one of the Limit* names
	// Used is what the user (or, for the free floor, the filesystem)
	// already has, Need what the copy adds, Max the limit.
	Used, Need, Max int64
}

func (e *BudgetError) Error() string {
	switch e.Limit {
	case LimitUserThreads:
		return fmt.Sprintf("this user already has %d threads with data, the limit (%s); remove one first", e.Used, e.Limit)
	case LimitFreeFloor:
		return fmt.Sprintf("the gateway's data filesystem has %d bytes free; this copy of %d bytes would leave less than %d (%s)",
			e.Used, e.Need, e.Max, e.Limit)
	case LimitUserInodes:
		return fmt.Sprintf("this user's checkpoints and thread data hold %d files; this copy adds %d, over the limit of %d (%s); delete checkpoints or threads first",
			e.Used, e.Need, e.Max, e.Limit)
	}
	return fmt.Sprintf("this user's checkpoints and thread data take %d bytes; this copy adds %d, over the limit of %d (%s); delete checkpoints or threads first",
		e.Used, e.Need, e.Max, e.Limit)
}

// Usage is disk taken: allocated bytes (st_blocks*512) and inodes, each
// hard-linked file counted once.
type Usage struct{ Bytes, Inodes int64 }

func (u Usage) plus(v Usage) Usage { return Usage{u.Bytes + v.Bytes, u.Inodes + v.Inodes} }

// Budget bounds a copy: Max (zero fields: no limit) against Used plus what
// the copy adds. The zero Budget bounds nothing.
type Budget struct{ Max, Used Usage }

// check refuses added when Used plus it passes Max.
func (b Budget) check(added Usage) error {
	switch {
	case b.Max.Bytes > 0 && b.Used.Bytes+added.Bytes > b.Max.Bytes:
		return &BudgetError{Limit: LimitUserBytes, Used: b.Used.Bytes, Need: added.Bytes, Max: b.Max.Bytes}
	case b.Max.Inodes > 0 && b.Used.Inodes+added.Inodes > b.Max.Inodes:
		return &BudgetError{Limit: LimitUserInodes, Used: b.Used.Inodes, Need: added.Inodes, Max: b.Max.Inodes}
	}
	return nil
}

// limits are a Threads' resolved budget: 0 = none.
type limits struct {
	user      Usage
	threads   int
	freeFloor int64
}

// resolveLimits gives Config's zero fields their defaults, which depend on
// dir's filesystem, and its negative ones "none".
func resolveLimits(cfg Config, dir string) (limits, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return limits{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	size := int64(fs.Blocks) * int64(fs.Bsize)
	pick := func(v, def int64) int64 {
		switch {
		case v < 0:
			return 0
		case v == 0:
			return def
		}
		return v
	}
	return limits{
		user: Usage{
			Bytes:  pick(cfg.UserBytes, size/defaultShare),
			Inodes: pick(int64(cfg.UserInodes), int64(fs.Files)/defaultShare), // 0 files (btrfs): no inode limit
		},
		threads:   int(pick(int64(cfg.UserThreads), DefaultUserThreads)),
		freeFloor: pick(cfg.FreeFloor, min(DefaultFreeFloor, size/10)),
	}, nil
}

// usageCache holds each user's last measured usage for usageTTL.
type usageCache struct {
	mu sync.Mutex
	m  map[string]measured
}

type measured struct {
	u  Usage
	at time.Time
}

func (c *usageCache) get(user string) (Usage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[user]
	if !ok || time.Since(e.at) > usageTTL {
		return Usage{}, false
	}
	return e.u, true
}

func (c *usageCache) put(user string, u Usage, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]measured{}
	}
	for k, e := range c.m { // a few users at most are fresh: keep it small
		if time.Since(e.at) > usageTTL {
			delete(c.m, k)
		}
	}
	c.m[user] = measured{u, at}
}

// add counts a copy just made into user's fresh measurement, if any.
func (c *usageCache) add(user string, u Usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[user]; ok {
		e.u = e.u.plus(u)
		c.m[user] = e
	}
}

func (c *usageCache) drop(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, user)
}

// AdmitThread refuses (BudgetError) a thread about to get its data on the
// host when it has none yet and user already has Config.UserThreads
// threads with data (pool.Deps.NewThread).
func (t *Threads) AdmitThread(_ context.Context, user, thread string) error {
	if t.limits.threads == 0 {
		return nil
	}
	dir := filepath.Dir(t.Workspace(user, thread))
	if err := unix.Access(dir, unix.F_OK); err == nil {
		return nil
	}
	return t.roomForThread(user)
}

// roomForThread refuses (BudgetError) one more thread with data for user
// when it has Config.UserThreads already.
func (t *Threads) roomForThread(user string) error {
	names, err := listNames(filepath.Join(t.dataDir, "users", user, "threads"))
	if err != nil {
		return err
	}
	if len(names) >= t.limits.threads {
		return &BudgetError{Limit: LimitUserThreads, Used: int64(len(names)), Need: 1, Max: int64(t.limits.threads)}
	}
	return nil
}

// userUsage is what user's checkpoints and thread data take, measured by a
// walk (cached for usageTTL).
func (t *Threads) userUsage(ctx context.Context, user string) (Usage, error) {
	if u, ok := t.usage.get(user); ok {
		return u, nil
	}
	start := time.Now()
	var u Usage
	seen := map[fileKey]struct{}{}
	for _, dir := range []string{filepath.Join(t.dataDir, "checkpoints", user), filepath.Join(t.dataDir, "users", user)} {
		if err := measurePath(ctx, dir, seen, &u); err != nil {
			return Usage{}, fmt.Errorf("measure %s's disk usage: %w", user, err)
		}
	}
	t.usage.put(user, u, start)
	return u, nil
}

// admit checks a copy that adds need for user against the budget before
// anything is made, and returns the Budget the copy runs under.
// newThread: the copy gives the user one more thread with data.
func (t *Threads) admit(ctx context.Context, user string, need Usage, newThread bool) (Budget, error) {
	if newThread && t.limits.threads > 0 {
		if err := t.roomForThread(user); err != nil {
			return Budget{}, err
		}
	}
	if t.limits.freeFloor > 0 {
		var fs unix.Statfs_t
		if err := unix.Statfs(t.dataDir, &fs); err != nil {
			return Budget{}, fmt.Errorf("statfs data_dir: %w", err)
		}
		free := int64(fs.Bavail) * int64(fs.Bsize)
		if free-need.Bytes < t.limits.freeFloor {
			return Budget{}, &BudgetError{Limit: LimitFreeFloor, Used: free, Need: need.Bytes, Max: t.limits.freeFloor}
		}
	}
	used, err := t.userUsage(ctx, user)
	if err != nil {
		return Budget{}, err
	}
	b := Budget{Max: t.limits.user, Used: used}
	return b, b.check(need)
}

// measurePath adds what the tree at path allocates to u (nothing if path
// is missing), never following a symlink.
func measurePath(ctx context.Context, path string, seen map[fileKey]struct{}, u *Usage) error {
	fd, err := openDirAt(unix.AT_FDCWD, path)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return measure(ctx, fd, -1, seen, u, 1, nil)
}

// measure adds the entries below dir to u. Entries that vanish or cannot
// be read are left out (the copy then meets them, and its own count).
// shared, when set, leaves out the regular files a copy would link to
// their copy in prev (the same directory in the previous checkpoint).
func measure(ctx context.Context, dir, prev int, seen map[fileKey]struct{}, u *Usage, depth int,
	shared func(prev int, name string, st stat) bool) error {
	if depth > MaxDepth {
		return ErrTooDeep
	}
	names, err := readNames(dir)
	if err != nil {
		return nil
	}
	for i, name := range names {
		if i%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		st, err := lstatAt(dir, name)
		if err != nil {
			continue
		}
		if shared != nil && st.typ() == unix.S_IFREG && shared(prev, name, st) {
			continue
		}
		if !st.isDir() && st.nlink > 1 {
			k := fileKey{st.dev, st.ino}
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
		}
		u.Bytes += st.blocks * 512
		u.Inodes++
		if !st.isDir() {
			continue
		}
		sub, err := openDirAt(dir, name)
		if err != nil {
			continue
		}
		psub := -1
		if prev >= 0 {
			if fd, err := openDirAt(prev, name); err == nil {
				psub = fd
			}
		}
		err = measure(ctx, sub, psub, seen, u, depth+1, shared)
		unix.Close(sub)
		if psub >= 0 {
			unix.Close(psub)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// listNames is dir's entries; none when dir is missing.
func listNames(dir string) ([]string, error) {
	fd, err := openDirAt(unix.AT_FDCWD, dir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readNames(fd)
}
