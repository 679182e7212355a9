package docker

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// containerSpec is everything ContainerCreate takes, built without the engine.
type containerSpec struct {
	Name    string
	Config  *container.Config
	Host    *container.HostConfig
	Network *network.NetworkingConfig
	// Secret is delivered into the container before it starts; "" = none.
	Secret string
	// User is who the container runs as (user.go).
	User sandboxUser
}

// name is the container name of a sandbox id.
func (d *Docker) name(sid string) string { return d.cfg.ContainerPrefix + "-" + sid }

// containerSpec builds the container for spec. serverPath is the image's
// LabelServer value: non-empty means the backend starts the sandbox server
// itself; empty means the image's own entrypoint serves the API on Port.
func (d *Docker) containerSpec(spec backend.Spec, serverPath string) containerSpec {
	port := nat.Port(strconv.Itoa(d.cfg.Port) + "/tcp")
	user := resolveUser(d.cfg.User, spec.SandboxID, os.Geteuid(), os.Getegid())
	cfg := &container.Config{
		Image:  d.image(spec.Template),
		User:   user.user,
		Env:    containerEnv(spec.Env, serverPath != ""),
		Labels: backend.IdentityLabels(spec, d.cfg.Instance, spec.Labels),
	}
	if serverPath != "" {
		cfg.Entrypoint = []string{serverPath}
		// Each incarnation's socket has a name of its own (see labelAPISocket).
		sock := newAPISocketName()
		cfg.Labels[labelAPISocket] = sock
		cfg.Cmd = []string{sandboxspec.ServerCommand, "--" + sandboxspec.FlagListen, "unix:" + apiMount + "/" + sock,
			"--" + sandboxspec.FlagHome, backend.VirtualWorkspace}
		cfg.WorkingDir = backend.VirtualWorkspace
		if user.umask != "" {
			cfg.Cmd = append(cfg.Cmd, "--"+sandboxspec.FlagUmask, user.umask)
		}
		if spec.Secret != "" { // only our server takes one (secret.go)
			cfg.Cmd = append(cfg.Cmd, "--"+sandboxspec.FlagSecretFile, secretPath)
			cfg.Labels[labelSecret] = spec.Secret
		}
	}

	security := []string{"no-new-privileges:true"}
	if d.cfg.SeccompUnconfined {
		security = append(security, "seccomp=unconfined")
	}
	withInit := true
	host := &container.HostConfig{
		Mounts:      bindMounts(spec.Mounts),
		SecurityOpt: security,
		CapDrop:     []string{"ALL"},
		CapAdd:      slices.Clone(d.cfg.CapAdd),
		Init:        &withInit,
		Resources:   d.resources(spec.Template),
		StorageOpt:  d.storageOpt(),
		// No restart policy: a dead sandbox is replaced by the pool, with a
		// new incarnation, rather than revived under the old one.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	var netCfg *network.NetworkingConfig
	switch {
	case serverPath != "":
		d.networking(spec, cfg, host)
	case d.cfg.Network != "":
		// An image serving its own API needs a network the gateway shares.
		cfg.ExposedPorts = nat.PortSet{port: struct{}{}}
		host.NetworkMode = container.NetworkMode(d.cfg.Network)
		netCfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{d.cfg.Network: {}}}
	default:
		// HostPort "" lets the engine pick a free port: no scanning, no race.
		cfg.ExposedPorts = nat.PortSet{port: struct{}{}}
		host.PortBindings = nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: ""}}}
	}
	return containerSpec{Name: d.name(spec.SandboxID), Config: cfg, Host: host, Network: netCfg, Secret: cfg.Labels[labelSecret], User: user}
}

// image is the image a sandbox made from t runs.
func (d *Docker) image(t backend.Template) string { return cmp.Or(t.Image, d.cfg.Image) }

// resources maps the limits, t's memory in place of the configured; a
// negative limit means none.
func (d *Docker) resources(t backend.Template) container.Resources {
	var r container.Resources
	if memory := cmp.Or(max(t.Memory, 0), d.cfg.Memory); memory > 0 {
		r.Memory = memory
	}
	if d.cfg.NanoCPUs > 0 {
		r.NanoCPUs = d.cfg.NanoCPUs
	}
	if d.cfg.PidsLimit > 0 {
		pids := int64(d.cfg.PidsLimit)
		r.PidsLimit = &pids
	}
	return r
}

// storageOpt is the writable layer's size limit, if any.
func (d *Docker) storageOpt() map[string]string {
	if d.cfg.DiskLimit <= 0 {
		return nil
	}
	return map[string]string{"size": strconv.FormatInt(d.cfg.DiskLimit, 10)}
}

// createErr names docker_disk_limit when the engine refuses it: only some
// storage drivers take a size (overlay2 on xfs with pquota, btrfs, zfs,
// devicemapper); the others refuse every --storage-opt.
func (d *Docker) createErr(sid string, err error) error {
	msg := strings.ToLower(err.Error())
	if d.cfg.DiskLimit > 0 && (strings.Contains(msg, "storage-opt") || strings.Contains(msg, "storage opt")) {
		return fmt.Errorf("create sandbox %s: docker_disk_limit: the engine's storage driver does not support a per-container size limit (unset docker_disk_limit, or use overlay2 on xfs with pquota): %w", sid, err)
	}
	return engineErr("create sandbox "+sid, err)
}

// bindMounts maps the spec's mounts; host paths are made absolute (the
// engine resolves them on its host, which is this one unless the gateway
// runs in a container: then data_dir must be mounted at the same path).
func bindMounts(ms []backend.Mount) []mount.Mount {
	out := make([]mount.Mount, 0, len(ms))
	for _, m := range ms {
		src, err := filepath.Abs(m.HostPath)
		if err != nil {
			src = m.HostPath // no working directory: let the engine say what is wrong
		}
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: src, Target: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return out
}

// containerEnv is the configured environment, sorted; for our own server
// also HOME = the workspace unless configured (matching the home_dir the
// API reports) and the list of configured names (which the server
// otherwise strips when they look secret, such as API_KEY).
func containerEnv(configured map[string]string, ownServer bool) []string {
	if !ownServer {
		return backend.ServerEnv(configured, "", "")
	}
	return backend.ServerEnv(configured, backend.VirtualWorkspace, sandboxspec.KeepEnvVar)
}

// portHost is where the gateway dials the ports of a container that runs
// no Sandgate server (a TCP image, which has no bridge): by name on the
// gateway's network, else its address on the network it is on (the host
// reaches a bridge network's addresses). Its apps must listen on that
// address (0.0.0.0), not on the container's loopback. Our own server's
// containers have "": their ports go through the server's bridge.
func (d *Docker) portHost(name string, labels map[string]string, networks map[string]*network.EndpointSettings) string {
	if labels[labelAPI] == apiUnix {
		return ""
	}
	if d.cfg.Network != "" {
		return name
	}
	for _, n := range slices.Sorted(maps.Keys(networks)) {
		if ep := networks[n]; ep != nil && ep.IPAddress != "" {
			return ep.IPAddress
		}
	}
	return ""
}

// sandboxURL is where the gateway reaches the container: our server's Unix
// socket, else the published loopback port, or the container name on the
// shared network.
func (d *Docker) sandboxURL(name string, labels map[string]string, mounts []container.MountPoint, ports nat.PortMap) (string, error) {
	if labels[labelAPI] == apiUnix {
		// Where the container's socket dir really is: the replica that made
		// it may have another socket_dir.
		_, apiDir, ok := mountedSocketDir(mounts)
		if !ok {
			return "", fmt.Errorf("container %s has no socket dir mounted at %s", name, apiMount)
		}
		sock := labels[labelAPISocket]
		if sock == "" || sock != filepath.Base(sock) {
			sock = apiSocket // a container made before sockets were named per incarnation
		}
		return backend.UnixURL(filepath.Join(apiDir, sock)), nil
	}
	if d.cfg.Network != "" {
		return "http://" + name + ":" + strconv.Itoa(d.cfg.Port), nil
	}
	for _, b := range ports[nat.Port(strconv.Itoa(d.cfg.Port)+"/tcp")] {
		if b.HostIP == "127.0.0.1" && b.HostPort != "" {
			return "http://127.0.0.1:" + b.HostPort, nil
		}
	}
	return "", fmt.Errorf("container %s has no port %d published on 127.0.0.1", name, d.cfg.Port)
}
