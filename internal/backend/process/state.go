package process

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// maxLogSize is where a sandbox log is rotated (one old generation kept) when
// the sandbox is created again.
const maxLogSize = 1 << 20

// state is the on-disk record of one sandbox, {StateDir}/{sid}.json. It is
// what makes sandboxes discoverable by another gateway process or after a
// restart: nothing about them lives only in memory.
type state struct {
	SandboxID   string            `json:"sandbox_id"`
	User        string            `json:"user"`
	Thread      string            `json:"thread"`
	URL         string            `json:"url"`
	PID         int               `json:"pid"`
	StartTime   string            `json:"start_time"`
	Incarnation string            `json:"incarnation"`
	CreatedAt   time.Time         `json:"created_at"`
	Labels      map[string]string `json:"labels"`
	// Secret is the sandbox server's own credential, kept (in this 0600
	// file, in a 0700 dir mapped into no sandbox) so that Discover and List
	// can hand it to a replica that lost the Redis record.
	Secret string `json:"secret,omitempty"`
	// Egress is the isolated sandbox's egress policy, for serving its proxy
	// socket again after a gateway restart.
	Egress *backend.Egress `json:"egress,omitempty"`
	// RuntimeID is the id the sandbox's socket, egress dir and cgroup were
	// made under, when it differs from SandboxID: a pre-started sandbox
	// keeps them when a thread claims it (its log is renamed: logs are
	// looked up by sandbox id).
	RuntimeID string `json:"runtime_id,omitempty"`
	// SystemRoot is the image rootfs its jail runs ("" = the host's), so
	// the image store never collects it while the sandbox lives
	// (SystemRoots); nil in a state written before it was recorded.
	SystemRoot *string `json:"system_root,omitempty"`
	// Layer is the sandbox's writable image layer (layerDir), removed with
	// the sandbox; "" = none.
	Layer string `json:"layer,omitempty"`
}

// rid is the id of the sandbox's runtime files.
func (s *state) rid() string { return cmp.Or(s.RuntimeID, s.SandboxID) }

func (s *state) info() backend.Info {
	return backend.Info{
		SandboxID:   s.SandboxID,
		User:        s.User,
		Thread:      s.Thread,
		URL:         s.URL,
		Incarnation: s.Incarnation,
		Backend:     Name,
		Labels:      s.Labels,
		CreatedAt:   s.CreatedAt,
		Secret:      s.Secret,
	}
}

func (p *Process) statePath(sid string) string { return filepath.Join(p.cfg.StateDir, sid+".json") }
func (p *Process) logPath(sid string) string   { return filepath.Join(p.cfg.StateDir, sid+".log") }

// pausedPath marks a paused sandbox (Pause): a file of its own rather than
// a field of the state, whose atomic rewrite costs a rename (hundreds of
// microseconds on ext4) on every pause and resume.
func (p *Process) pausedPath(sid string) string { return filepath.Join(p.cfg.StateDir, sid+".paused") }
func (p *Process) socketPath(sid, nonce string) string {
	return filepath.Join(p.cfg.StateDir, sid+"."+nonce+".sock")
}

// removeSockets removes every socket an incarnation of sid left.
func (p *Process) removeSockets(sid string) error {
	old, _ := filepath.Glob(filepath.Join(p.cfg.StateDir, sid+".*.sock")) // sid is hex: no pattern characters
	for _, path := range old {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove old sandbox socket: %w", err)
		}
	}
	return nil
}
func (p *Process) egressDir(sid string) string { return filepath.Join(p.cfg.StateDir, sid+".egress") }

// readState returns nil, nil when there is no state file.
func (p *Process) readState(sid string) (*state, error) {
	data, err := readFile(p.statePath(sid))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox state: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("decode sandbox state %s: %w", p.statePath(sid), err)
	}
	if st.SandboxID != sid {
		return nil, fmt.Errorf("sandbox state %s names sandbox %q", p.statePath(sid), st.SandboxID)
	}
	return &st, nil
}

// writeState replaces the state file atomically (temp file, rename), so a
// reader never sees half a record. No fsync: the file only has to outlive
// the gateway process, not the machine (a machine that goes down takes its
// sandbox processes with it), and an fsync costs milliseconds on every
// create and claim.
func (p *Process) writeState(st *state) error {
	tmp, err := createTemp(p.cfg.StateDir, "."+st.SandboxID+".json.tmp-")
	if err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	return p.writeStateVia(tmp, st)
}

// writeStateVia writes st into f, a file of the state dir no reader
// opens, and renames it into place.
func (p *Process) writeStateVia(f *os.File, st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		_, err = f.Write(append(data, '\n'))
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), p.statePath(st.SandboxID))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write sandbox state: %w", err)
	}
	return nil
}

// claimPath is the spare file a pre-started sandbox's create leaves for
// its claim's state (writeClaimState).
func (p *Process) claimPath(sid string) string {
	return filepath.Join(p.cfg.StateDir, "."+sid+".claim")
}

// writeClaimState writes the state of pre-started sandbox pw, claimed as
// st, through the spare file pw's create left: a claim creates no file
// (a new inode costs a new thread's first request hundreds of
// microseconds on a journaling file system). Without one it is writeState.
func (p *Process) writeClaimState(pw string, st *state) error {
	f, err := openFile(p.claimPath(pw), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return p.writeState(st)
	}
	return p.writeStateVia(f, st)
}

// removeState drops what a gone sandbox leaves: its state file, its
// socket and its cgroups (rid: their id, see state.rid).
func (p *Process) removeState(sid, rid string) error {
	_ = p.removeSockets(rid)
	if p.cfg.Egress != nil {
		p.cfg.Egress.Close(sid)
	}
	_ = os.RemoveAll(p.egressDir(rid))
	_ = os.Remove(p.pausedPath(sid))
	_ = os.Remove(p.claimPath(sid))
	if p.cgroups != nil {
		if err := p.cgroups.Remove(rid); err != nil {
			p.log.Warn("remove sandbox cgroup", "sandbox_id", sid, "err", err)
		}
	}
	if err := os.Remove(p.statePath(sid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove sandbox state: %w", err)
	}
	// Its processes are gone: its host id may go to another sandbox.
	return p.hostIDs.Release(sid)
}

// removeLogs deletes a destroyed sandbox's logs. A crashed sandbox keeps its
// log for the post-mortem until its id is created again.
func (p *Process) removeLogs(sid string) {
	_ = os.Remove(p.logPath(sid))
	_ = os.Remove(p.logPath(sid) + ".1")
}

// openLog opens the sandbox's log for appending, rotating it first when it
// has grown past maxLogSize, and marks where this incarnation begins.
func (p *Process) openLog(sid string) (*os.File, error) {
	path := p.logPath(sid)
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxLogSize {
		if err := os.Rename(path, path+".1"); err != nil {
			return nil, fmt.Errorf("rotate sandbox log: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sandbox log: %w", err)
	}
	_, _ = fmt.Fprintf(f, "--- sandgate: starting sandbox %s at %s ---\n", sid, time.Now().UTC().Format(time.RFC3339Nano))
	return f, nil
}
