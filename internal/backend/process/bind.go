package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/backend"
)

var _ backend.Binder = (*Process)(nil)

// Bind makes the pre-started sandbox warm spec's: its state file is
// rewritten under spec's id and identity (through the spare file warm's
// create left; the old id's is removed) and its log renamed; its socket,
// egress dir and cgroup keep warm's id (state.RuntimeID). The egress
// proxy's socket serves the new identity from now on, for the policy and
// the logs. The process, its secret and its mounts are untouched: the
// caller moved the user data beneath them. The claim creates no file: its
// lock on spec's id is a second name of warm's lock file.
func (p *Process) Bind(ctx context.Context, warm backend.Info, spec backend.Spec) (backend.Info, error) {
	sid, pw := spec.SandboxID, warm.SandboxID
	if err := errors.Join(backend.ValidSandboxID(sid), backend.ValidSandboxID(pw)); err != nil {
		return backend.Info{}, err
	}
	lw, err := p.lock(ctx, pw)
	if err != nil {
		return backend.Info{}, err
	}
	defer lw.unlock(true) // pw names nothing any more, whatever happens next; after ls's (an alias)
	ls, err := p.lockAlias(ctx, lw, sid)
	if err != nil {
		return backend.Info{}, err
	}
	keepLock := false
	defer func() { ls.unlock(!keepLock) }()

	st, err := p.readState(pw)
	if err != nil {
		return backend.Info{}, err
	}
	if st == nil || st.Incarnation != warm.Incarnation {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: incarnation %s is gone", pw, warm.Incarnation)
	}
	if ok, err := live(ctx, st.PID, st.StartTime); err != nil || !ok {
		return backend.Info{}, errors.Join(err, fmt.Errorf("claim sandbox %s: not running", pw))
	}
	if old, err := p.readState(sid); err != nil || old != nil {
		return backend.Info{}, errors.Join(err, fmt.Errorf("claim sandbox %s: %s already has a sandbox", pw, sid))
	}
	claimed := *st
	claimed.RuntimeID = st.rid()
	claimed.SandboxID, claimed.User, claimed.Thread = sid, spec.User, spec.Thread
	claimed.Labels = backend.IdentityLabels(spec, p.cfg.Instance, spec.Labels)
	if st.Layer != "" { // moved with warm's user data
		claimed.Layer = layerDir(spec.Mounts)
	}
	if err := p.moveLog(pw, sid); err != nil {
		return backend.Info{}, err
	}
	if err := p.writeClaimState(pw, &claimed); err != nil {
		return backend.Info{}, err
	}
	if err := os.Remove(p.statePath(pw)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: %w", pw, err)
	}
	keepLock = true
	if p.cfg.Egress != nil && claimed.Egress != nil && claimed.Egress.EffectiveMode() == backend.EgressProxy {
		id := backend.EgressIdentity{SandboxID: sid, User: spec.User, Thread: spec.Thread, Egress: *claimed.Egress}
		if err := p.cfg.Egress.Reassign(pw, id, filepath.Join(p.egressDir(claimed.rid()), backend.EgressSocketName)); err != nil {
			return backend.Info{}, fmt.Errorf("claim sandbox %s: %w", pw, err)
		}
	}
	p.log.Info("prewarmed sandbox claimed", "sandbox_id", sid, "thread", spec.Thread, "prewarm_id", pw, "pid", st.PID)
	return claimed.info(), nil
}

// moveLog renames pw's log to sid's (the sandbox keeps writing to the open
// file), keeping a log sid's earlier incarnation left as its old
// generation.
func (p *Process) moveLog(pw, sid string) error {
	if _, err := os.Stat(p.logPath(sid)); err == nil {
		if err := os.Rename(p.logPath(sid), p.logPath(sid)+".1"); err != nil {
			return fmt.Errorf("rotate sandbox log: %w", err)
		}
	}
	if err := os.Rename(p.logPath(pw), p.logPath(sid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move sandbox log: %w", err)
	}
	_ = os.Remove(p.logPath(pw) + ".1")
	return nil
}
