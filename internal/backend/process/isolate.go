package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/jail/seccompfilter"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// sandboxPath is the PATH of an isolated sandbox: the host's program dirs,
// which are all it has, not the gateway's PATH (its entries need not exist
// inside). A system root's image brings its own (Config.SystemEnv).
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// probeTimeout bounds the start-up check that this kernel can isolate.
const probeTimeout = 10 * time.Second

// startJailed starts the server in a jail of its own: new namespaces, the
// thread's dirs bound at their real /mnt/user-data paths (no rewriting),
// an unprivileged uid of its own, Landlock, seccomp and limits, in its own
// cgroups when this machine lets the gateway make them.
func (p *Process) startJailed(spec backend.Spec, files []*os.File, logf *os.File) (*exec.Cmd, error) {
	cfg := p.cfg.forTemplate(spec.Template)
	mounts := make([]jail.Mount, 0, len(spec.Mounts))
	var own []string
	for _, m := range spec.Mounts {
		if backend.SandboxOwned(m) {
			// The thread's own dirs become the sandbox uid's; a configured
			// extra mount keeps its owner (it may be shared).
			own = append(own, m.HostPath)
		}
		mounts = append(mounts, jail.Mount{Target: m.ContainerPath, Source: m.HostPath, ReadOnly: m.ReadOnly})
	}
	args, err := serverArgs(nil, spec.Secret != "")
	if err != nil {
		return nil, err
	}
	configured := spec.Env
	hostNetwork := false
	switch spec.Egress.EffectiveMode() {
	case backend.EgressProxy:
		if p.cfg.Egress == nil {
			break // no proxy to reach: the same as none
		}
		dir, err := p.openEgress(spec)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, jail.Mount{Target: backend.EgressDir, Source: dir, ReadOnly: true})
		args = append(args, "--"+sandboxspec.FlagEgressSocket, backend.EgressSocketPath)
		// The proxy's variables join the configured ones (which the
		// operator's own *_PROXY settings override).
		configured = backend.ProxyEnv(egressURL)
		maps.Copy(configured, spec.Env)
	case backend.EgressOpen:
		hostNetwork = true
	}
	filter, err := seccompfilter.Program()
	if err != nil {
		return nil, err
	}
	// A layer left by an incarnation that died without Destroy is not
	// this one's: each sandbox starts from the image as it is.
	layer := p.layerFor(spec)
	if layer != "" {
		if err := os.RemoveAll(layer); err != nil {
			return nil, fmt.Errorf("%w: remove stale image layer: %w", backend.ErrHostDirs, errors.Unwrap(err))
		}
	}
	limits := cfg.Limits.WithDefaults()
	// The host ids (a synced write of their table) and the dirs owned by
	// them (a chown walk of a new thread's) are done while the child execs,
	// which takes its ids, and goes on, only once it has its maps.
	ids := func() (int, int, error) {
		uid, gid, err := p.hostIDs.For(spec.SandboxID)
		if err != nil || uid == os.Geteuid() { // the gateway's own: so are the dirs
			return uid, gid, err
		}
		for _, dir := range own {
			if err := jail.Own(dir, uid, gid); err != nil {
				return 0, 0, err
			}
		}
		return uid, gid, nil
	}
	placed := func(pid int) error {
		if p.cgroups.Mode() == jail.CgroupNone {
			return nil
		}
		return p.cgroups.Place(spec.SandboxID, pid, limits)
	}
	c := jail.Command{
		Binary: p.cfg.Binary,
		Spec: jail.Spec{
			Mounts:         mounts,
			Limits:         limits,
			MemoryByRlimit: p.cgroups.Mode() == jail.CgroupNone,
			Dir:            backend.VirtualWorkspace,
			Args:           args,
			Env:            childEnv(cfg.isolatedBase(), configured),
			HostNetwork:    hostNetwork,
			Seccomp:        filter,
			SystemRoot:     cfg.SystemRoot,
			Layer:          layer,
		},
		Files:  files,
		IDs:    ids,
		Output: logf,
		Placed: placed,
	}
	cmd, err := c.Start()
	if err != nil {
		_ = p.cgroups.Remove(spec.SandboxID) // placed, maybe, as the start failed
		return nil, fmt.Errorf("start isolated sandbox: %w", err)
	}
	return cmd, nil
}

// egressURL is the proxy as the sandbox's clients see it: the server's
// loopback bridge to the gateway's socket.
var egressURL = "http://127.0.0.1:" + strconv.Itoa(sandboxspec.EgressPort)

// openEgress has the gateway serve the sandbox's egress proxy on a socket in
// a directory of its own, which the jail binds read-only (a socket is
// connected to, not written).
func (p *Process) openEgress(spec backend.Spec) (string, error) {
	dir := p.egressDir(spec.SandboxID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("egress socket dir: %w", err)
	}
	if err := backend.ChmodDir(dir, 0o755); err != nil { // its uid is not ours
		return "", fmt.Errorf("egress socket dir: %w", err)
	}
	if err := p.cfg.Egress.Open(spec.EgressIdentity(), filepath.Join(dir, backend.EgressSocketName)); err != nil {
		return "", fmt.Errorf("serve egress proxy: %w", err)
	}
	return dir, nil
}

// EgressSockets lists the proxy sockets of the live isolated sandboxes, so
// that a gateway can serve the ones nobody serves (after a restart).
func (p *Process) EgressSockets(ctx context.Context) ([]backend.EgressSocket, error) {
	if p.cfg.Egress == nil {
		return nil, nil
	}
	states, _, err := p.liveStates(ctx) // unreadable ones are logged
	if err != nil {
		return nil, err
	}
	var out []backend.EgressSocket
	for _, st := range states {
		if st.Egress == nil || st.Egress.EffectiveMode() != backend.EgressProxy {
			continue
		}
		out = append(out, backend.EgressSocket{
			Identity: backend.EgressIdentity{SandboxID: st.SandboxID, User: st.User, Thread: st.Thread, Egress: *st.Egress},
			Path:     filepath.Join(p.egressDir(st.rid()), backend.EgressSocketName),
		})
	}
	return out, nil
}

// forTemplate is the configuration one sandbox's jail is built from: t's
// root, its env and its memory in place of the backend's.
func (c Config) forTemplate(t backend.Template) Config {
	if t.RootFS != "" {
		c.SystemRoot, c.SystemEnv = t.RootFS, t.RootEnv
	}
	if t.Memory > 0 {
		c.Limits.Memory = t.Memory
	}
	return c
}

// validTemplate reports what in t this backend cannot run: a root needs a
// jail to show it, as Config.SystemRoot does.
func (p *Process) validTemplate(t backend.Template) error {
	if t.RootFS == "" {
		return nil
	}
	if p.cgroups == nil {
		return fmt.Errorf("template %q: an image root (rootfs) needs process_isolation: namespaces", t.Name)
	}
	if !filepath.IsAbs(t.RootFS) {
		return fmt.Errorf("template %q: rootfs is not an absolute path", t.Name)
	}
	for i, kv := range t.RootEnv {
		if !envEntry(kv) {
			return fmt.Errorf("template %q: image environment entry %d is not KEY=VALUE", t.Name, i)
		}
	}
	return nil
}

// isolatedEnv is all an isolated sandbox inherits: nothing of the
// gateway's environment.
var isolatedEnv = []string{
	"PATH=" + sandboxPath,
	"HOME=" + backend.VirtualWorkspace,
	"LANG=C.UTF-8",
	"TERM=xterm-256color",
}

// isolatedBase is isolatedEnv with the system root's variables in place
// of those of the same name.
func (c Config) isolatedBase() []string {
	env := slices.Clone(c.SystemEnv)
	for _, kv := range isolatedEnv {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(c.SystemEnv, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			env = append(env, kv)
		}
	}
	return env
}

// probe builds one throwaway jail, the way every sandbox is built, and
// reports why it could not: the start-up check that this kernel allows
// what isolation needs. Its scratch dir is in the default temp dir, not the
// state dir: a full or read-only data disk is not a kernel that cannot
// isolate, and creates report it themselves (507).
func (p *Process) probe() error {
	dir, err := os.MkdirTemp("", "sandgate-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out, err := os.CreateTemp(dir, "log")
	if err != nil {
		return err
	}
	defer out.Close()
	filter, err := seccompfilter.Program()
	if err != nil {
		return err
	}
	c := jail.Command{
		Binary: p.cfg.Binary,
		Spec: jail.Spec{
			Seccomp: filter,
			Mounts:  []jail.Mount{{Target: backend.VirtualWorkspace, Source: dir}},
			Dir:     "/", Args: []string{"probe"}, Probe: true,
			MemoryByRlimit: p.cgroups.Mode() == jail.CgroupNone,
			SystemRoot:     p.cfg.SystemRoot,
		},
		Output: out,
	}
	c.UID, c.GID = p.hostIDs.Probe()
	if err := jail.Own(dir, c.UID, c.GID); err != nil {
		return err
	}
	cmd, err := c.Start()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(probeTimeout):
		_ = cmd.Process.Kill()
		err = errors.Join(errors.New("timed out"), <-done)
	}
	msg, _ := os.ReadFile(out.Name())
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(msg)))
	}
	_, jailed, _ := strings.Cut(strings.TrimSpace(string(msg)), "sandbox jail: ")
	p.log.Info("process isolation: namespaces", "memory_limit_by", p.cgroups.Mode(),
		"cpu_by", p.cgroups.CPUFrom(), "jail", jailed, "limits", fmt.Sprintf("%+v", p.cfg.Limits.WithDefaults()))
	return nil
}

var _ backend.EgressSockets = (*Process)(nil)
