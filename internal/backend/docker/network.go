package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// A container running Sandgate's own server (an image with LabelServer)
// gets no network at all unless its egress is open: --network none, so
// there is no route to another sandbox, to the host's ports or anywhere
// else, which no firewall rule has to get right. The gateway reaches the
// server on a Unix socket, and the sandbox reaches its egress proxy on
// another, each in a directory of the host of its own:
//
//	{SocketDir}/{sid}/                    the gateway's (0755), not in the container
//	{SocketDir}/{sid}/api/api-*.sock      the server's socket (it creates it): the dir
//	                                      is bound read-write at /run/sandgate/api
//	{SocketDir}/{sid}/egress/proxy.sock   the egress proxy (the gateway's): the dir
//	                                      is bound read-only at /run/sandgate/egress
//
// The container can write in api/ only, which it sees as a mount's root
// (it can rename neither it nor egress/), so nothing it writes is a parent
// of a path the gateway uses, and the one name it controls, its socket's,
// the gateway dials without following a symlink (backend.DialSocket).
// Containers made before this layout have {sid} bound read-write at
// /run/sandgate (legacySocketMount): still dialled safely, and their egress
// socket served only while egress/ is the gateway's own (backend.OwnDir).
//
// The gateway's data dir holds SocketDir, so a gateway in a container
// (compose) shares them with the engine exactly as it shares thread dirs.
// With egress open the container joins OpenNetwork, a bridge network with
// inter-container traffic disabled.
const (
	// apiMount is where the server's socket dir is bound in the container.
	apiMount = "/run/sandgate/api"
	// legacySocketMount is where containers made before the api/ dir had
	// the whole socket dir bound.
	legacySocketMount = "/run/sandgate"
	apiDirName        = "api"
	apiSocket         = "api.sock"
	// labelAPISocket names the server's socket of this incarnation
	// (api-{random}.sock): a replica still holding a dead incarnation's
	// route then fails to dial and re-resolves, instead of reaching the new
	// server with the old secret (401).
	labelAPISocket = "io.sandgate.api-socket"
	// labelAPI = apiUnix marks a container whose server answers on the
	// socket; others are reached over TCP.
	labelAPI = "io.sandgate.api"
	apiUnix  = "unix"
	// labelEgress holds the sandbox's egress policy (JSON), to serve its
	// proxy again after a gateway restart.
	labelEgress = "io.sandgate.egress"
	// DefaultOpenNetwork is the network of containers whose egress is open.
	DefaultOpenNetwork = "sandgate-open"
)

// socketDir is sid's socket dir on the host (SocketDir/{sid}).
func (d *Docker) socketDir(sid string) string { return filepath.Join(d.cfg.SocketDir, sid) }

// mountedSocketDir is the host socket dir of a container, read off its
// mounts (the replica that made it may have another socket_dir), and the
// dir its server's socket is in.
func mountedSocketDir(mounts []container.MountPoint) (dir, apiDir string, ok bool) {
	for _, m := range mounts {
		switch m.Destination {
		case apiMount:
			return filepath.Dir(m.Source), m.Source, true
		case legacySocketMount:
			return m.Source, m.Source, true
		}
	}
	return "", "", false
}

// networking fills in how a container of our own server is reached and
// what it reaches: the socket dir, the server's socket, its egress.
func (d *Docker) networking(spec backend.Spec, cfg *container.Config, host *container.HostConfig) {
	sid := spec.SandboxID
	cfg.Labels[labelAPI] = apiUnix
	dir := d.socketDir(sid)
	host.Mounts = append(host.Mounts, bindMounts([]backend.Mount{
		{HostPath: filepath.Join(dir, apiDirName), ContainerPath: apiMount},
		{HostPath: filepath.Join(dir, filepath.Base(backend.EgressDir)), ContainerPath: backend.EgressDir, ReadOnly: true},
	})...)
	policy, _ := json.Marshal(spec.Egress)
	cfg.Labels[labelEgress] = string(policy)
	switch spec.Egress.EffectiveMode() {
	case backend.EgressOpen:
		host.NetworkMode = container.NetworkMode(d.cfg.OpenNetwork)
	case backend.EgressProxy:
		host.NetworkMode = network.NetworkNone
		if d.cfg.Egress != nil {
			cfg.Cmd = append(cfg.Cmd, "--"+sandboxspec.FlagEgressSocket, backend.EgressSocketPath)
			// The configured variables win (an operator's own *_PROXY).
			env := backend.ProxyEnv("http://127.0.0.1:" + strconv.Itoa(sandboxspec.EgressPort))
			maps.Copy(env, spec.Env)
			cfg.Env = containerEnv(env, true)
		}
	default:
		host.NetworkMode = network.NetworkNone
	}
}

// prepareSockets makes the sandbox's socket dirs (see above: api/ writable
// by whatever uid the container runs as, the rest the gateway's; only the
// gateway reaches them on the host, under SocketDir's 0700), the open
// network when needed, and serves the egress proxy. A concurrent creator
// (another replica) may have made them already.
func (d *Docker) prepareSockets(ctx context.Context, spec backend.Spec) error {
	dir := d.socketDir(spec.SandboxID)
	egressDir := filepath.Join(dir, filepath.Base(backend.EgressDir))
	if err := os.MkdirAll(d.cfg.SocketDir, 0o700); err != nil {
		return fmt.Errorf("%w: socket dir: %w", backend.ErrHostDirs, err)
	}
	err := errors.Join(ensureDir(dir, 0o755), ensureDir(filepath.Join(dir, apiDirName), 0o777), ensureDir(egressDir, 0o755))
	if err != nil {
		return fmt.Errorf("%w: socket dir: %w", backend.ErrHostDirs, err)
	}
	switch spec.Egress.EffectiveMode() {
	case backend.EgressOpen:
		return d.ensureOpenNetwork(ctx)
	case backend.EgressProxy:
		if d.cfg.Egress == nil {
			return nil
		}
		if err := d.cfg.Egress.Open(spec.EgressIdentity(), filepath.Join(egressDir, backend.EgressSocketName)); err != nil {
			return fmt.Errorf("serve egress proxy: %w", err)
		}
	}
	return nil
}

// ensureDir makes a directory unless it exists, checks that it is one of
// the gateway's (not a symlink, its uid: no sandbox writes in the dirs
// above), and sets its mode through its descriptor (Mkdir's would be
// narrowed by the umask).
func ensureDir(path string, mode os.FileMode) error {
	if err := os.Mkdir(path, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is not a dir of the gateway's", filepath.Base(path))
	}
	return backend.ChmodDir(path, mode)
}

// dropSockets stops serving a removed container's proxy (under the ids it
// may be known by) and removes its socket dir and claim record.
func (d *Docker) dropSockets(it ident) {
	if d.cfg.Egress != nil {
		d.cfg.Egress.Close(it.sid)
		if it.state == orphaned {
			d.cfg.Egress.Close(it.nameSID)
		}
	}
	if d.cfg.SocketDir != "" && backend.ValidSandboxID(it.rid) == nil {
		_ = os.RemoveAll(d.socketDir(it.rid))
	}
	dropClaim(it)
}

// egressSocket is the proxy socket of the container whose runtime id is rid.
func (d *Docker) egressSocket(rid string) string {
	return filepath.Join(d.socketDir(rid), filepath.Base(backend.EgressDir), backend.EgressSocketName)
}

// proxyPolicy is a container's egress policy when it goes through the proxy.
func proxyPolicy(labels map[string]string) (backend.Egress, bool) {
	var policy backend.Egress
	if labels[labelAPI] != apiUnix || json.Unmarshal([]byte(labels[labelEgress]), &policy) != nil ||
		policy.EffectiveMode() != backend.EgressProxy {
		return backend.Egress{}, false
	}
	return policy, true
}

// ensureOpenNetwork creates OpenNetwork unless it exists: a bridge with
// inter-container traffic disabled, so open sandboxes reach out but not
// each other.
func (d *Docker) ensureOpenNetwork(ctx context.Context) error {
	if _, err := d.api.NetworkInspect(ctx, d.cfg.OpenNetwork, network.InspectOptions{}); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return engineErr("inspect network "+d.cfg.OpenNetwork, err)
	}
	_, err := d.api.NetworkCreate(ctx, d.cfg.OpenNetwork, network.CreateOptions{
		Driver:  "bridge",
		Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"},
		Labels:  map[string]string{backend.LabelManagedBy: backend.ManagedByValue},
	})
	if err != nil && !cerrdefs.IsConflict(err) { // a concurrent create won
		return engineErr("create network "+d.cfg.OpenNetwork, err)
	}
	return nil
}

// EgressSockets lists the proxy sockets of the running containers whose
// egress goes through the proxy.
func (d *Docker) EgressSockets(ctx context.Context) ([]backend.EgressSocket, error) {
	if d.cfg.Egress == nil {
		return nil, nil
	}
	cs, err := d.api.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue),
		filters.Arg("label", labelAPI+"="+apiUnix))})
	if err != nil {
		return nil, engineErr("list sandbox containers", err)
	}
	var out []backend.EgressSocket
	for _, c := range cs {
		it, ok := d.identify(c.ID, d.nameSID(c.Names), c.Labels, c.Mounts)
		policy, proxied := proxyPolicy(c.Labels)
		// An orphan gets no proxy: nothing may speak for a thread it cannot name.
		if !ok || !proxied || it.state == orphaned || it.nameSID != it.sid || backend.ValidSandboxID(it.rid) != nil {
			continue
		}
		out = append(out, backend.EgressSocket{
			Identity: backend.EgressIdentity{SandboxID: it.sid, User: it.user, Thread: it.thread, Egress: policy},
			Path:     d.egressSocket(it.rid),
		})
	}
	return out, nil
}

var _ backend.EgressSockets = (*Docker)(nil)

// newAPISocketName is a fresh name for an incarnation's server socket.
func newAPISocketName() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "api-" + hex.EncodeToString(b) + ".sock"
}
