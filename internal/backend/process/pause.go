package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
)

var _ backend.Freezer = (*Process)(nil)

// cgroupFreezer pauses a sandbox that has a freezing cgroup of its own.
const cgroupFreezer = "cgroup freezer"

// freezeWait bounds a Freeze or Thaw whose context does not end sooner:
// a freeze takes milliseconds.
const freezeWait = 10 * time.Second

// freezeMethod is how sandboxes this Process starts are paused.
func (p *Process) freezeMethod() string {
	if p.cgroups.CanFreeze() && !p.cfg.signalFreeze {
		return cgroupFreezer
	}
	return signalFreezer
}

// Freeze freezes the sandbox while it waits in the warm pool: every process
// of it stops, its memory is kept, it uses no CPU. A sandbox with a
// freezing cgroup (isolated, on cgroup v2 or v1 with a freezer hierarchy)
// has the cgroup frozen; any other has its process tree stopped with
// SIGSTOP (stopTree). It returns once every process is frozen. Pausing a
// paused sandbox succeeds; one that does not run is an error. A paused
// sandbox is Alive; Destroy thaws it first, so that it stops as a running
// one does, at once; Discover and Create resume it.
func (p *Process) Freeze(ctx context.Context, info backend.Info) error {
	return p.setPaused(ctx, info, true)
}

// Thaw thaws a paused sandbox, however it was paused; resuming one that
// runs succeeds.
func (p *Process) Thaw(ctx context.Context, info backend.Info) error {
	return p.setPaused(ctx, info, false)
}

// setPaused pauses or resumes the incarnation in info (any, without one)
// under the id's lock, so that neither interleaves with the other nor with
// Destroy.
func (p *Process) setPaused(ctx context.Context, info backend.Info, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	sid := info.SandboxID
	if err := backend.ValidSandboxID(sid); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	l, err := p.lock(ctx, sid)
	if err != nil {
		return err
	}
	st, err := p.readState(sid)
	if err != nil {
		l.unlock(false)
		return fmt.Errorf("%s sandbox %s: %w", verb, sid, err)
	}
	defer l.unlock(st == nil) // no state: the lock file goes, as with Destroy
	if st == nil || (info.Incarnation != "" && st.Incarnation != info.Incarnation) {
		return fmt.Errorf("%s sandbox %s: incarnation %s is gone", verb, sid, info.Incarnation)
	}
	if ok, err := live(ctx, st.PID, st.StartTime); err != nil || !ok {
		return errors.Join(err, fmt.Errorf("%s sandbox %s: not running", verb, sid))
	}
	began := time.Now()
	how := "thaw"
	if pause {
		if err = p.markPaused(sid, true); err == nil {
			if how, err = p.freeze(ctx, st); err != nil {
				_ = p.markPaused(sid, false) // the freeze undid itself
			}
		}
	} else if err = p.thaw(ctx, st.rid(), st.PID, st.StartTime); err == nil {
		err = p.markPaused(sid, false)
	}
	if err != nil {
		return fmt.Errorf("%s sandbox %s: %w", verb, sid, err)
	}
	p.log.Debug("sandbox "+verb+"d", "sandbox_id", sid, "thread", st.Thread, "method", how, "duration", time.Since(began))
	return nil
}

// markPaused marks the sandbox paused (pausedPath), or not. Discover and
// Create resume a marked sandbox, but take one stopped by anyone else for
// hung. It is marked before it is frozen and unmarked after it is thawed,
// so a crash in between leaves a marked sandbox that runs (resumed again
// at no cost), never a frozen one taken for hung.
func (p *Process) markPaused(sid string, paused bool) error {
	if !paused {
		if err := os.Remove(p.pausedPath(sid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unmark paused sandbox: %w", err)
		}
		return nil
	}
	f, err := openFile(p.pausedPath(sid), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("mark paused sandbox: %w", err)
	}
	return f.Close()
}

// markedPaused reports whether Freeze marked the sandbox (markPaused).
func (p *Process) markedPaused(sid string) bool {
	_, err := os.Stat(p.pausedPath(sid))
	return err == nil
}

// freeze freezes the sandbox's cgroup, or stops its process tree when it
// has no freezing cgroup (one placed before there was a freezer, too), and
// says which.
func (p *Process) freeze(ctx context.Context, st *state) (string, error) {
	if !p.cfg.signalFreeze {
		err := p.cgroups.Freeze(ctx, st.rid(), true)
		if !errors.Is(err, jail.ErrNoFreezer) {
			return cgroupFreezer, err
		}
	}
	return signalFreezer, stopTree(ctx, st.PID, st.StartTime)
}

// thaw undoes either freeze: the cgroup is thawed if it has one, and the
// tree continued if its server is stopped (stopTree stops the server
// first and, failing, continues what it stopped). A process that the
// sandbox's own job control stopped therefore stays stopped, unless the
// sandbox was paused by signal: contTree continues the whole tree.
func (p *Process) thaw(ctx context.Context, rid string, pid int, start string) error {
	if err := p.cgroups.Freeze(ctx, rid, false); err != nil && !errors.Is(err, jail.ErrNoFreezer) {
		return err
	}
	if pr, found, err := readProc(ctx, pid); err != nil || !found || !pr.Stopped || pr.Start != start {
		return err
	}
	return contTree(ctx, pid, start)
}

// paused reports whether the sandbox whose server is pid, with its
// cgroups under rid, is frozen or being frozen either way.
func (p *Process) paused(ctx context.Context, rid string, pid int, start string) bool {
	if frozen, err := p.cgroups.Frozen(rid); err == nil && frozen {
		return true
	}
	pr, found, err := readProc(ctx, pid)
	return err == nil && found && pr.Stopped && pr.Start == start
}

// thawToStop thaws a paused sandbox that is to be stopped, so that it
// takes the SIGTERM (its server closes its sessions and removes its
// state dir) instead of terminate waiting the grace for processes that
// cannot run, and then failing to kill a v1 freezer's, which die only
// once thawed.
func (p *Process) thawToStop(ctx context.Context, sid, rid string, pid int, start string) {
	if err := p.thaw(ctx, rid, pid, start); err != nil {
		p.log.Warn("thaw paused sandbox to stop it", "sandbox_id", sid, "err", err)
	}
}

// resumeFound resumes a paused sandbox that Create found (and is about to
// hand out); the caller holds the id's lock.
func (p *Process) resumeFound(ctx context.Context, st *state) error {
	if !p.markedPaused(st.SandboxID) {
		return nil
	}
	err := p.thaw(ctx, st.rid(), st.PID, st.StartTime)
	if err == nil {
		err = p.markPaused(st.SandboxID, false)
	}
	if err != nil {
		return fmt.Errorf("resume found sandbox %s: %w", st.SandboxID, err)
	}
	p.log.Info("resumed paused sandbox", "sandbox_id", st.SandboxID, "thread", st.Thread, "pid", st.PID)
	return nil
}
