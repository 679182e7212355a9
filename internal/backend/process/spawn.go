package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// defaultBinary runs the sandboxes when none is configured: SandboxBinary
// of the gateway's, but the gateway's own for a plain sandbox
// (IsolationNone) while tracing is on. The lean binary does not trace
// (package sandboxtrace); a plain sandbox, on the host's network, exports
// its spans, an isolated one has no network to export them on.
func defaultBinary(gateway, isolation string) string {
	if proto, _ := telemetry.ExporterProtocol(os.Getenv); proto != "" && isolation == IsolationNone {
		return gateway
	}
	return SandboxBinary(gateway)
}

// child is a sandbox server this Process started and still waits for.
type child struct {
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
	// recorded is the write end of the child's --recorded-fd pipe: one
	// byte tells it its state file exists. Should this gateway die before
	// (kill -9 between spawn and record), the child reads EOF and exits, so
	// no sandbox runs that neither Discover nor the reconciler can see.
	recorded *os.File
}

// confirm tells the child it is recorded; closing without it (abandon, or
// this process dying) makes the child exit.
func (c *child) confirm() {
	_, _ = c.recorded.Write([]byte{1})
	_ = c.recorded.Close()
}

// validateSpec adds to backend.ValidateSpec what --map's PATH=HOST syntax
// cannot carry.
func validateSpec(spec backend.Spec) error {
	if err := backend.ValidateSpec(spec); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		if strings.Contains(m.ContainerPath, "=") {
			return fmt.Errorf("invalid mount path %q: want a path without '='", m.ContainerPath)
		}
	}
	return nil
}

// serverArgs is the sandbox server's command line (the contract of
// `gateway sandbox`): the listening socket is fd 3, the recorded pipe fd 4,
// the secret pipe fd 5 (when there is a secret), each mount a mapping.
func serverArgs(mounts []backend.Mount, secret bool) ([]string, error) {
	args := []string{sandboxspec.ServerCommand, "--" + sandboxspec.FlagListenFD, "3", "--" + sandboxspec.FlagRecordedFD, "4",
		"--" + sandboxspec.FlagHome, backend.VirtualWorkspace}
	if secret {
		args = append(args, "--"+sandboxspec.FlagSecretFD, "5")
	}
	for _, m := range mounts {
		host, err := filepath.Abs(m.HostPath)
		if err != nil {
			return nil, fmt.Errorf("resolve mount %s: %w", m.ContainerPath, err)
		}
		flag := "--" + sandboxspec.FlagMap
		if m.ReadOnly {
			flag = "--" + sandboxspec.FlagMapRO
		}
		args = append(args, flag, m.ContainerPath+"="+host)
	}
	return args, nil
}

// childEnv is the gateway's environment minus secret-looking variables and
// the gateway's own SANDGATE_* settings (a Redis URL may carry a password),
// plus the configured env, which the server is told to keep. OTEL_* pass
// whole (OTEL_EXPORTER_OTLP_CLIENT_KEY too): they configure the server's
// tracing, and the server keeps them from the commands it runs.
func childEnv(parent []string, configured map[string]string) []string {
	otel := map[string]bool{}
	for _, kv := range parent {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") {
			otel[name] = true
		}
	}
	env := make([]string, 0, len(parent)+len(configured)+1)
	for _, kv := range sandboxspec.StripSecrets(parent, otel) {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := configured[name]; set || strings.HasPrefix(name, "SANDGATE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, backend.ServerEnv(configured, "", sandboxspec.KeepEnvVar)...)
}

// start launches the sandbox server on a socket bound here: connections
// queue in the backlog until the child serves, so there is neither a port
// race nor a startup gap to poll across. Isolated, the server runs in a
// jail (isolate.go) on a Unix socket in the 0700 state dir, so no TCP port
// on the host leads to it; with IsolationNone, as before, it is a plain
// child on a loopback port, in its own process group (so terminal signals
// to the gateway do not reach it, it outlives the gateway, and the whole
// group can be killed).
func (p *Process) start(ctx context.Context, spec backend.Spec) (*child, string, error) {
	sock, url, err := p.listen(ctx, spec.SandboxID)
	if err != nil {
		return nil, "", err
	}
	defer sock.Close()
	logf, err := p.openLog(spec.SandboxID)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()

	recordedR, recordedW, err := os.Pipe()
	if err != nil {
		return nil, "", fmt.Errorf("sandbox recorded pipe: %w", err)
	}
	defer recordedR.Close()
	files := []*os.File{sock, recordedR} // the server's fd 3, fd 4
	if spec.Secret != "" {
		secretR, err := secretPipe(spec.Secret)
		if err != nil {
			_ = recordedW.Close()
			return nil, "", err
		}
		defer secretR.Close()
		files = append(files, secretR) // fd 5
	}
	var cmd *exec.Cmd
	if p.cgroups == nil {
		cmd, err = p.startPlain(spec, files, logf)
	} else {
		cmd, err = p.startJailed(spec, files, logf)
	}
	if err != nil {
		_ = recordedW.Close()
		return nil, "", err
	}
	c := &child{pid: cmd.Process.Pid, done: make(chan struct{}), recorded: recordedW}
	p.mu.Lock()
	p.children[c.pid] = c
	p.mu.Unlock()
	log := p.log.With("sandbox_id", spec.SandboxID, "thread", spec.Thread, "pid", c.pid)
	go func() { // reap: no zombies while this gateway lives
		err := cmd.Wait()
		p.mu.Lock()
		delete(p.children, c.pid)
		p.mu.Unlock()
		close(c.done)
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			log.Warn("wait for sandbox process", "err", err)
			return
		}
		log.Info("sandbox process exited", "status", cmd.ProcessState.String())
	}()
	return c, url, nil
}

// startPlain runs the server as a child of the gateway, with the thread's
// dirs mapped to the virtual paths by rewriting (IsolationNone).
func (p *Process) startPlain(spec backend.Spec, files []*os.File, logf *os.File) (*exec.Cmd, error) {
	args, err := serverArgs(spec.Mounts, spec.Secret != "")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(p.cfg.Binary, args...)
	cmd.Env = childEnv(os.Environ(), spec.Env)
	cmd.Stdout, cmd.Stderr = logf, logf // the file itself, no pipe: the child outlives us
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandbox server: %w", err)
	}
	return cmd, nil
}

// listen binds the sandbox's socket and returns it as a file for the
// child, with the sandbox's URL: a Unix socket in the state dir for an
// isolated sandbox, a loopback port for a plain one. Each incarnation's
// socket has a name of its own, never a dead one's: a replica still
// holding the old route then fails to dial (and re-resolves) instead of
// reaching the new sandbox with the old secret (401). Dead incarnations'
// sockets are removed first: the caller holds the id's lock and found no
// live sandbox.
func (p *Process) listen(ctx context.Context, sid string) (*os.File, string, error) {
	if p.cgroups == nil {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", fmt.Errorf("bind sandbox port: %w", err)
		}
		defer ln.Close()
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			return nil, "", fmt.Errorf("pass sandbox socket: %w", err)
		}
		return f, "http://" + ln.Addr().String(), nil
	}
	if err := p.removeSockets(sid); err != nil {
		return nil, "", err
	}
	nonce := make([]byte, 4)
	_, _ = rand.Read(nonce)
	path := p.socketPath(sid, hex.EncodeToString(nonce))
	dir, err := backend.OwnDir(filepath.Dir(path))
	if err != nil {
		return nil, "", fmt.Errorf("bind sandbox socket: %w", err)
	}
	defer dir.Close()
	ln, err := backend.ListenSocket(dir, filepath.Base(path), 0) // the file is left to the sandbox
	if err != nil {
		return nil, "", fmt.Errorf("bind sandbox socket: %w", err)
	}
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		return nil, "", fmt.Errorf("pass sandbox socket: %w", err)
	}
	return f, backend.UnixURL(path), nil
}

// secretPipe returns the read end of a pipe holding secret, its write end
// already closed: the child reads the secret and EOF, and nothing else (no
// environment, no command line, no file) ever holds it.
func secretPipe(secret string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox secret pipe: %w", err)
	}
	_, err = w.WriteString(secret) // far below the pipe's buffer: never blocks
	if err = errors.Join(err, w.Close()); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("sandbox secret pipe: %w", err)
	}
	return r, nil
}

// ownChild returns the child with that pid if this Process started it.
func (p *Process) ownChild(pid int) *child {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.children[pid]
}
