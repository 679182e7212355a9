package docker

import (
	"context"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate/internal/backend"
)

var _ backend.OOMWatcher = (*Docker)(nil)

// oomInspectTimeout bounds the inspect that names an OOM event's sandbox.
const oomInspectTimeout = 5 * time.Second

// WatchOOM reports each OOM kill the engine sees in a sandbox container of
// fleet: its "oom" event, sent when the kernel kills a process in the
// container's memory cgroup (the container itself may well go on
// running, so State.OOMKilled of a later inspect would miss it). It
// returns when ctx ends or the event stream fails.
func (d *Docker) WatchOOM(ctx context.Context, fleet string, fn func(info backend.Info, at time.Time)) error {
	msgs, errs := d.api.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("event", string(events.ActionOOM)),
		filters.Arg("label", backend.LabelManagedBy+"="+backend.ManagedByValue))})
	for {
		select {
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return engineErr("watch oom events", err)
		case m := <-msgs:
			// The labels of a claimed pre-started container name the
			// pre-start, not its thread: inspect, as Discover does.
			ictx, cancel := context.WithTimeout(ctx, oomInspectTimeout)
			c, err := d.api.ContainerInspect(ictx, m.Actor.ID)
			cancel()
			if err != nil {
				d.log.Warn("oom event of a container not inspected", "container", shortID(m.Actor.ID), "err", err)
				continue
			}
			it, ok := d.identifyInspect(c)
			if !ok || it.state == orphaned || it.sid == "" || d.nameSID([]string{c.Name}) != it.sid ||
				!backend.InFleet(c.Config.Labels, fleet) {
				continue // another gateway's, or nobody's thread
			}
			fn(backend.Info{SandboxID: it.sid, User: it.user, Thread: it.thread, Incarnation: c.ID, Backend: Name},
				time.Unix(0, m.TimeNano))
		}
	}
}
