package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A Restore keeps its journal on disk, in the checkpoint root (which no
// sandbox mounts), so a gateway killed in the middle of a swap leaves a
// record of it that the next one settles before serving the thread:
//
//	root/.restore       the journal, replaced whole at each phase
//	root/.restore.tmp   the next version being written (a crash may leave it)
//	root/.restore.lock  flock: held by the Restore that owns the journal
//
// Each version is written to the temp file, fsynced, renamed over the
// journal and the root fsynced, so the journal is always one complete
// version; the "swap" version, which names every step, is durable before
// the first rename. A journal found with its lock free belongs to a
// process that died; settling it rolls an unfinished swap back. Rolling
// back, not forward: every undo is the reverse of a rename the kernel
// already accepted in the same directories, so it cannot meet the failure
// that stopped a live swap (a mount point in the workspace, EBUSY), and
// the restore's caller never got an answer, so the thread is left as it
// was when the request came.
const (
	journalName     = ".restore"
	journalTmpName  = ".restore.tmp"
	restoreLockName = ".restore.lock"
	// maxJournal bounds what is read back: a step per entry moved.
	maxJournal = 1 << 30
)

// errJournal: a journal that does not parse or names a path it may not.
// It is kept, and the thread's restores and checkpoints refuse until an
// operator looks: nothing says which steps it held.
var errJournal = errors.New("corrupt restore journal")

// phase is how far a Restore got, and what settling its journal does.
type phase string

const (
	// phaseStage: the stage (and maybe the trash) is being made and the
	// workspace is untouched: remove them.
	phaseStage phase = "stage"
	// phaseSwap: the steps are being done: undo those done, then clean.
	phaseSwap phase = "swap"
	// phaseClean: the swap is finished or undone: remove stage and trash.
	phaseClean phase = "clean"
)

// journal is one Restore's record. Stage and Trash are dirs beside the
// workspace, in its parent (the thread dir, the gateway's own).
type journal struct {
	Phase     phase  `json:"phase"`
	Workspace string `json:"workspace"` // absolute
	Dev       uint64 `json:"dev"`       // the workspace dir's device and inode:
	Ino       uint64 `json:"ino"`       // a dir put in its place is not touched
	Stage     string `json:"stage"`
	Trash     string `json:"trash"`
	Steps     []step `json:"steps,omitempty"`
}

// The three trees a step names.
const (
	inWorkspace = "ws"
	inStage     = "stage"
	inTrash     = "trash"
)

// The kinds of step, in the order the swap does them for each dir it
// merges: enter, moves out, (mkdir, the kept dir's own steps) for each
// kept dir, moves in, attrs.
const (
	// opEnter: the workspace dir Path is about to be merged (a non-root
	// gateway gives it and the staged one u+wx). Attrs are its own, put
	// back when the swap is undone.
	opEnter = "enter"
	// opMove: rename Path from the tree From to the tree To. Done when it
	// is in To and not in From. Perm: a moved dir's mode, put back when
	// undone (a non-root gateway lends the dir u+w to move it).
	opMove = "move"
	// opMkdir: make the dir Path in the trash, to receive what moves out
	// of the kept workspace dir Path.
	opMkdir = "mkdir"
	// opAttrs: give the workspace dir Path the staged dir's Attrs.
	opAttrs = "attrs"
)

// step is one step of a swap. Path is below the trees' roots ("" is the
// workspace itself, for enter and attrs).
type step struct {
	Op    string    `json:"op"`
	Path  string    `json:"path,omitempty"`
	From  string    `json:"from,omitempty"`
	To    string    `json:"to,omitempty"`
	Perm  uint32    `json:"perm,omitempty"`
	Attrs *dirAttrs `json:"attrs,omitempty"`
}

// dirAttrs are what a swap sets on a workspace dir.
type dirAttrs struct {
	Mode     uint32 `json:"mode"`
	UID, GID uint32
	Atime    int64 `json:"atime_ns"`
	Mtime    int64 `json:"mtime_ns"`
}

func attrsOf(st stat) *dirAttrs {
	return &dirAttrs{Mode: st.perm(), UID: st.uid, GID: st.gid, Atime: st.atim.Nano(), Mtime: st.mtim.Nano()}
}

func (a *dirAttrs) stat() stat {
	return stat{mode: a.Mode, uid: a.UID, gid: a.GID, atim: unix.NsecToTimespec(a.Atime), mtim: unix.NsecToTimespec(a.Mtime)}
}

// valid checks what settling a journal trusts: names that stay beside the
// workspace and paths that stay below the trees.
func (j *journal) valid() bool {
	if !filepath.IsAbs(j.Workspace) || filepath.Clean(j.Workspace) != j.Workspace ||
		!tempName(j.Stage, stagePrefix) || !tempName(j.Trash, trashPrefix) {
		return false
	}
	switch j.Phase {
	case phaseStage, phaseClean:
		return len(j.Steps) == 0
	case phaseSwap:
	default:
		return false
	}
	for _, st := range j.Steps {
		if !st.valid() {
			return false
		}
	}
	return true
}

func (st step) valid() bool {
	if st.Path != "" && !validRel(st.Path) {
		return false
	}
	switch st.Op {
	case opEnter, opAttrs:
		return st.Attrs != nil
	case opMkdir:
		return st.Path != ""
	case opMove:
		return st.Path != "" && (st.From == inWorkspace && st.To == inTrash || st.From == inStage && st.To == inWorkspace)
	}
	return false
}

// validRel: a relative path of plain names, none "." or "..".
func validRel(p string) bool {
	if path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return false
	}
	for _, n := range strings.Split(p, "/") {
		if n == "" || n == "." || n == ".." {
			return false
		}
	}
	return true
}

// tempName: prefix followed by randHex's 16 hex digits.
func tempName(name, prefix string) bool {
	hexPart, ok := strings.CutPrefix(name, prefix)
	if !ok || len(hexPart) != 16 {
		return false
	}
	return strings.Trim(hexPart, "0123456789abcdef") == ""
}

// writeJournal makes j the journal, durably: a crash leaves the previous
// version or this one, never part of one.
func (s *Store) writeJournal(j *journal) error {
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.root, journalTmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("restore journal: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.root, journalName))
	}
	if err == nil {
		err = syncDir(s.root)
	}
	if err != nil {
		return fmt.Errorf("restore journal: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	fd, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// readJournal returns the journal, fs.ErrNotExist when there is none.
func (s *Store) readJournal() (*journal, error) {
	f, err := os.OpenFile(filepath.Join(s.root, journalName), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJournal))
	if err != nil {
		return nil, fmt.Errorf("restore journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(data, &j); err != nil || !j.valid() {
		return nil, fmt.Errorf("%s: %w", filepath.Join(s.root, journalName), errJournal)
	}
	return &j, nil
}

// dropJournal removes the journal (and a temp version a crash left).
func (s *Store) dropJournal() error {
	_ = os.Remove(filepath.Join(s.root, journalTmpName))
	if err := os.Remove(filepath.Join(s.root, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore journal: %w", err)
	}
	return nil
}

// settleIdle settles a journal whose Restore died (its lock is free); a
// journal whose Restore is running is left to it.
func (s *Store) settleIdle(ctx context.Context) error {
	if !s.hasJournal() {
		return nil
	}
	unlock, err := s.flock(ctx, restoreLockName, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	return s.settle(ctx)
}

// hasJournal: a journal, or a temp version of one, is there.
func (s *Store) hasJournal() bool {
	for _, n := range []string{journalName, journalTmpName} {
		if _, err := os.Lstat(filepath.Join(s.root, n)); err == nil {
			return true
		}
	}
	return false
}

// settle brings the journal's workspace to a whole tree (rolling back an
// unfinished swap), removes the stage and trash, then the journal. The
// caller holds the restore lock. A journal it cannot settle is kept.
func (s *Store) settle(ctx context.Context) error {
	j, err := s.readJournal()
	if errors.Is(err, fs.ErrNotExist) {
		return s.dropJournal() // a temp version alone: nothing was renamed
	}
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx) // half a settlement helps nobody
	parent, err := unix.Open(filepath.Dir(j.Workspace), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && j.Phase != phaseSwap { // the thread was removed since
		return s.dropJournal()
	}
	if err != nil {
		return fmt.Errorf("settle restore of %s: %w", j.Workspace, err)
	}
	defer unix.Close(parent)
	if j.Phase == phaseSwap {
		if err := s.rollBack(parent, j); err != nil {
			return fmt.Errorf("settle restore of %s: %w (kept %s, %s and %s)", j.Workspace, err,
				filepath.Join(s.root, journalName), j.Stage, j.Trash)
		}
		j.Phase, j.Steps = phaseClean, nil
		if err := s.writeJournal(j); err != nil {
			return err
		}
		hook()
	}
	return s.clean(ctx, parent, j)
}

// rollBack undoes the journal's steps that were done.
func (s *Store) rollBack(parent int, j *journal) error {
	base := filepath.Base(j.Workspace)
	ws, err := openDirAt(parent, base)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(ws)
	if st, err := fstat(ws); err != nil || st.dev != j.Dev || st.ino != j.Ino {
		return fmt.Errorf("workspace %s was replaced: %w", j.Workspace, ErrNotDir)
	}
	stage, err := openDirAt(parent, j.Stage)
	if err != nil {
		return fmt.Errorf("open stage: %w", err)
	}
	defer unix.Close(stage)
	trash, err := openDirAt(parent, j.Trash)
	if err != nil {
		return fmt.Errorf("open trash: %w", err)
	}
	defer unix.Close(trash)
	return (&swapper{ws: ws, stage: stage, trash: trash, parent: parent, base: base, chown: isRoot()}).undo(j.Steps)
}

// clean removes the journal's stage and trash, then the journal, with a
// hook point after each removal.
func (s *Store) clean(ctx context.Context, parent int, j *journal) error {
	for _, n := range []string{j.Stage, j.Trash} {
		if err := removeAt(ctx, parent, n); err != nil {
			return fmt.Errorf("restore: remove temp dir: %w", err)
		}
		hook()
	}
	return s.dropJournal()
}

// stepHook, when set (tests), runs at each point of a Restore a crash
// could stop it at: after each journal version and each step or removal.
var stepHook func()

func hook() {
	if stepHook != nil {
		stepHook()
	}
}
