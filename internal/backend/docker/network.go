package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/sandgate/sandgate/internal/backend"
)

// A container running Sandgate's own server (an image with LabelServer)
// gets no network at all unless its egress is open: --network none, so
// there is no route to another sandbox, to the host's ports or anywhere
// else, which no firewall rule has to get right. The gateway reaches the
// server on a Unix socket, and the sandbox reaches its egress proxy on
// another, both in a directory of the host bound at /run/sandgate:
//
//	{SocketDir}/{sid}/api.sock            the sandbox server (it creates it)
//	{SocketDir}/{sid}/egress/proxy.sock   the egress proxy (the gateway's)
//
// The gateway's data dir holds SocketDir, so a gateway in a container
// (compose) shares them with the engine exactly as it shares thread dirs.
// With egress open the container joins OpenNetwork, a bridge network with
// inter-container traffic disabled.
const (
	// socketMount is where the socket dir is bound in the container.
	socketMount = "/run/sandgate"
	apiSocket   = "api.sock"
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

// socketDir is the host dir bound at socketMount in sid's container.
func (d *Docker) socketDir(sid string) string { return filepath.Join(d.cfg.SocketDir, sid) }

// networking fills in how a container of our own server is reached and
// what it reaches: the socket dir, the server's socket, its egress.
func (d *Docker) networking(spec backend.Spec, cfg *container.Config, host *container.HostConfig) {
	sid := spec.SandboxID
	cfg.Labels[labelAPI] = apiUnix
	host.Mounts = append(host.Mounts, bindMounts([]backend.Mount{{HostPath: d.socketDir(sid), ContainerPath: socketMount}})...)
	policy, _ := json.Marshal(spec.Egress)
	cfg.Labels[labelEgress] = string(policy)
	switch spec.Egress.EffectiveMode() {
	case backend.EgressOpen:
		host.NetworkMode = container.NetworkMode(d.cfg.OpenNetwork)
	case backend.EgressProxy:
		host.NetworkMode = network.NetworkNone
		if d.cfg.Egress != nil {
			cfg.Cmd = append(cfg.Cmd, "--egress-socket", backend.EgressSocketPath)
			// The configured variables win (an operator's own *_PROXY).
			env := backend.ProxyEnv("http://127.0.0.1:" + strconv.Itoa(backend.EgressPort))
			maps.Copy(env, spec.Env)
			cfg.Env = containerEnv(env, true)
		}
	default:
		host.NetworkMode = network.NetworkNone
	}
}

// prepareSockets makes the sandbox's socket dir (writable by whatever uid
// the container runs as: only the gateway can reach it on the host, under
// SocketDir's 0700), the open network when needed, and serves the egress
// proxy.
func (d *Docker) prepareSockets(ctx context.Context, spec backend.Spec) error {
	dir := d.socketDir(spec.SandboxID)
	egressDir := filepath.Join(dir, filepath.Base(backend.EgressDir))
	if err := os.MkdirAll(d.cfg.SocketDir, 0o700); err != nil {
		return fmt.Errorf("%w: socket dir: %w", backend.ErrHostDirs, err)
	}
	if err := os.MkdirAll(egressDir, 0o755); err != nil {
		return fmt.Errorf("%w: socket dir: %w", backend.ErrHostDirs, err)
	}
	if err := errors.Join(os.Chmod(dir, 0o777), os.Chmod(egressDir, 0o755)); err != nil {
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
