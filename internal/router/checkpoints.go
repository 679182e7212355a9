package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// maxCheckpointBody bounds the small JSON bodies of these routes and of
// PUT /threads/{thread}/sandbox.
const maxCheckpointBody = 16 << 10

// decodeOptional reads a small JSON object body into dst; an empty body
// leaves dst as it is. Unknown fields are refused: a misspelt option is
// not silently dropped.
func decodeOptional(c echo.Context, dst any) error {
	r := c.Request()
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, maxCheckpointBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return tooLarge
		}
		return fmt.Errorf("%w: %w", errBadCheckpointBody, err)
	}
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: %w", errBadCheckpointBody, err)
	}
	return nil
}

// checkpointsFor is the thread of a checkpoint route, once the backend
// keeps its data here.
func (rt *Router) checkpointsFor(c echo.Context, p *auth.Principal) (string, error) {
	if err := rt.checkpointsHere(); err != nil {
		return "", err
	}
	return threadParam(c, p)
}

// checkpointsHere is nil when the backend keeps thread data on this host.
func (rt *Router) checkpointsHere() error {
	if rt.checkpoints == nil || rt.holder == nil {
		return backend.Unsupported("checkpoints, restore and fork", "they need thread data on the gateway host (process, docker; kubernetes with kubernetes_shared_data_dir)")
	}
	return nil
}

// hold is the Hold of (user, thread)'s sandbox for this request.
func (rt *Router) hold(ctx context.Context, user, thread string, force bool) checkpoint.Hold {
	return func(fn func() error) error { return rt.holder.Hold(ctx, user, thread, force, fn) }
}

// createCheckpoint is POST /threads/{thread}/checkpoints {"label"}: the
// sandbox is frozen while its workspace is copied (a consistent tree; a
// running command is paused, not refused).
func (rt *Router) createCheckpoint(c echo.Context, p *auth.Principal) error {
	thread, err := rt.checkpointsFor(c, p)
	if err != nil {
		return err
	}
	var req api.CreateCheckpoint
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	info, err := rt.checkpoint(c.Request().Context(), p.User, thread, req.Label)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, info)
}

// checkpoint checkpoints (user, thread)'s workspace (this route and the
// status page's action): the caller checked that the checkpoints are here
// (checkpointsFor) and that it may act on the thread.
func (rt *Router) checkpoint(ctx context.Context, user, thread, label string) (api.Checkpoint, error) {
	start := time.Now()
	info, err := rt.checkpoints.Create(ctx, user, thread, label, rt.hold(ctx, user, thread, true))
	if errors.Is(err, checkpoint.ErrRetention) {
		rt.log.WarnContext(ctx, "checkpoint retention", "user", user, "thread", thread, "err", err)
		err = nil
	}
	if err != nil {
		return api.Checkpoint{}, err
	}
	rt.log.InfoContext(ctx, "checkpoint created", "user", user, "thread", thread, "checkpoint", info.ID,
		"method", info.Method, "files", info.Files, "bytes", info.Size, "took", time.Since(start).Round(time.Millisecond))
	rt.publish(ctx, events.Event{Type: events.Checkpointed, User: user, Thread: thread, Checkpoint: info.ID})
	return info, nil
}

// listCheckpoints is GET /threads/{thread}/checkpoints, newest first.
func (rt *Router) listCheckpoints(c echo.Context, p *auth.Principal) error {
	thread, err := rt.checkpointsFor(c, p)
	if err != nil {
		return err
	}
	list, err := rt.checkpoints.List(c.Request().Context(), p.User, thread)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.CheckpointList{Thread: thread, Method: string(rt.checkpoints.Method()), Checkpoints: list})
}

// getCheckpoint is GET /threads/{thread}/checkpoints/{id}.
func (rt *Router) getCheckpoint(c echo.Context, p *auth.Principal) error {
	thread, err := rt.checkpointsFor(c, p)
	if err != nil {
		return err
	}
	info, err := rt.checkpoints.Get(c.Request().Context(), p.User, thread, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, info)
}

// deleteCheckpoint is DELETE /threads/{thread}/checkpoints/{id}.
func (rt *Router) deleteCheckpoint(c echo.Context, p *auth.Principal) error {
	thread, err := rt.checkpointsFor(c, p)
	if err != nil {
		return err
	}
	if err := rt.checkpoints.Delete(c.Request().Context(), p.User, thread, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// restoreCheckpoint is POST /threads/{thread}/checkpoints/{id}/restore
// {"force"}: the workspace becomes the checkpoint's tree; the sandbox keeps
// running. One that runs a command or serves a request is refused (409)
// unless force, which swaps the files with its processes frozen.
func (rt *Router) restoreCheckpoint(c echo.Context, p *auth.Principal) error {
	thread, err := rt.checkpointsFor(c, p)
	if err != nil {
		return err
	}
	var req api.RestoreCheckpoint
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	ctx, id := c.Request().Context(), c.Param("id")
	info, err := rt.checkpoints.Get(ctx, p.User, thread, id)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := rt.checkpoints.Restore(ctx, p.User, thread, id, rt.hold(ctx, p.User, thread, req.Force)); err != nil {
		return err
	}
	rt.log.InfoContext(ctx, "checkpoint restored", "user", p.User, "thread", thread, "checkpoint", id,
		"force", req.Force, "took", time.Since(start).Round(time.Millisecond))
	rt.publish(ctx, events.Event{Type: events.Restored, User: p.User, Thread: thread, Checkpoint: id})
	return c.JSON(http.StatusOK, api.Restored{Restored: info, Thread: thread})
}

// forkThread is POST /threads/{thread}/fork {"thread": t2, "checkpoint"}:
// t2, of the same user and new (no sandbox, no files), gets a copy of the
// thread's workspace (its current state, or a checkpoint) and a sandbox of
// its own; from then on the two diverge.
func (rt *Router) forkThread(c echo.Context, p *auth.Principal) error {
	from, err := rt.checkpointsFor(c, p)
	if err != nil {
		return err
	}
	var req api.Fork
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	if err := identity.ValidThread(req.Thread); err != nil {
		return err
	}
	if err := open(p, req.Thread); err != nil {
		return err
	}
	if req.Thread == from {
		return errForkSelf
	}
	ctx := c.Request().Context()
	rec, ok, err := rt.pool.Record(ctx, identity.SandboxID(p.User, req.Thread))
	if err != nil {
		return err
	}
	if ok && rec.State != state.StateDestroying {
		return fmt.Errorf("%w: thread %s already has a sandbox", checkpoint.ErrNotEmpty, req.Thread)
	}
	start := time.Now()
	err = rt.checkpoints.Fork(ctx, p.User, from, req.Thread, req.Checkpoint,
		rt.hold(ctx, p.User, from, true), rt.hold(ctx, p.User, req.Thread, true))
	if err != nil {
		return err
	}
	rt.log.InfoContext(ctx, "thread forked", "user", p.User, "thread", from, "fork", req.Thread,
		"checkpoint", req.Checkpoint, "took", time.Since(start).Round(time.Millisecond))
	// Before its sandbox's own events: the copy is what it starts from.
	rt.publish(ctx, events.Event{Type: events.Forked, User: p.User, Thread: req.Thread, From: from, Checkpoint: req.Checkpoint})
	view, err := rt.acquireView(c, p, req.Thread)
	if err != nil {
		rt.unfork(ctx, p.User, req.Thread)
		return err
	}
	return c.JSON(http.StatusCreated, view)
}

// publish reports a step the router carries out itself (checkpoints,
// forks): the pool never sees them. A no-op without events.
func (rt *Router) publish(ctx context.Context, e events.Event) {
	if rt.events == nil {
		return
	}
	e.SandboxID = identity.SandboxID(e.User, e.Thread)
	rt.events.Publish(ctx, e)
}

// unfork takes back the copy of a fork whose sandbox was refused (create_rate,
// a quota, a failed start): a refused fork must not leave a full copy on
// disk nor keep the thread's name. It runs under the new thread's hold and
// leaves the files alone if a sandbox got the thread meanwhile.
func (rt *Router) unfork(ctx context.Context, user, thread string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := rt.hold(ctx, user, thread, true)(func() error {
		rec, ok, err := rt.pool.Record(ctx, identity.SandboxID(user, thread))
		if err != nil {
			return err
		}
		if ok && rec.State != state.StateDestroying {
			return nil
		}
		return rt.checkpoints.Unfork(ctx, user, thread)
	})
	if err != nil {
		rt.log.WarnContext(ctx, "remove refused fork", "user", user, "thread", thread, "err", err)
	}
}

// freezeThread is POST /threads/{thread}/sandbox/freeze: freeze it now, as
// freeze_after would once it is idle; its next request thaws it.
func (rt *Router) freezeThread(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	if err := rt.freeze(c.Request().Context(), p.User, thread); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.Frozen{Frozen: true, Thread: thread})
}

// freeze freezes (user, thread)'s sandbox now (this route and the status
// page's action; the caller checked that it may act on the thread).
func (rt *Router) freeze(ctx context.Context, user, thread string) error {
	if rt.holder == nil {
		return backend.Unsupported("freeze", "this gateway has no sandbox pool")
	}
	return rt.holder.FreezeThread(ctx, user, thread)
}
