// Package checkpoint snapshots a thread's workspace directory on the
// gateway host, restores a snapshot into it, and copies trees for forks.
//
// A Store keeps the checkpoints of one workspace under a root directory of
// the caller's choosing:
//
//	root/.lock                 flock: Create, Delete, Prune exclusive; Restore, CopyOut shared
//	root/ck-<ms>-<hex>/meta.json
//	root/ck-<ms>-<hex>/tree/   the snapshot, with the workspace's modes, times and (as root) owners
//	root/.tmp-*                a Create or Delete in progress, or one a crash left
//	root/.restore, .restore.*  a Restore's journal and its lock (journal.go)
//
// Create builds into a .tmp- dir, writes meta.json last and renames the dir
// into place, so a process crash never leaves a listed half checkpoint
// (List ignores the rest, the next Create or Prune removes it). Power loss
// is the filesystem's to survive: files are not fsynced one by one.
//
// The workspace is written by untrusted sandbox code, so the engine never
// follows a symlink in it (a link is stored and restored as a link, its
// target never read), never opens anything there but regular files
// (non-blocking) and directories, recreates FIFOs instead of reading them,
// and skips sockets and devices. Hard links inside the workspace are kept
// (the names of one file share one copy) and holes stay holes, so a copy
// never allocates more than its source. Extended attributes and ACLs are
// not kept. Owners are kept only when the gateway runs as root.
//
// Unchanged files (same size, mtime, mode and, as root, owner) are
// hard-linked to the previous checkpoint's copy, like rsync --link-dest;
// checkpoint files are never written after creation, and a checkpoint file
// is never linked to a live workspace file. Everything else is cloned
// (FICLONE) where the filesystem can, else copied in the kernel.
package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/api"

	"golang.org/x/sys/unix"
)

// Method is how file data gets into a copy.
type Method string

const (
	// MethodReflink clones files (FICLONE): no data copied, no space used
	// until one side changes. XFS with reflink=1, Btrfs.
	MethodReflink Method = "reflink"
	// MethodCopy copies the data (copy_file_range).
	MethodCopy Method = "copy"
)

// Defaults of Config.
const (
	DefaultKeep   = 20
	DefaultMaxAge = 7 * 24 * time.Hour
	// MaxLabelLen bounds a checkpoint's label (bytes).
	MaxLabelLen = 256
)

var (
	// ErrNotFound: no checkpoint with this id.
	ErrNotFound = errors.New("checkpoint not found")
	// ErrNoThread: the thread has no workspace (it never ran, or was
	// removed), so there is nothing to checkpoint, fork or list: told
	// apart from ErrNotFound, which would send its caller hunting for an id.
	ErrNoThread = errors.New("the thread has no workspace yet")
	// ErrBadID: not a checkpoint id ("ck-" + 13 digits + "-" + 6 hex);
	// nothing is looked up.
	ErrBadID = errors.New("invalid checkpoint id")
	// ErrBadLabel: a label longer than MaxLabelLen, not UTF-8, or with
	// control characters.
	ErrBadLabel = errors.New("invalid checkpoint label")
	// ErrNotDir: a workspace, root or destination that is a symlink or not
	// a directory.
	ErrNotDir = errors.New("not a directory (or a symlink)")
	// ErrNotEmpty: a copy destination that already has entries.
	ErrNotEmpty = errors.New("destination not empty")
	// ErrTooDeep: a tree nested deeper than MaxDepth.
	ErrTooDeep = errors.New("directory tree too deep")
	// ErrRetention: Create made its checkpoint (the checkpoint returned is
	// valid) but could not delete one that retention drops; the next
	// Create or Prune tries again.
	ErrRetention = errors.New("checkpoint retention")
)

// errCorrupt: a checkpoint dir whose meta.json does not parse (a power
// loss before it reached the disk): List leaves it out, Get reports it,
// Delete removes it.
var errCorrupt = errors.New("corrupt " + metaName)

// Config of a Store. The zero value is the default.
type Config struct {
	// Keep is how many checkpoints are kept, newest first: 0 is
	// DefaultKeep, negative is unlimited.
	Keep int
	// MaxAge drops checkpoints older than this: 0 is DefaultMaxAge,
	// negative is unlimited.
	MaxAge time.Duration
	// Method: "" detects it on the root at Open (Detect).
	Method Method
	// Clock gives CreatedAt, the ids' time and ages; nil is time.Now.
	Clock func() time.Time

	// The per-user disk budget of Threads (budget.go), checked before a
	// checkpoint or fork copies anything. UserBytes and UserInodes bound
	// one user's checkpoints and thread data together: 0 is a quarter of
	// data_dir's filesystem (its size, its inodes). UserThreads bounds the
	// user's threads with data a fork may add to: 0 is DefaultUserThreads.
	// FreeFloor is the free space a copy must leave on data_dir's
	// filesystem: 0 is DefaultFreeFloor, or a tenth of a smaller
	// filesystem. Negative: no limit.
	UserBytes   int64
	UserInodes  int
	UserThreads int
	FreeFloor   int64
}

// Validate reports a Config that cannot be used.
func (c Config) Validate() error {
	switch c.Method {
	case "", MethodReflink, MethodCopy:
		return nil
	}
	return fmt.Errorf("checkpoint method %q: want %q or %q", c.Method, MethodReflink, MethodCopy)
}

func (c Config) withDefaults() Config {
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// meta is meta.json: the checkpoint as the API describes it, and what
// the next Create needs.
type meta struct {
	api.Checkpoint
	// CopyStarted (unix ns, the real clock, not Config.Clock) is when the
	// workspace started to be read: files modified since, within a
	// timestamp tick of it, are never linked by the next checkpoint.
	CopyStarted int64 `json:"copy_started_ns"`
}

const (
	metaName  = "meta.json"
	treeName  = "tree"
	lockName  = ".lock"
	tmpPrefix = ".tmp-"
	idPrefix  = "ck-"
	// racyMargin covers filesystem timestamp granularity (a coarse clock
	// tick, or seconds on some filesystems) for linkBefore.
	racyMargin = 2 * time.Second
)

// Store is the checkpoints under one root. Its methods may be called
// concurrently, from one or several processes (a file lock orders them).
type Store struct {
	root string
	cfg  Config
	// budget bounds this Store's copies (Threads sets it per call); added
	// is what the last Create or CopyOut made.
	budget Budget
	added  Usage
	// admit, when set, is asked before Create copies anything, with what
	// the copy would add (files it would link to the previous checkpoint
	// left out), for the Budget to copy under.
	admit func(need Usage) (Budget, error)
}

// Open returns the Store at root, creating root (0700: checkpoints keep
// the workspace's modes, so root must keep others out) if missing. root
// must not be a symlink. It is cheap unless cfg.Method is "" (one Detect)
// or it finds the journal of a Restore that a crash stopped (journal.go),
// which it settles first: an error then means the thread's workspace may
// be half swapped, and nothing of the Store should be used.
func Open(root string, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint root: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint root: %w", err)
	}
	if fi, err := os.Lstat(root); err != nil {
		return nil, fmt.Errorf("checkpoint root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("checkpoint root %s: %w", root, ErrNotDir)
	}
	if cfg.Method == "" {
		if cfg.Method, err = Detect(root); err != nil {
			return nil, err
		}
	}
	s := &Store{root: root, cfg: cfg}
	// A restore a crash stopped is settled before anything is served.
	if err := s.settleIdle(context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

// Method is the copy method the Store starts with (each operation falls
// back to MethodCopy when a clone is refused, e.g. across filesystems).
func (s *Store) Method() Method { return s.cfg.Method }

// Detect reports whether dir's filesystem clones files: it makes two temp
// files in dir, clones one into the other and removes both.
func Detect(dir string) (Method, error) {
	a, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return "", fmt.Errorf("reflink probe: %w", err)
	}
	defer os.Remove(a.Name())
	defer a.Close()
	b, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return "", fmt.Errorf("reflink probe: %w", err)
	}
	defer os.Remove(b.Name())
	defer b.Close()
	if _, err := a.WriteString("probe"); err != nil {
		return "", fmt.Errorf("reflink probe: %w", err)
	}
	if clone(int(b.Fd()), int(a.Fd())) != nil {
		return MethodCopy, nil
	}
	return MethodReflink, nil
}

// ValidID reports whether id has the form of a checkpoint id; every method
// taking an id refuses others with ErrBadID before touching the disk.
func ValidID(id string) bool {
	if len(id) != len(idPrefix)+13+1+6 || !strings.HasPrefix(id, idPrefix) || id[16] != '-' {
		return false
	}
	for i, r := range id[len(idPrefix):] {
		switch {
		case i == 13:
		case i < 13 && r >= '0' && r <= '9':
		case i > 13 && (r >= '0' && r <= '9' || r >= 'a' && r <= 'f'):
		default:
			return false
		}
	}
	return true
}

// newID is time-sortable and unguessable enough (24 random bits under a
// millisecond stamp), and later than newest so List's order is creation
// order even when the clock stands still or steps back.
func (s *Store) newID(newest string) (string, error) {
	ms := max(s.cfg.Clock().UnixMilli(), 0)
	if newest != "" {
		if last, err := strconv.ParseInt(newest[len(idPrefix):len(idPrefix)+13], 10, 64); err == nil && ms <= last {
			ms = last + 1
		}
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s%013d-%s", idPrefix, ms, hex.EncodeToString(b[:])), nil
}

func validLabel(l string) bool {
	if len(l) > MaxLabelLen || !utf8.ValidString(l) {
		return false
	}
	return strings.IndexFunc(l, unicode.IsControl) < 0
}

// List returns the complete checkpoints, newest first.
func (s *Store) List(ctx context.Context) ([]api.Checkpoint, error) {
	metas, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	infos := make([]api.Checkpoint, len(metas))
	for i, m := range metas {
		infos[i] = m.Checkpoint
	}
	return infos, nil
}

func (s *Store) list(ctx context.Context) ([]meta, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []meta
	for _, e := range entries {
		if !ValidID(e.Name()) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := s.readMeta(e.Name())
		if errors.Is(err, ErrNotFound) || errors.Is(err, errCorrupt) {
			continue // deleted meanwhile, or not complete (Get says why)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, nil
}

// Get returns one checkpoint.
func (s *Store) Get(ctx context.Context, id string) (api.Checkpoint, error) {
	if !ValidID(id) {
		return api.Checkpoint{}, ErrBadID
	}
	if err := ctx.Err(); err != nil {
		return api.Checkpoint{}, err
	}
	m, err := s.readMeta(id)
	return m.Checkpoint, err
}

func (s *Store) readMeta(id string) (meta, error) {
	f, err := os.OpenFile(filepath.Join(s.root, id, metaName), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return meta{}, ErrNotFound
	}
	if err != nil {
		return meta{}, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return meta{}, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil || m.ID != id {
		return meta{}, fmt.Errorf("checkpoint %s: %w", id, errCorrupt)
	}
	return m, nil
}

// Delete removes a checkpoint: ErrNotFound if there is none. Files it
// shares with other checkpoints stay with them.
func (s *Store) Delete(ctx context.Context, id string) error {
	if !ValidID(id) {
		return ErrBadID
	}
	unlock, err := s.lock(ctx, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Lstat(filepath.Join(s.root, id)); errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	return s.remove(ctx, id)
}

// remove takes a checkpoint out of List at once (a rename), then deletes
// its tree; a crash in between leaves a .tmp- dir for the next cleanup.
func (s *Store) remove(ctx context.Context, id string) error {
	gone := tmpPrefix + "del-" + id
	if err := os.Rename(filepath.Join(s.root, id), filepath.Join(s.root, gone)); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	if err := removePath(ctx, filepath.Join(s.root, gone)); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	return nil
}

// Prune removes what a crash left and the checkpoints retention drops
// (Config.Keep, Config.MaxAge); it returns how many checkpoints it deleted.
func (s *Store) Prune(ctx context.Context) (int, error) {
	unlock, err := s.lock(ctx, unix.LOCK_EX)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if err := s.removeStale(ctx); err != nil {
		return 0, err
	}
	return s.retain(ctx, "")
}

// retain deletes the checkpoints beyond Keep or older than MaxAge, never
// keep (the one just made). Called under the exclusive lock.
func (s *Store) retain(ctx context.Context, keep string) (int, error) {
	metas, err := s.list(ctx)
	if err != nil {
		return 0, err
	}
	now := s.cfg.Clock()
	deleted := 0
	for i, m := range metas {
		if m.ID == keep {
			continue
		}
		overCount := s.cfg.Keep > 0 && i >= s.cfg.Keep
		tooOld := s.cfg.MaxAge > 0 && now.Sub(m.CreatedAt) > s.cfg.MaxAge
		if !overCount && !tooOld {
			continue
		}
		if err := s.remove(ctx, m.ID); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

// removeStale deletes the .tmp- dirs of Creates and Deletes that did not
// finish. Under the exclusive lock none is in progress.
func (s *Store) removeStale(ctx context.Context) error {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return fmt.Errorf("list checkpoint root: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := removePath(ctx, filepath.Join(s.root, e.Name())); err != nil {
				return fmt.Errorf("remove stale %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// lock takes root/.lock (LOCK_EX or LOCK_SH); the returned func releases
// it.
func (s *Store) lock(ctx context.Context, how int) (func(), error) {
	return s.flock(ctx, lockName, how)
}

// flock takes the lock file root/name (LOCK_EX or LOCK_SH), polling so
// ctx can end the wait, or trying once when how has LOCK_NB (a held lock
// is then unix.EWOULDBLOCK); the returned func releases it.
func (s *Store) flock(ctx context.Context, name string, how int) (func(), error) {
	fd, err := unix.Open(filepath.Join(s.root, name), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("checkpoint lock: %w", err)
	}
	wait := time.Millisecond
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if errors.Is(err, unix.EWOULDBLOCK) && how&unix.LOCK_NB != 0 {
			unix.Close(fd)
			return nil, err
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			unix.Close(fd)
			return nil, fmt.Errorf("checkpoint lock: %w", err)
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return nil, ctx.Err()
		case <-time.After(wait):
			wait = min(2*wait, 50*time.Millisecond)
		}
	}
}
