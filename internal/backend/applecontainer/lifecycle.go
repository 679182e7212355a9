package applecontainer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sandgate/sandgate/internal/backend"
)

// Destroy stops the sandbox's container with StopTimeout of grace and
// deletes it. A newer incarnation under the same name is left alone;
// unknown is nil; a container that is not ours is an error.
func (a *AppleContainer) Destroy(ctx context.Context, info backend.Info) error {
	sid := info.SandboxID
	if err := backend.ValidSandboxID(sid); err != nil {
		return err
	}
	name := a.name(sid)
	s, found, err := a.find(ctx, name)
	if err != nil || !found {
		return err
	}
	if !ours(s, sid) {
		return fmt.Errorf("destroy sandbox %s: %s is not Sandgate's container of this sandbox; left alone", sid, name)
	}
	inc := s.Configuration.Labels[LabelIncarnation]
	if info.Incarnation != "" && inc != info.Incarnation {
		return nil // already replaced by a newer incarnation
	}
	log := a.log.With("sandbox_id", sid, "thread", s.Configuration.Labels[backend.LabelThread])
	if s.running() {
		grace := strconv.Itoa(int((a.cfg.StopTimeout.Seconds()) + 0.999))
		if _, err := a.cli(ctx, "stop", "--time", grace, name); err != nil {
			log.Warn("stop sandbox container; deleting it anyway", "container", name, "err", err)
		}
	}
	a.remove(name, log)
	if _, still, err := a.find(ctx, name); err != nil || still {
		return fmt.Errorf("destroy sandbox %s: container %s still there (%v)", sid, name, err)
	}
	log.Info("sandbox destroyed", "container", name, "incarnation", inc)
	return nil
}

// Alive reports whether the incarnation's container runs (one CLI call).
func (a *AppleContainer) Alive(ctx context.Context, info backend.Info) (bool, error) {
	if err := backend.ValidSandboxID(info.SandboxID); err != nil {
		return false, err
	}
	s, found, err := a.find(ctx, a.name(info.SandboxID))
	if err != nil || !found {
		return false, err
	}
	return ours(s, info.SandboxID) && s.running() &&
		(info.Incarnation == "" || s.Configuration.Labels[LabelIncarnation] == info.Incarnation), nil
}

// Discover finds the sandbox's running container by name and returns it
// once it answers within discoverReadyTimeout.
func (a *AppleContainer) Discover(ctx context.Context, sid string) (backend.Info, bool, error) {
	if err := backend.ValidSandboxID(sid); err != nil {
		return backend.Info{}, false, err
	}
	s, found, err := a.find(ctx, a.name(sid))
	if err != nil || !found || !ours(s, sid) || !s.running() {
		return backend.Info{}, false, err
	}
	info, err := a.info(s)
	if err != nil {
		return backend.Info{}, false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, discoverReadyTimeout)
	defer cancel()
	if err := backend.WaitReady(rctx, info.URL); err != nil {
		if ctx.Err() != nil {
			return backend.Info{}, false, fmt.Errorf("discover sandbox %s: %w", sid, ctx.Err())
		}
		a.log.Warn("sandbox container runs but does not answer", "sandbox_id", sid, "err", err)
		return backend.Info{}, false, nil
	}
	return info, true, nil
}

// List returns the running containers of this prefix's sandboxes.
func (a *AppleContainer) List(ctx context.Context) ([]backend.Info, error) {
	snaps, err := a.list(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []backend.Info
	for _, s := range snaps {
		sid := s.Configuration.Labels[backend.LabelSandboxID]
		if !ours(s, sid) || s.Configuration.ID != a.name(sid) || !s.running() {
			continue
		}
		info, err := a.info(s)
		if err != nil {
			a.log.Warn("skip sandbox container without an address", "sandbox_id", sid, "err", err)
			continue
		}
		out = append(out, info)
	}
	return out, nil
}
