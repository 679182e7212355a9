package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/internal/backend"
)

// Claiming a pre-started sandbox (backend.Binder). A container's labels
// are fixed at its creation, its name is not: Claim renames the container
// to the thread's sandbox's name and writes a claim record holding the
// identity the labels cannot,
//
//	{SocketDir}/claims/{container id}.json   {container, sandbox_id, user, thread, labels}
//
// in the SocketDir holding the container's socket dir (read off its mount,
// as its API socket is), so every replica finds the record where it finds
// the socket; a container of an image serving its own API has no socket
// dir, and this backend's SocketDir is used. The record is written before
// the rename, so a renamed container without one only comes of a lost
// record. A container labelled backend.LabelPrewarm is then
//
//   - unclaimed: no record, named after its label's sandbox id;
//   - claimed: a record of this container, named after the record's
//     sandbox id: it is that sandbox, with the record's labels;
//   - orphaned otherwise (a claim cut short between record and rename, a
//     lost or unreadable record): its bind mounts may hold a thread's
//     files, so it is never reported unclaimed (another thread could claim
//     it) nor as any thread's: List reports it under its label's id with
//     no user, thread, LabelPrewarm or secret, which the reconciler leaves
//     alone; Destroy takes it by either id; Create removes it from the
//     thread's name; prune removes it (Leftovers).
//
// Its socket dir, egress dir and uid keep the pre-started id (the runtime
// id, ident.rid), as they do in the process backend.

var _ backend.Binder = (*Docker)(nil)

// claimsDirName is not a sandbox id, so no socket dir is ever named so.
const claimsDirName = "claims"

// claimRecord is the identity a claimed container's labels cannot carry.
type claimRecord struct {
	Container string            `json:"container"`
	SandboxID string            `json:"sandbox_id"`
	User      string            `json:"user"`
	Thread    string            `json:"thread"`
	Labels    map[string]string `json:"labels"`
}

type claimState int

const (
	unclaimed claimState = iota // not pre-started, or pre-started and not claimed
	claimed
	orphaned
)

// ident is who a container of Sandgate's is.
type ident struct {
	sid, user, thread string
	// rid is the labels' sandbox id: it names the socket dir and the uid.
	rid string
	// nameSID is the sandbox id the container's name says ("" = a name not
	// of this prefix).
	nameSID string
	labels  map[string]string
	state   claimState
	// record is the claim record's path (pre-started containers only) and
	// recordTime its modification time (zero: none).
	record     string
	recordTime time.Time
}

// is reports whether the container is sandbox sid's; an orphan answers to
// both ids it may still be known by, only for its removal.
func (it ident) is(sid string) bool {
	if it.state == orphaned {
		return sid == it.rid || sid == it.nameSID
	}
	return sid == it.sid
}

// identify tells who container id, named nameSID, is; false when Sandgate
// did not make it.
func (d *Docker) identify(id, nameSID string, labels map[string]string, mounts []container.MountPoint) (ident, bool) {
	if labels[backend.LabelManagedBy] != backend.ManagedByValue {
		return ident{}, false
	}
	rid := labels[backend.LabelSandboxID]
	it := ident{sid: rid, rid: rid, nameSID: nameSID, user: labels[backend.LabelUser], thread: labels[backend.LabelThread], labels: labels}
	if labels[backend.LabelPrewarm] == "" {
		return it, true
	}
	it.record = d.claimPath(id, mounts)
	rec, mtime, err := readClaim(it.record)
	it.recordTime = mtime
	switch {
	case err == nil && rec.Container == id && rec.SandboxID == nameSID && rec.SandboxID != rid &&
		backend.ValidSandboxID(rec.SandboxID) == nil:
		it.state, it.sid, it.user, it.thread = claimed, rec.SandboxID, rec.User, rec.Thread
		it.labels = maps.Clone(labels)
		delete(it.labels, backend.LabelPrewarm)
		maps.Copy(it.labels, rec.Labels)
		it.labels[backend.LabelManagedBy] = backend.ManagedByValue
		it.labels[backend.LabelSandboxID], it.labels[backend.LabelUser], it.labels[backend.LabelThread] = rec.SandboxID, rec.User, rec.Thread
	case errors.Is(err, fs.ErrNotExist) && nameSID == rid:
		// unclaimed
	default:
		it.state, it.user, it.thread = orphaned, "", ""
		it.labels = maps.Clone(labels)
		delete(it.labels, backend.LabelPrewarm)
		delete(it.labels, backend.LabelUser)
		delete(it.labels, backend.LabelThread)
		delete(it.labels, labelSecret) // nothing may reach it with a thread's route
	}
	return it, true
}

// identifyInspect is identify on an inspected container.
func (d *Docker) identifyInspect(c container.InspectResponse) (ident, bool) {
	if c.Config == nil {
		return ident{}, false
	}
	return d.identify(c.ID, d.nameSID([]string{c.Name}), c.Config.Labels, c.Mounts)
}

// nameSID is the sandbox id in a container's name of this prefix, or "".
func (d *Docker) nameSID(names []string) string {
	for _, n := range names {
		if sid, ok := strings.CutPrefix(strings.TrimPrefix(n, "/"), d.cfg.ContainerPrefix+"-"); ok && backend.ValidSandboxID(sid) == nil {
			return sid
		}
	}
	return ""
}

// claimPath is where container id's claim record is: next to its socket
// dir when it has one.
func (d *Docker) claimPath(id string, mounts []container.MountPoint) string {
	dir := d.cfg.SocketDir
	if sockets, _, ok := mountedSocketDir(mounts); ok {
		dir = filepath.Dir(sockets)
	}
	return filepath.Join(dir, claimsDirName, filepath.Base(id)+".json")
}

func readClaim(path string) (claimRecord, time.Time, error) {
	var rec claimRecord
	f, err := os.Open(path)
	if err != nil {
		return rec, time.Time{}, err
	}
	defer f.Close()
	var mtime time.Time
	if st, err := f.Stat(); err == nil {
		mtime = st.ModTime()
	}
	if err := json.NewDecoder(f).Decode(&rec); err != nil {
		return rec, mtime, fmt.Errorf("claim record %s: %w", path, err)
	}
	return rec, mtime, nil
}

// errClaimed: the container already has a claim record, written by a
// claim racing this one (or left by one cut short).
var errClaimed = errors.New("already claimed")

// writeClaim writes rec at path atomically, durably and exclusively: a
// reader sees the whole record or none, a crash after the rename that
// follows cannot lose it, and of two claims of one container only one
// writes it (the temp file is linked, which fails if path exists).
func writeClaim(path string, rec claimRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("claim record: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: claims dir: %w", backend.ErrHostDirs, err)
	}
	f, err := os.CreateTemp(dir, ".claim-*")
	if err != nil {
		return fmt.Errorf("%w: claim record: %w", backend.ErrHostDirs, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Link(f.Name(), path)
	}
	_ = os.Remove(f.Name())
	if errors.Is(err, fs.ErrExist) {
		return errClaimed
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%w: claim record: %w", backend.ErrHostDirs, err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// Claim makes the unclaimed pre-started container warm spec's sandbox: its
// claim record is written, then it is renamed to spec's name (the engine
// refuses a name taken, so of two claims into one id one fails), and its
// egress proxy's socket serves the new identity (the same listener).
// The secret, mounts and uid stay the container's: the caller moved the
// user data beneath them.
func (d *Docker) Bind(ctx context.Context, warm backend.Info, spec backend.Spec) (backend.Info, error) {
	sid, pw := spec.SandboxID, warm.SandboxID
	if err := errors.Join(backend.ValidSandboxID(sid), backend.ValidSandboxID(pw)); err != nil {
		return backend.Info{}, err
	}
	if warm.Incarnation == "" {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: no incarnation", pw)
	}
	c, err := d.api.ContainerInspect(ctx, warm.Incarnation)
	if err != nil {
		return backend.Info{}, engineErr("claim sandbox "+pw, err)
	}
	it, ok := d.identifyInspect(c)
	if !ok || it.state != unclaimed || it.rid != pw || it.nameSID != pw || it.labels[backend.LabelPrewarm] == "" {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: container %s is not an unclaimed pre-started sandbox", pw, shortID(c.ID))
	}
	if !c.State.Running || c.State.Restarting {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: not running", pw)
	}
	if c.State.Paused {
		if err := d.unpause(ctx, c.ID); err != nil {
			return backend.Info{}, fmt.Errorf("claim sandbox %s: %w", pw, err)
		}
	}
	labels := backend.IdentityLabels(spec, d.cfg.Instance, spec.Labels)
	delete(labels, backend.LabelPrewarm)
	rec := claimRecord{Container: c.ID, SandboxID: sid, User: spec.User, Thread: spec.Thread, Labels: labels}
	if err := writeClaim(it.record, rec); err != nil {
		return backend.Info{}, fmt.Errorf("claim sandbox %s: %w", pw, err)
	}
	if err := d.api.ContainerRename(ctx, c.ID, d.name(sid)); err != nil {
		_ = os.Remove(it.record)
		if cerrdefs.IsConflict(err) {
			return backend.Info{}, fmt.Errorf("claim sandbox %s: %s already has a container: %w", pw, sid, err)
		}
		return backend.Info{}, engineErr("claim sandbox "+pw, err)
	}
	c.Name = "/" + d.name(sid)
	info, err := d.infoFromInspect(c)
	if err == nil {
		err = d.reassignEgress(c, pw, info)
	}
	if err != nil {
		return backend.Info{}, errors.Join(fmt.Errorf("claim sandbox %s: %w", pw, err), d.unclaim(c.ID, pw, it.record))
	}
	d.log.Info("prewarmed sandbox claimed", "sandbox_id", sid, "thread", spec.Thread, "prewarm_id", pw, "container", shortID(c.ID))
	return info, nil
}

// reassignEgress makes a claimed container's egress socket, the listener it
// already has, serve its new identity.
func (d *Docker) reassignEgress(c container.InspectResponse, pw string, info backend.Info) error {
	policy, ok := proxyPolicy(c.Config.Labels)
	if d.cfg.Egress == nil || !ok {
		return nil
	}
	id := backend.EgressIdentity{SandboxID: info.SandboxID, User: info.User, Thread: info.Thread, Egress: policy}
	if err := d.cfg.Egress.Reassign(pw, id, d.egressSocket(pw)); err != nil {
		return fmt.Errorf("serve egress proxy: %w", err)
	}
	return nil
}

// unclaim undoes a claim that failed after its rename (the container
// gets its pre-started name back, so the caller's Destroy(warm) finds it).
func (d *Docker) unclaim(id, pw, record string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The record goes first: if the rename fails, an orphan is left, which
	// Destroy(warm) still removes.
	if err := os.Remove(record); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("undo claim: %w", err)
	}
	if err := d.api.ContainerRename(ctx, id, d.name(pw)); err != nil {
		return engineErr("undo claim: rename container back", err)
	}
	return nil
}

// dropClaim removes a removed container's claim record.
func dropClaim(it ident) {
	if it.record != "" {
		_ = os.Remove(it.record)
	}
}

// dropRuntime removes what a container Create clears from the sandbox's
// name kept under its pre-started id, sparing the sandbox id's own proxy
// and socket dir, which the create is about to use.
func (d *Docker) dropRuntime(it ident) {
	if it.rid != it.nameSID {
		d.dropSockets(ident{sid: it.rid, rid: it.rid, record: it.record})
	} else {
		dropClaim(it)
	}
}
