// Package process is the default backend: every sandbox is a child process
// running this binary as `gateway sandbox`, on a loopback port, with the
// thread's host directories mapped to the virtual paths. A state file per
// sandbox ({StateDir}/{sid}.json) makes sandboxes discoverable by other
// gateway processes and after a restart; a pid plus its start time is the
// incarnation, so a recycled pid is never taken for a sandbox. The
// sandbox's secret reaches the server on an inherited pipe (--secret-fd)
// and is kept in the state file for Discover and List.
package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Name is the backend's name in Info.Backend and logs.
const Name = "process"

const (
	defaultReadyTimeout = 30 * time.Second
	// discoverReadyTimeout bounds Discover's readiness check: the sandbox
	// was ready once, so it answers at once unless it is hung or very busy.
	discoverReadyTimeout = 2 * time.Second
)

// Config of the process backend. The zero value, plus StateDir, is usable.
type Config struct {
	// Binary is the sandbox server binary, run as `Binary sandbox ...` (or
	// `Binary sandbox-init` isolated); "" is SandboxBinary of the running
	// gateway (os.Executable), or the gateway itself for plain sandboxes
	// while tracing is on (defaultBinary).
	Binary string
	// StateDir holds one state file and one log per sandbox (the gateway
	// passes {data_dir}/sandboxes/process). Required.
	StateDir string
	// ReadyTimeout bounds Create's wait for the first 200 on /v1/sandbox;
	// 0 means 30s.
	ReadyTimeout time.Duration
	// Instance is the gateway instance id recorded in the labels (optional).
	Instance string
	// Isolation is IsolationNamespaces ("" = it, the default) or
	// IsolationNone (the sandbox is a plain child process with the gateway's
	// user, files and network: one trusted user only).
	Isolation string
	// Limits bound each isolated sandbox (zero fields: jail's defaults).
	Limits jail.Limits
	// CgroupRoot is where cgroups are mounted; "" = /sys/fs/cgroup.
	CgroupRoot string
	// Egress serves isolated sandboxes' egress proxies (nil = none: the
	// proxy mode then lets nothing out). IsolationNone cannot enforce an
	// egress policy: its sandboxes share the gateway's network.
	Egress backend.EgressGate
	// SystemRoot is a directory, an image's rootfs (imagestore), whose
	// programs, libraries and /etc entries isolated sandboxes run instead
	// of the host's (jail.Spec.SystemRoot); "" = the host's. It needs
	// IsolationNamespaces.
	SystemRoot string
	// SystemEnv is the image's environment (KEY=VALUE): it replaces the
	// variables of the same name (PATH) in an isolated sandbox's base
	// environment; configured env still wins over both.
	SystemEnv []string
	// ReadOnlyImage keeps image roots (SystemRoot, a template's rootfs)
	// read-only in every sandbox. false (the default): where the gateway
	// runs as root, each such sandbox gets a writable layer of its own over
	// the image (jail.Spec.Layer), in its thread's data (layerDir), so what
	// it installs system-wide counts against the thread's quota and goes
	// with the sandbox. A gateway that is not root cannot idmap the image
	// and keeps it read-only either way.
	ReadOnlyImage bool

	// signalFreeze pauses by SIGSTOP even where a cgroup freezer is
	// available (tests of that path).
	signalFreeze bool
}

// Isolation modes.
const (
	IsolationNamespaces = "namespaces"
	IsolationNone       = "none"
)

// Validate reports configuration errors.
func (c Config) Validate() error {
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("process backend: state dir is required"))
	}
	if c.Isolation != "" && c.Isolation != IsolationNamespaces && c.Isolation != IsolationNone {
		errs = append(errs, fmt.Errorf("process backend: process_isolation %q: want namespaces or none", c.Isolation))
	}
	if c.SystemRoot != "" && c.Isolation == IsolationNone {
		errs = append(errs, errors.New("process backend: a system root (process_image) needs process_isolation: namespaces"))
	}
	for i, kv := range c.SystemEnv {
		if !envEntry(kv) {
			errs = append(errs, fmt.Errorf("process backend: system environment entry %d is not KEY=VALUE", i))
		}
	}
	if c.ReadyTimeout < 0 {
		errs = append(errs, fmt.Errorf("process backend: ready timeout %v is negative", c.ReadyTimeout))
	}
	return errors.Join(errs...)
}

// envEntry reports whether kv is an environment entry a jail can pass:
// KEY=VALUE, no NUL.
func envEntry(kv string) bool { return strings.Contains(kv, "=") && !strings.ContainsRune(kv, 0) }

// Process implements backend.Backend with local child processes.
type Process struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	children map[int]*child // by pid: sandboxes this Process started and reaps

	cgroups *jail.Cgroups // nil with IsolationNone
	meters  meterBudget   // OpenMeter's held cgroup files
	// hostIDs are the isolated sandboxes' host uids, in the state dir: a
	// root gateway's sandboxes each hold one until their state goes.
	hostIDs *jail.HostIDs
}

var _ backend.Backend = (*Process)(nil)

// New checks cfg, fills in defaults and creates the state dir.
func New(cfg Config, log *slog.Logger) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = defaultReadyTimeout
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("process backend: find own binary: %w", err)
		}
		cfg.Binary = defaultBinary(exe, cfg.Isolation)
	}
	var err error
	if cfg.Binary, err = filepath.Abs(cfg.Binary); err != nil {
		return nil, fmt.Errorf("process backend: resolve binary: %w", err)
	}
	if fi, err := os.Stat(cfg.Binary); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("process backend: sandbox binary %s is not an executable file", cfg.Binary)
	}
	if cfg.StateDir, err = filepath.Abs(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("process backend: resolve state dir: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("process backend: create state dir: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Process{cfg: cfg, log: log.With("backend", Name), children: map[int]*child{},
		hostIDs: jail.NewHostIDs(cfg.StateDir)}
	if cfg.Isolation == IsolationNone {
		p.log.Warn("process_isolation: none: sandboxes run as the gateway's user, see its files, processes and network " +
			"(no egress policy applies); for one trusted user only")
	} else {
		p.cgroups = jail.OpenCgroups(cmp.Or(cfg.CgroupRoot, "/sys/fs/cgroup")).WithScope(cgroupScope(cfg.StateDir))
		p.meters.max = heldMetersFor(fileLimit())
		if err := p.probe(); err != nil {
			return nil, fmt.Errorf("process backend: process_isolation: namespaces does not work on this machine: %w; "+
				"enable unprivileged user namespaces, or set process_isolation: none to run sandboxes unisolated (one trusted user only)", err)
		}
	}
	if p.cgroups != nil {
		p.logLayers()
	}
	p.log.Info("sandboxes are frozen (freeze_after, pause_warm, checkpoints) by "+p.freezeMethod(), "freeze", p.freezeMethod())
	return p, nil
}

// SandboxBinary is the binary that runs the sandboxes of the gateway at
// gateway: sandboxspec.ServerBinary beside it when it is there (it starts
// faster), else the gateway itself (`go run ./cmd/gateway` builds only the
// gateway).
func SandboxBinary(gateway string) string {
	lean := filepath.Join(filepath.Dir(gateway), sandboxspec.ServerBinary)
	if fi, err := os.Stat(lean); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return lean
	}
	return gateway
}

// Create starts the sandbox, or returns the live one already running under
// that id (idempotent), once it answers GET /v1/sandbox.
func (p *Process) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if err := errors.Join(validateSpec(spec), p.validTemplate(spec.Template)); err != nil {
		return backend.Info{}, err
	}
	if err := backend.EnsureHostDirs(spec.Mounts); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", spec.SandboxID, err)
	}
	sid := spec.SandboxID
	log := p.log.With("sandbox_id", sid, "thread", spec.Thread)
	l, err := p.lock(ctx, sid)
	if err != nil {
		return backend.Info{}, err
	}
	keepLock := false // the lock file goes with the id's last sandbox
	defer func() { l.unlock(!keepLock) }()

	if info, ok, err := p.adoptExisting(ctx, sid, log); err != nil || ok {
		keepLock = ok
		return info, err
	}
	if err := ctx.Err(); err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
	}

	began := time.Now()
	c, url, err := p.start(ctx, spec)
	if err != nil {
		return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, err)
	}
	st, err := p.record(ctx, spec, c, url)
	if err != nil {
		p.abandon(c, st, sid)
		return backend.Info{}, fmt.Errorf("create sandbox %s (log %s): %w", sid, p.logPath(sid), err)
	}
	c.confirm() // recorded: from now on the sandbox outlives this process
	if err := p.waitReady(ctx, c, url, spec.Secret); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) && p.waitReady(context.Background(), c, url, spec.Secret) == nil {
			// The caller gave up (its lock lost, its client gone), not the
			// sandbox, and another replica may already have discovered and
			// be serving it: leave it recorded for Discover or the reconciler.
			// A deadline is the sandbox being too slow: abandoned below.
			keepLock = true
			log.Warn("creation cancelled; sandbox left running for adoption", "pid", c.pid)
			return backend.Info{}, fmt.Errorf("create sandbox %s: %w", sid, ctx.Err())
		}
		p.abandon(c, st, sid)
		return backend.Info{}, fmt.Errorf("create sandbox %s (log %s): %w", sid, p.logPath(sid), err)
	}
	keepLock = true
	log.Info("sandbox created", "pid", c.pid, "url", backend.LogURL(url), "duration", time.Since(began))
	return st.info(), nil
}

// adoptExisting handles a state file left for sid: a live, answering
// sandbox is returned; a dead one's state is dropped. A live one gets the
// full ReadyTimeout to answer before it is replaced as hung: a busy sandbox
// that is merely slow must not lose its running commands.
// The caller holds the id's lock.
func (p *Process) adoptExisting(ctx context.Context, sid string, log *slog.Logger) (backend.Info, bool, error) {
	st, err := p.readState(sid)
	if err != nil || st == nil {
		return backend.Info{}, false, err
	}
	ok, err := live(ctx, st.PID, st.StartTime)
	if err != nil {
		return backend.Info{}, false, err
	}
	if ok {
		if err := p.resumeFound(ctx, st); err != nil {
			return backend.Info{}, false, err
		}
		rctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
		err := backend.WaitReadySecret(rctx, st.URL, st.Secret)
		cancel()
		if err == nil {
			log.Info("sandbox already running", "pid", st.PID)
			return st.info(), true, nil
		}
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("create sandbox %s: %w", sid, ctx.Err())
		}
		log.Warn("replacing unresponsive sandbox", "pid", st.PID, "err", err)
		if err := terminate(ctx, st.PID, st.StartTime); err != nil {
			return backend.Info{}, false, fmt.Errorf("stop unresponsive sandbox %s: %w", sid, err)
		}
	}
	p.removeLayer(sid, st.Layer)
	return backend.Info{}, false, p.removeState(sid, st.rid())
}

// record writes the state file of a just-started child.
func (p *Process) record(ctx context.Context, spec backend.Spec, c *child, url string) (*state, error) {
	pr, found, err := readProc(ctx, c.pid)
	if err == nil && (!found || pr.Dead) {
		err = errors.New("sandbox server exited at once")
	}
	if err != nil {
		return nil, err
	}
	st := &state{
		SandboxID:   spec.SandboxID,
		User:        spec.User,
		Thread:      spec.Thread,
		URL:         url,
		PID:         c.pid,
		StartTime:   pr.Start,
		Incarnation: incarnation(c.pid, pr.Start),
		CreatedAt:   time.Now().UTC(),
		Labels:      backend.IdentityLabels(spec, p.cfg.Instance, spec.Labels),
		Secret:      spec.Secret,
	}
	root := p.cfg.forTemplate(spec.Template).SystemRoot
	st.SystemRoot = &root
	if p.cgroups != nil {
		egress := spec.Egress
		st.Egress = &egress
	}
	st.Layer = p.layerFor(spec)
	if spec.Labels[backend.LabelPrewarm] != "" {
		// Best effort: without it the claim creates its state file.
		if f, err := openFile(p.claimPath(spec.SandboxID), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err == nil {
			_ = f.Close()
		}
	}
	return st, p.writeState(st)
}

// waitReady waits for the first 200, giving up early if the child exits.
func (p *Process) waitReady(ctx context.Context, c *child, url, secret string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := backend.WaitReadySecret(ctx, url, secret)
	select {
	case <-c.done:
		return errors.New("sandbox server exited before it was ready")
	default:
		return err
	}
}

// abandon kills a child whose creation failed and removes its state.
func (p *Process) abandon(c *child, st *state, sid string) {
	_ = c.recorded.Close() // unconfirmed: the child exits on its own too
	// A fresh context: the caller's may be what ended the creation.
	ctx, cancel := context.WithTimeout(context.Background(), 2*termGrace)
	defer cancel()
	select {
	case <-c.done: // already exited and reaped: its pid is no longer ours to signal
	default:
		if st == nil {
			signalGroup(c.pid, syscall.SIGKILL)
		} else if ok, _ := live(ctx, c.pid, st.StartTime); ok {
			_ = terminate(ctx, c.pid, st.StartTime)
		}
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	_ = p.removeState(sid, sid) // never claimed: its files are under its own id
	if st != nil {
		p.removeLayer(sid, st.Layer)
	}
}

// Destroy stops the sandbox incarnation in info (or, with no incarnation,
// whatever runs under its id) and removes its state. A newer incarnation of
// the same id is left alone; an unknown sandbox is nil.
func (p *Process) Destroy(ctx context.Context, info backend.Info) error {
	sid := info.SandboxID
	if err := backend.ValidSandboxID(sid); err != nil {
		return err
	}
	l, err := p.lock(ctx, sid)
	if err != nil {
		return err
	}
	st, err := p.readState(sid)
	if err != nil {
		l.unlock(false)
		return err
	}
	target, thread := info.Incarnation, info.Thread
	if st != nil {
		target, thread = cmp.Or(target, st.Incarnation), cmp.Or(thread, st.Thread)
	}
	current := st != nil && st.Incarnation == target
	rid := sid
	if current {
		rid = st.rid()
	}
	if err := p.stop(ctx, sid, rid, target); err != nil {
		l.unlock(false)
		return fmt.Errorf("destroy sandbox %s: %w", sid, err)
	}
	if current {
		err = p.removeState(sid, st.rid())
		p.removeLogs(sid)
		p.removeLayer(sid, st.Layer)
	}
	l.unlock(st == nil || current)
	if err == nil && target != "" {
		p.log.Info("sandbox destroyed", "sandbox_id", sid, "thread", thread, "incarnation", target)
	}
	return err
}

// stop kills the incarnation if it still runs (thawed first if paused),
// and waits for the reaper when this Process is its parent, so the pid is
// gone when Destroy returns. rid names its cgroups.
func (p *Process) stop(ctx context.Context, sid, rid, inc string) error {
	if inc == "" {
		return nil
	}
	pid, start, err := parseIncarnation(inc)
	if err != nil {
		return err
	}
	ok, err := live(ctx, pid, start)
	if err != nil || !ok {
		return err
	}
	if p.paused(ctx, rid, pid, start) {
		p.thawToStop(ctx, sid, rid, pid, start)
	}
	if err := terminate(ctx, pid, start); err != nil {
		return err
	}
	if c := p.ownChild(pid); c != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
			return fmt.Errorf("reap sandbox %s: %w", sid, ctx.Err())
		}
	}
	return nil
}

// Alive reports whether the incarnation's process runs: no HTTP, one read
// of /proc.
func (p *Process) Alive(ctx context.Context, info backend.Info) (bool, error) {
	pid, start, err := parseIncarnation(info.Incarnation)
	if err != nil {
		return false, err
	}
	return live(ctx, pid, start)
}

// Discover finds a live, answering sandbox by id from its state file; a
// dead one's state is removed. A live one that does not answer within
// discoverReadyTimeout is reported not found (Create then gives it the full
// ReadyTimeout before replacing it).
func (p *Process) Discover(ctx context.Context, sid string) (backend.Info, bool, error) {
	if err := backend.ValidSandboxID(sid); err != nil {
		return backend.Info{}, false, err
	}
	st, err := p.liveState(ctx, sid)
	if err != nil || st == nil {
		return backend.Info{}, false, err
	}
	if p.markedPaused(sid) {
		// Its caller is about to hand it out (the pool lost its record).
		if err := p.Thaw(ctx, st.info()); err != nil {
			return backend.Info{}, false, err
		}
		p.log.Info("resumed paused sandbox", "sandbox_id", sid, "thread", st.Thread, "pid", st.PID)
	}
	rctx, cancel := context.WithTimeout(ctx, discoverReadyTimeout)
	defer cancel()
	if err := backend.WaitReadySecret(rctx, st.URL, st.Secret); err != nil {
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("discover sandbox %s: %w", sid, ctx.Err())
		}
		p.log.Warn("sandbox alive but not answering", "sandbox_id", sid, "thread", st.Thread, "pid", st.PID, "err", err)
		return backend.Info{}, false, nil
	}
	return st.info(), true, nil
}

// List returns every sandbox in the state dir whose process is alive,
// dropping stale state files on the way.
func (p *Process) List(ctx context.Context) ([]backend.Info, error) {
	states, _, err := p.liveStates(ctx) // unreadable ones are logged
	if err != nil {
		return nil, err
	}
	out := make([]backend.Info, 0, len(states))
	for _, st := range states {
		out = append(out, st.info())
	}
	return out, nil
}

// SystemRoots returns the system roots (image rootfs directories) it uses:
// Config.SystemRoot and those its live sandboxes' jails run, for the image
// store's collection (a jail sees those very files, so removing one would
// break its sandbox). An error when it cannot tell (a state it cannot
// read, a sandbox recorded before roots were).
func (p *Process) SystemRoots(ctx context.Context) ([]string, error) {
	states, bad, err := p.liveStates(ctx)
	if err = cmp.Or(err, bad); err != nil {
		return nil, err
	}
	var out []string
	if p.cfg.SystemRoot != "" {
		out = append(out, p.cfg.SystemRoot)
	}
	for _, st := range states {
		switch {
		case st.SystemRoot == nil:
			return nil, fmt.Errorf("sandbox %s was recorded without its system root: its image is unknown", st.SandboxID)
		case *st.SystemRoot != "":
			out = append(out, *st.SystemRoot)
		}
	}
	return out, nil
}

// liveStates are the states of the sandboxes alive (see liveState); bad
// joins the errors of those it could not read (logged and skipped).
func (p *Process) liveStates(ctx context.Context) (out []*state, bad, err error) {
	entries, err := os.ReadDir(p.cfg.StateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("list sandboxes: %w", err)
	}
	for _, e := range entries {
		sid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || backend.ValidSandboxID(sid) != nil {
			continue
		}
		st, err := p.liveState(ctx, sid)
		if err != nil { // one bad file must not hide every other sandbox
			p.log.Warn("skip sandbox state", "sandbox_id", sid, "err", err)
			bad = errors.Join(bad, err)
			continue
		}
		if st != nil {
			out = append(out, st)
		}
	}
	return out, bad, nil
}

// liveState reads sid's state and returns it when its process is alive. A
// dead one's state is removed, unless someone holds the id's lock (they are
// creating or destroying it right now and will settle the state).
func (p *Process) liveState(ctx context.Context, sid string) (*state, error) {
	st, err := p.readState(sid)
	if err != nil || st == nil {
		return nil, err
	}
	ok, err := live(ctx, st.PID, st.StartTime)
	if err != nil {
		return nil, err
	}
	if ok {
		return st, nil
	}
	l, err := p.tryLock(sid)
	if err != nil || l == nil {
		return nil, err
	}
	// Re-read under the lock: a new incarnation may have replaced the dead one.
	now, err := p.readState(sid)
	if err == nil && now != nil && now.Incarnation == st.Incarnation {
		err = p.removeState(sid, now.rid())
		p.log.Info("removed state of dead sandbox", "sandbox_id", sid, "thread", st.Thread, "pid", st.PID)
	}
	replaced := now != nil && now.Incarnation != st.Incarnation
	l.unlock(err == nil && !replaced)
	if err == nil && replaced {
		return p.liveState(ctx, sid)
	}
	return nil, err
}

// cgroupScope sets this fleet's sandbox cgroups apart from another's on the
// same host (jail.Cgroups.WithScope): the state dir is what makes replicas
// one fleet. Two soaks, or a soak and go test, serving the same thread
// otherwise shared its cgroup: one froze the other's sandbox, and each
// destroy waited out the removal of a cgroup the other still used.
func cgroupScope(stateDir string) string {
	dir, err := filepath.Abs(stateDir)
	if err == nil {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(dir))
	return fmt.Sprintf("%016x", h.Sum64())
}
