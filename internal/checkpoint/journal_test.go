package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// journalFixture is a thread with a workspace and a stage dir beside it
// that a journal may name.
type journalFixture struct {
	dataDir, root, ws, stage string
	j                        journal
}

func newJournalFixture(t *testing.T) journalFixture {
	t.Helper()
	dataDir := tempDir(t)
	threads, err := NewThreads(dataDir, Config{})
	must(t, err)
	ws := threads.Workspace(crashUser, crashThread)
	write(t, filepath.Join(ws, "a.txt"), "a", 0o644)
	write(t, filepath.Join(ws, "d", "b.txt"), "b", 0o644)
	stage := filepath.Join(filepath.Dir(ws), stagePrefix+"0123456789abcdef")
	write(t, filepath.Join(stage, "a.txt"), "staged", 0o644)
	root := filepath.Join(dataDir, "checkpoints", crashUser, crashThread)
	must(t, os.MkdirAll(root, 0o700))
	st := lstat(t, ws)
	return journalFixture{dataDir: dataDir, root: root, ws: ws, stage: stage, j: journal{
		Phase: phaseSwap, Workspace: ws, Dev: st.dev, Ino: st.ino,
		Stage: filepath.Base(stage), Trash: trashPrefix + "fedcba9876543210",
		Steps: []step{{Op: opMove, Path: "a.txt", From: inWorkspace, To: inTrash}},
	}}
}

func lstat(t *testing.T, p string) stat {
	t.Helper()
	st, err := lstatAt(unix.AT_FDCWD, p)
	must(t, err)
	return st
}

func (f journalFixture) put(t *testing.T, name string, data []byte) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(f.root, name), data, 0o600))
}

func (f journalFixture) exists(name string) bool {
	_, err := os.Lstat(filepath.Join(f.root, name))
	return err == nil
}

// A journal that cannot be trusted is never acted on: a temp version a
// crash cut short (the journal is replaced whole, so no rename had been
// done on its account) is dropped and the workspace left as it is; a
// journal that does not parse or names a path outside the trees is kept,
// nothing it names is touched, and the thread's store refuses to open
// (errJournal) so no restore or checkpoint runs on a workspace that may be
// half swapped; the gateway's Settle reports it.
func TestCorruptJournal(t *testing.T) {
	t.Parallel()
	valid := func(f journalFixture) []byte {
		b, err := json.Marshal(f.j)
		if err != nil {
			panic(err)
		}
		return b
	}
	edited := func(edit func(*journal)) func(journalFixture) []byte {
		return func(f journalFixture) []byte {
			edit(&f.j)
			return valid(f)
		}
	}
	for _, tc := range []struct {
		name    string
		tmp     bool // written as the temp version, no journal
		content func(journalFixture) []byte
	}{
		{"half-written temp version", true, func(f journalFixture) []byte { b := valid(f); return b[:len(b)/2] }},
		{"truncated", false, func(f journalFixture) []byte { b := valid(f); return b[:len(b)-7] }},
		{"empty", false, func(journalFixture) []byte { return nil }},
		{"not JSON", false, func(journalFixture) []byte { return []byte("\x00\x01garbage") }},
		{"unknown phase", false, edited(func(j *journal) { j.Phase = "later" })},
		{"unknown step", false, edited(func(j *journal) { j.Steps[0].Op = "unlink" })},
		{"step path out of the trees", false, edited(func(j *journal) { j.Steps[0].Path = "../../outside" })},
		{"absolute step path", false, edited(func(j *journal) { j.Steps[0].Path = "/etc/passwd" })},
		{"NUL leading a step path", false, edited(func(j *journal) { j.Steps[0].Path = "\x00" + j.Steps[0].Path })},
		{"move into the stage", false, edited(func(j *journal) { j.Steps[0].To = inStage })},
		{"stage not beside the workspace", false, edited(func(j *journal) { j.Stage = "../" + j.Stage })},
		{"trash not a temp name", false, edited(func(j *journal) { j.Trash = "user-data" })},
		{"relative workspace", false, edited(func(j *journal) { j.Workspace = "thread/user-data" })},
		{"enter without attributes", false, edited(func(j *journal) { j.Steps = []step{{Op: opEnter}} })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newJournalFixture(t)
			before, stageBefore := manifest(t, f.ws), manifest(t, f.stage)
			name := journalName
			if tc.tmp {
				name = journalTmpName
			}
			f.put(t, name, tc.content(f))

			threads, err := NewThreads(f.dataDir, Config{})
			must(t, err)
			settled, serr := threads.Settle(ctxT(t))
			_, oerr := Open(f.root, Config{})
			if tc.tmp {
				if serr != nil || oerr != nil || f.exists(journalTmpName) {
					t.Fatalf("temp version: Settle %v, Open %v, temp kept %v", serr, oerr, f.exists(journalTmpName))
				}
			} else {
				if !errors.Is(serr, errJournal) || settled != 0 || !errors.Is(oerr, errJournal) || !f.exists(journalName) {
					t.Fatalf("Settle: %d, %v; Open: %v; journal kept %v", settled, serr, oerr, f.exists(journalName))
				}
				if !strings.Contains(serr.Error(), crashUser+"/"+crashThread) {
					t.Fatalf("Settle's error does not name the thread: %v", serr)
				}
			}
			sameManifest(t, "workspace", before, manifest(t, f.ws))
			sameManifest(t, "stage", stageBefore, manifest(t, f.stage))
		})
	}
}

// The journal of a restore that is running (its lock held, here by this
// test) is left to it; once the lock is free, opening the store settles it.
func TestLiveJournalLeftAlone(t *testing.T) {
	t.Parallel()
	f := newJournalFixture(t)
	f.j.Phase, f.j.Steps = phaseStage, nil
	s := openStore(t, f.root, Config{})
	must(t, s.writeJournal(&f.j))
	unlock, err := s.flock(ctxT(t), restoreLockName, unix.LOCK_EX)
	must(t, err)
	openStore(t, f.root, Config{})
	if _, err := os.Lstat(f.stage); err != nil || !f.exists(journalName) {
		t.Fatalf("a running restore's stage (%v) or journal (%v) was touched", err, f.exists(journalName))
	}
	unlock()
	openStore(t, f.root, Config{})
	if _, err := os.Lstat(f.stage); !errors.Is(err, os.ErrNotExist) || f.exists(journalName) {
		t.Fatalf("a dead restore's stage (%v) or journal (%v) was kept", err, f.exists(journalName))
	}
}

// A journal of a restore that had not begun its swap, whose thread was
// removed since, names nothing left to settle: it is dropped and the store
// opens.
func TestJournalOfARemovedThreadDropped(t *testing.T) {
	t.Parallel()
	f := newJournalFixture(t)
	f.j.Phase, f.j.Steps = phaseStage, nil
	s := openStore(t, f.root, Config{})
	must(t, s.writeJournal(&f.j))
	must(t, os.RemoveAll(filepath.Dir(f.ws)))
	if _, err := Open(f.root, Config{}); err != nil || f.exists(journalName) {
		t.Fatalf("Open: %v; journal kept %v", err, f.exists(journalName))
	}
}
