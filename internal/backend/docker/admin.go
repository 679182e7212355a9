package docker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate/internal/backend"
)

var (
	_ backend.LogStreamer = (*Docker)(nil)
	_ backend.Statter     = (*Docker)(nil)
	_ backend.LayerMeter  = (*Docker)(nil)
	_ backend.Pruner      = (*Docker)(nil)
)

// Logs streams the container's stdout and stderr (docker logs), demuxed.
func (d *Docker) Logs(ctx context.Context, info backend.Info, opts backend.LogOptions) (io.ReadCloser, error) {
	if err := backend.ValidSandboxID(info.SandboxID); err != nil {
		return nil, err
	}
	lo := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: opts.Follow}
	if opts.Tail > 0 {
		lo.Tail = strconv.Itoa(opts.Tail)
	}
	rc, err := d.api.ContainerLogs(ctx, cmp.Or(info.Incarnation, d.name(info.SandboxID)), lo)
	if err != nil {
		return nil, engineErr("logs of sandbox "+info.SandboxID, err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, rc)
		rc.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// Stats is one sample of docker stats.
func (d *Docker) Stats(ctx context.Context, info backend.Info) (backend.Stats, error) {
	resp, err := d.api.ContainerStatsOneShot(ctx, cmp.Or(info.Incarnation, d.name(info.SandboxID)))
	if err != nil {
		return backend.Stats{}, engineErr("stats of sandbox "+info.SandboxID, err)
	}
	defer resp.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return backend.Stats{}, fmt.Errorf("stats of sandbox %s: decode: %w", info.SandboxID, err)
	}
	return backend.Stats{
		CPUSeconds:  float64(s.CPUStats.CPUUsage.TotalUsage) / 1e9,
		MemoryBytes: int64(s.MemoryStats.Usage), //nolint:gosec // bytes of one container fit
		PIDs:        int(s.PidsStats.Current),   //nolint:gosec
		At:          cmp.Or(s.Read, time.Now()).UTC(),
	}, nil
}

// LayerBytes is the container's writable layer (docker inspect --size:
// SizeRw). The engine computes it by walking the layer on each ask, so the
// sampler asks every few samples.
func (d *Docker) LayerBytes(ctx context.Context, info backend.Info) (int64, bool, error) {
	c, _, err := d.api.ContainerInspectWithRaw(ctx, cmp.Or(info.Incarnation, d.name(info.SandboxID)), true)
	if err != nil {
		return 0, false, engineErr("size of sandbox "+info.SandboxID, err)
	}
	if c.SizeRw == nil {
		return 0, false, nil
	}
	return *c.SizeRw, true, nil
}

// Leftovers are this fleet's containers of this prefix that no longer run
// (exited, dead, created and never started): List ignores them, and
// nothing else removes them.
func (d *Docker) Leftovers(ctx context.Context, fleet string) ([]backend.Leftover, error) {
	cs, err := d.api.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue))})
	if err != nil {
		return nil, engineErr("list sandbox containers", err)
	}
	var out []backend.Leftover
	for _, c := range cs {
		nameSID := d.nameSID(c.Names)
		it, ok := d.identify(c.ID, nameSID, c.Labels, c.Mounts)
		if !ok || nameSID == "" || backend.ValidSandboxID(it.sid) != nil || !backend.InFleet(it.labels, fleet) ||
			(it.state == unclaimed && nameSID != it.sid) {
			continue
		}
		if !d.leftover(it, c.State) {
			continue
		}
		out = append(out, backend.Leftover{Kind: "container", Name: c.ID, SandboxID: it.sid})
	}
	return out, nil
}

// leftover: a container in state nothing else removes. A running orphan is
// one once a claim that might still be renaming it is long over.
func (d *Docker) leftover(it ident, state container.ContainerState) bool {
	if it.state == orphaned {
		return it.recordTime.IsZero() || time.Since(it.recordTime) > createdGrace
	}
	return state != container.StateRunning && state != container.StatePaused && state != container.StateRestarting
}

// RemoveLeftover removes one stopped container found by Leftovers, checked
// again: still ours, still stopped.
func (d *Docker) RemoveLeftover(ctx context.Context, l backend.Leftover) error {
	if l.Kind != "container" {
		return fmt.Errorf("remove leftover %s %q: not a container", l.Kind, l.Name)
	}
	c, err := d.api.ContainerInspect(ctx, l.Name)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return engineErr("inspect container", err)
	}
	it, ok := d.identifyInspect(c)
	if !ok || !it.is(l.SandboxID) || c.State == nil || !d.leftover(it, c.State.Status) {
		return fmt.Errorf("container %s is running or not this sandbox's; left alone", shortID(c.ID))
	}
	if err := d.stopAndRemove(ctx, c); err != nil {
		return err
	}
	if it.state == unclaimed {
		dropClaim(it)
	} else {
		d.dropRuntime(it)
	}
	return nil
}
