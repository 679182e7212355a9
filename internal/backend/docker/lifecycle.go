package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/sandgate/sandgate/internal/backend"
)

// Destroy stops the incarnation in info (or, without one, whatever runs
// under the sandbox's name) with StopTimeout of grace, and removes it. A
// paused container is unpaused first so it can take the SIGTERM. Unknown is
// nil; a container that is not this sandbox's is left alone with an error.
func (d *Docker) Destroy(ctx context.Context, info backend.Info) error {
	sid := info.SandboxID
	if err := backend.ValidSandboxID(sid); err != nil {
		return err
	}
	c, err := d.api.ContainerInspect(ctx, cmp.Or(info.Incarnation, d.name(sid)))
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return engineErr("destroy sandbox "+sid, err)
	}
	it, ok := d.identifyInspect(c)
	if ok && it.state == claimed && sid == it.rid {
		return nil // a claimed pre-started sandbox: its old id names nothing
	}
	if !ok || !it.is(sid) {
		return fmt.Errorf("destroy sandbox %s: container %s is not Sandgate's container of this sandbox; left alone", sid, shortID(c.ID))
	}
	if err := d.stopAndRemove(ctx, c); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", sid, err)
	}
	d.dropSockets(it)
	d.log.Info("sandbox destroyed", "sandbox_id", sid, "thread", it.thread, "container", shortID(c.ID))
	return nil
}

func (d *Docker) stopAndRemove(ctx context.Context, c container.InspectResponse) error {
	if c.State.Paused {
		if err := d.unpause(ctx, c.ID); err != nil {
			return err
		}
	}
	if c.State.Running {
		grace := int((d.cfg.StopTimeout + time.Second - 1) / time.Second)
		err := d.api.ContainerStop(ctx, c.ID, container.StopOptions{Timeout: &grace})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return engineErr("stop container", err)
		}
	}
	return d.remove(ctx, c.ID)
}

// remove force-removes a container; gone already is success, and a removal
// already in progress elsewhere is waited for.
func (d *Docker) remove(ctx context.Context, id string) error {
	err := d.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case !cerrdefs.IsConflict(err):
		return engineErr("remove container", err)
	}
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 250*time.Millisecond) {
		if _, err := d.api.ContainerInspect(ctx, id); cerrdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return engineErr("remove container", err)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("remove container %s: %w", shortID(id), err)
		}
	}
}

// Alive reports whether the incarnation's container runs (paused counts):
// one inspect, no call into the sandbox.
func (d *Docker) Alive(ctx context.Context, info backend.Info) (bool, error) {
	target := info.Incarnation
	if target == "" {
		if err := backend.ValidSandboxID(info.SandboxID); err != nil {
			return false, err
		}
		target = d.name(info.SandboxID)
	}
	c, err := d.api.ContainerInspect(ctx, target)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, engineErr("inspect sandbox container", err)
	}
	if info.SandboxID != "" {
		if it, ok := d.identifyInspect(c); !ok || it.state == orphaned || !it.is(info.SandboxID) {
			return false, nil
		}
	}
	return c.State.Running && !c.State.Restarting, nil
}

// Discover finds the sandbox's running container by name and returns it
// once it answers (within discoverReadyTimeout; Create gives a slow one the
// full ReadyTimeout). A paused one is unpaused: Discover's caller is about
// to hand it out. Stopped containers are not found; Create clears them.
func (d *Docker) Discover(ctx context.Context, sid string) (backend.Info, bool, error) {
	if err := backend.ValidSandboxID(sid); err != nil {
		return backend.Info{}, false, err
	}
	c, err := d.api.ContainerInspect(ctx, d.name(sid))
	if cerrdefs.IsNotFound(err) {
		return backend.Info{}, false, nil
	}
	if err != nil {
		return backend.Info{}, false, engineErr("discover sandbox "+sid, err)
	}
	log := d.log.With("sandbox_id", sid, "container", shortID(c.ID))
	if it, ok := d.identifyInspect(c); !ok || it.state == orphaned || !it.is(sid) {
		log.Warn("a container that is not this sandbox's holds its name", "managed", ok, "orphaned", it.state == orphaned)
		return backend.Info{}, false, nil
	}
	if !c.State.Running || c.State.Restarting {
		return backend.Info{}, false, nil
	}
	if c.State.Paused {
		if err := d.unpause(ctx, c.ID); err != nil {
			return backend.Info{}, false, err
		}
		log.Info("unpaused discovered sandbox")
	}
	info, err := d.infoFromInspect(c)
	if err != nil {
		log.Warn("discovered sandbox is unreachable", "err", err)
		return backend.Info{}, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, discoverReadyTimeout)
	defer cancel()
	if err := backend.WaitReadySecret(rctx, info.URL, info.Secret); err != nil {
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("discover sandbox %s: %w", sid, ctx.Err())
		}
		log.Warn("sandbox container runs but does not answer", "thread", info.Thread, "err", err)
		return backend.Info{}, false, nil
	}
	return info, true, nil
}

// List returns the running (or paused) containers of this backend's
// sandboxes: managed-by label and a name of this container prefix, so
// fleets with different prefixes on one engine never adopt each other's.
func (d *Docker) List(ctx context.Context) ([]backend.Info, error) {
	cs, err := d.api.ContainerList(ctx, container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue)),
	})
	if err != nil {
		return nil, engineErr("list sandbox containers", err)
	}
	out := make([]backend.Info, 0, len(cs))
	for _, c := range cs {
		nameSID := d.nameSID(c.Names)
		it, ok := d.identify(c.ID, nameSID, c.Labels, c.Mounts)
		// An orphan is listed under its labels' id, with no identity to adopt.
		if !ok || nameSID == "" || backend.ValidSandboxID(it.sid) != nil || (it.state == unclaimed && nameSID != it.sid) {
			continue
		}
		if c.State != container.StateRunning && c.State != container.StatePaused {
			continue
		}
		url, err := d.sandboxURL(d.name(nameSID), c.Labels, c.Mounts, summaryPorts(c.Ports))
		if err != nil {
			d.log.Warn("skip unreachable sandbox container", "sandbox_id", it.sid, "err", err)
			continue
		}
		var networks map[string]*network.EndpointSettings
		if c.NetworkSettings != nil {
			networks = c.NetworkSettings.Networks
		}
		out = append(out, withSecret(backend.Info{
			SandboxID: it.sid, User: it.user, Thread: it.thread,
			URL: url, Incarnation: c.ID, Backend: Name, Labels: it.labels, CreatedAt: time.Unix(c.Created, 0),
			PortHost: d.portHost(d.name(nameSID), c.Labels, networks),
		}))
	}
	return out, nil
}

// freezeTries bounds Freeze's attempts: runc gives up on a cgroup v1
// freezer that stays FREEZING for a few hundred milliseconds ("unable to
// freeze"), which a loaded host can take; the container runs on unpaused,
// and a later try freezes it.
const freezeTries = 3

// Freeze freezes a warm sandbox's container (docker pause); already paused
// is success.
func (d *Docker) Freeze(ctx context.Context, info backend.Info) error {
	id := cmp.Or(info.Incarnation, d.name(info.SandboxID))
	var err error
	for try := range freezeTries {
		if err = waitTry(ctx, try, 100*time.Millisecond); err != nil {
			break
		}
		err = d.api.ContainerPause(ctx, id)
		if err == nil || client.IsErrConnectionFailed(err) {
			break
		}
		if d.paused(ctx, id) {
			err = nil // already paused (engines differ in the status they answer)
			break
		}
		if !d.running(ctx, id) {
			break // stopped or gone: another try would fail the same way
		}
	}
	if err != nil {
		return engineErr("pause sandbox "+info.SandboxID, err)
	}
	d.log.Debug("sandbox paused", "sandbox_id", info.SandboxID, "thread", info.Thread)
	return nil
}

// Thaw thaws a paused sandbox; not paused is success.
func (d *Docker) Thaw(ctx context.Context, info backend.Info) error {
	if err := d.unpause(ctx, cmp.Or(info.Incarnation, d.name(info.SandboxID))); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", info.SandboxID, err)
	}
	d.log.Debug("sandbox resumed", "sandbox_id", info.SandboxID, "thread", info.Thread)
	return nil
}

// unpauseTries bounds unpause's attempts: the engine can answer a pause
// before the pause has taken effect (containerd's pause returns once
// asked), so an unpause right behind it can land first and leave the
// container paused; each try after the first waits a little longer.
const unpauseTries = 5

func (d *Docker) unpause(ctx context.Context, id string) error {
	for try := range unpauseTries {
		if err := waitTry(ctx, try, 50*time.Millisecond); err != nil {
			return engineErr("unpause container", err)
		}
		err := d.api.ContainerUnpause(ctx, id)
		// Done once it runs unpaused, whatever the answer (engines differ
		// in the status they give for a container that was not paused).
		if d.running(ctx, id) {
			return nil
		}
		if err != nil && !d.paused(ctx, id) {
			return engineErr("unpause container", err) // stopped, gone, or no engine
		}
		// still paused: the pause this overtook took effect after it
	}
	return engineErr("unpause container", errors.New("still paused after "+strconv.Itoa(unpauseTries)+" unpauses"))
}

// waitTry waits before attempt try of a retried engine call: nothing
// before the first, try × step before each after it.
func waitTry(ctx context.Context, try int, step time.Duration) error {
	if try == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(try) * step):
		return nil
	}
}

func (d *Docker) paused(ctx context.Context, id string) bool {
	c, err := d.api.ContainerInspect(ctx, id)
	return err == nil && c.State != nil && c.State.Paused
}

// running: running and not paused.
func (d *Docker) running(ctx context.Context, id string) bool {
	c, err := d.api.ContainerInspect(ctx, id)
	return err == nil && c.State != nil && c.State.Running && !c.State.Paused
}

// inspectInfo inspects a container and describes it.
func (d *Docker) inspectInfo(ctx context.Context, id string) (backend.Info, error) {
	c, err := d.api.ContainerInspect(ctx, id)
	if err != nil {
		return backend.Info{}, engineErr("inspect container", err)
	}
	return d.infoFromInspect(c)
}

func (d *Docker) infoFromInspect(c container.InspectResponse) (backend.Info, error) {
	var ports nat.PortMap
	var networks map[string]*network.EndpointSettings
	if c.NetworkSettings != nil {
		ports, networks = c.NetworkSettings.Ports, c.NetworkSettings.Networks
	}
	url, err := d.sandboxURL(strings.TrimPrefix(c.Name, "/"), c.Config.Labels, c.Mounts, ports)
	if err != nil {
		return backend.Info{}, err
	}
	it, ok := d.identifyInspect(c)
	if !ok { // not labelled as ours: describe it by its labels, as ever
		labels := c.Config.Labels
		it = ident{sid: labels[backend.LabelSandboxID], user: labels[backend.LabelUser], thread: labels[backend.LabelThread], labels: labels}
	}
	return withSecret(backend.Info{
		SandboxID: it.sid, User: it.user, Thread: it.thread,
		URL: url, Incarnation: c.ID, Backend: Name, Labels: it.labels, CreatedAt: parseTime(c.Created),
		PortHost: d.portHost(strings.TrimPrefix(c.Name, "/"), c.Config.Labels, networks),
	}), nil
}

// summaryPorts turns a list entry's ports into the inspect form.
func summaryPorts(ps []container.Port) nat.PortMap {
	m := nat.PortMap{}
	for _, p := range ps {
		if p.PublicPort == 0 {
			continue
		}
		key := nat.Port(strconv.Itoa(int(p.PrivatePort)) + "/" + p.Type)
		m[key] = append(m[key], nat.PortBinding{HostIP: p.IP, HostPort: strconv.Itoa(int(p.PublicPort))})
	}
	return m
}
