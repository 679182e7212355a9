package checkpoint

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// swap merges the stage into the workspace ws (base in parent) and gives
// ws want's mode, owner and times, journaled: it makes the trash, plans
// every step, makes the plan the journal, does the steps and marks the
// journal clean. A failed step undoes the steps; j.Phase is left phaseSwap
// only when that undo failed too.
func (s *Store) swap(ws, stage, parent int, base string, want stat, j *journal) error {
	if err := unix.Mkdirat(parent, j.Trash, 0o700); err != nil {
		return fmt.Errorf("trash dir: %w", err)
	}
	hook()
	trash, err := openDirAt(parent, j.Trash)
	if err != nil {
		return fmt.Errorf("trash dir: %w", err)
	}
	defer unix.Close(trash)
	steps, err := plan(ws, stage, want)
	if err != nil {
		return fmt.Errorf("plan the swap: %w", err)
	}
	if err := s.writeJournal(&journal{Phase: phaseSwap, Workspace: j.Workspace, Dev: j.Dev, Ino: j.Ino,
		Stage: j.Stage, Trash: j.Trash, Steps: steps}); err != nil {
		return err
	}
	j.Phase, j.Steps = phaseSwap, steps
	hook()
	w := &swapper{ws: ws, stage: stage, trash: trash, parent: parent, base: base, chown: isRoot()}
	err = w.do(steps)
	if err != nil {
		if uerr := w.undo(steps); uerr != nil {
			return fmt.Errorf("swap: %w; rollback incomplete: %w (kept the journal in %s, %s and %s)",
				err, uerr, s.root, j.Stage, j.Trash)
		}
		err = fmt.Errorf("swap (rolled back): %w", err)
	}
	clean := &journal{Phase: phaseClean, Workspace: j.Workspace, Dev: j.Dev, Ino: j.Ino, Stage: j.Stage, Trash: j.Trash}
	if werr := s.writeJournal(clean); werr != nil {
		return errors.Join(err, werr) // still phaseSwap: the next settle rolls back
	}
	*j = *clean
	hook()
	return err
}

// planner lists a swap's steps (see the op constants) before any is done,
// the workspace and stage being still as they are (the sandbox frozen).
type planner struct{ steps []step }

// plan is the steps that make the workspace ws hold what the stage holds
// and give it want's attributes.
func plan(ws, stage int, want stat) ([]step, error) {
	old, err := fstat(ws)
	if err != nil {
		return nil, err
	}
	p := &planner{steps: []step{{Op: opEnter, Attrs: attrsOf(old)}}}
	if err := p.merge("", ws, stage); err != nil {
		return nil, err
	}
	return append(p.steps, step{Op: opAttrs, Attrs: attrsOf(want)}), nil
}

// merge plans making the workspace dir ws (at rel) hold what the staged
// dir stage holds: entries of ws not kept move to the trash, a dir in both
// is kept and merged in turn, the other staged entries move in.
func (p *planner) merge(rel string, ws, stage int) error {
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
		st, err := lstatAt(ws, n)
		if err != nil {
			return err
		}
		if staged[n] && st.isDir() && isDirAt(stage, n) {
			kept = append(kept, n)
			continue
		}
		mv := step{Op: opMove, Path: path.Join(rel, n), From: inWorkspace, To: inTrash}
		if st.isDir() {
			mv.Perm = st.mode
		}
		p.steps = append(p.steps, mv)
	}
	isKept := make(map[string]bool, len(kept))
	for _, n := range kept {
		isKept[n] = true
		if err := p.mergeDir(path.Join(rel, n), ws, stage, n); err != nil {
			return err
		}
	}
	for _, n := range stNames {
		if !isKept[n] {
			p.steps = append(p.steps, step{Op: opMove, Path: path.Join(rel, n), From: inStage, To: inWorkspace})
		}
	}
	return nil
}

// mergeDir plans the merge of the dir name (at sub), present in ws and
// stage: its trash dir, its own attributes kept for an undo, its entries,
// then the staged dir's attributes.
func (p *planner) mergeDir(sub string, ws, stage int, name string) error {
	wsDir, err := openDirAt(ws, name)
	if err != nil {
		return fmt.Errorf("%s: %w", sub, err)
	}
	defer unix.Close(wsDir)
	stDir, err := openDirAt(stage, name)
	if err != nil {
		return fmt.Errorf("%s: %w", sub, err)
	}
	defer unix.Close(stDir)
	old, err := fstat(wsDir)
	if err != nil {
		return err
	}
	want, err := fstat(stDir)
	if err != nil {
		return err
	}
	p.steps = append(p.steps, step{Op: opMkdir, Path: sub}, step{Op: opEnter, Path: sub, Attrs: attrsOf(old)})
	if err := p.merge(sub, wsDir, stDir); err != nil {
		return err
	}
	p.steps = append(p.steps, step{Op: opAttrs, Path: sub, Attrs: attrsOf(want)})
	return nil
}

func isDirAt(dir int, name string) bool {
	st, err := lstatAt(dir, name)
	return err == nil && st.isDir()
}

// swapper does and undoes a swap's steps on the open workspace, stage and
// trash. Every path is reopened component by component below them
// (openRel, no symlink followed), so a step needs no descriptor kept from
// another, and the same code serves the swap and a later settle.
type swapper struct {
	ws, stage, trash int
	parent           int    // the workspace's parent dir
	base             string // the workspace's name in parent
	chown            bool
}

func (w *swapper) tree(name string) int {
	switch name {
	case inStage:
		return w.stage
	case inTrash:
		return w.trash
	}
	return w.ws
}

// do runs the steps in order, with a hook point after each.
func (w *swapper) do(steps []step) error {
	for _, st := range steps {
		if err := w.doStep(st); err != nil {
			return fmt.Errorf("%s %s: %w", st.Op, st.Path, err)
		}
		hook()
	}
	return nil
}

func (w *swapper) doStep(st step) error {
	switch st.Op {
	case opEnter:
		// Renames in and out need u+wx on both dirs (root needs nothing):
		// the stage is ours, and the workspace dir's mode is set after the
		// merge (or put back by the undo).
		for _, root := range []int{w.ws, w.stage} {
			fd, err := openRel(root, st.Path)
			if err != nil {
				return err
			}
			err = ownerWritable(fd)
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
		return nil
	case opMkdir:
		dir, name := splitRel(st.Path)
		fd, err := openRel(w.trash, dir)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Mkdirat(fd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		return nil
	case opMove:
		dir, name := splitRel(st.Path)
		from, err := openRel(w.tree(st.From), dir)
		if err != nil {
			return err
		}
		defer unix.Close(from)
		to, err := openRel(w.tree(st.To), dir)
		if err != nil {
			return err
		}
		defer unix.Close(to)
		return renameEntry(from, to, name)
	case opAttrs:
		return w.setAttrs(st.Path, st.Attrs.stat())
	}
	return fmt.Errorf("unknown step %q", st.Op)
}

// undo reverses the steps that were done, whichever they are: the moves
// in reverse order, then every entered dir gets its own attributes back. The trash's
// dirs stay for the cleanup.
func (w *swapper) undo(steps []step) error {
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Op != opMove {
			continue
		}
		if err := w.unmove(steps[i]); err != nil {
			errs = append(errs, fmt.Errorf("undo move %s: %w", steps[i].Path, err))
		}
		hook()
	}
	for _, st := range steps {
		if st.Op != opEnter {
			continue
		}
		if err := w.setAttrs(st.Path, st.Attrs.stat()); err != nil {
			errs = append(errs, fmt.Errorf("undo enter %s: %w", st.Path, err))
		}
	}
	return errors.Join(errs...)
}

// unmove moves the entry of a done move back. A move is done when From
// lacks the entry (it had it when the swap was planned, and only the move
// takes it away); To then has it, under the same name.
func (w *swapper) unmove(st step) error {
	dir, name := splitRel(st.Path)
	from, err := openRel(w.tree(st.From), dir)
	if err != nil {
		return err
	}
	defer unix.Close(from)
	if _, err := lstatAt(from, name); err == nil {
		return nil // not done
	} else if !errors.Is(err, unix.ENOENT) {
		return err
	}
	to, err := openRel(w.tree(st.To), dir)
	if err != nil {
		return err
	}
	defer unix.Close(to)
	if err := renameEntry(to, from, name); err != nil {
		return err
	}
	if st.Perm == 0 {
		return nil
	}
	fd, err := openDirAt(from, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if now, err := fstat(fd); err != nil || now.perm() == st.Perm&0o7777 {
		return err
	}
	return unix.Fchmod(fd, st.Perm&0o7777) // a lent u+w a crash did not take back
}

// splitRel splits a step's path into its dir ("" for the root) and name.
func splitRel(p string) (string, string) {
	dir, name := path.Split(p)
	return strings.TrimSuffix(dir, "/"), name
}

// setAttrs gives the workspace dir rel ("" the workspace) st's attributes.
func (w *swapper) setAttrs(rel string, st stat) error {
	if rel == "" {
		return w.dirAttrs(w.ws, w.parent, w.base, st)
	}
	up, name := splitRel(rel)
	parent, err := openRel(w.ws, up)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	fd, err := openDirAt(parent, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return w.dirAttrs(fd, parent, name, st)
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
