package router

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// threadParam is the validated {thread} of a control-plane route that p may open.
func threadParam(c echo.Context, p *auth.Principal) (string, error) {
	t := c.Param("thread")
	if err := identity.ValidThread(t); err != nil {
		return "", err
	}
	return t, open(p, t)
}

// acquireThread is PUT /threads/{thread}/sandbox: provision now.
func (rt *Router) acquireThread(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	var req *api.CreateSandbox
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	if req != nil {
		if err := rt.applyCreate(c.Request().Context(), p, p.User, thread, *req); err != nil {
			return err
		}
	}
	view, err := rt.acquireView(c, p, thread)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// acquireView provisions (p's user, thread)'s sandbox and describes it.
func (rt *Router) acquireView(c echo.Context, p *auth.Principal, thread string) (api.Sandbox, error) {
	ctx := c.Request().Context()
	route, outcome, err := rt.acquire(ctx, p, p.User, thread)
	if err != nil {
		return api.Sandbox{}, err
	}
	id := route.Identity()
	capURL, err := rt.capabilityURL(ctx, c, id.SandboxID, "")
	if err != nil {
		return api.Sandbox{}, err
	}
	return api.Sandbox{
		SandboxID: id.SandboxID, Thread: id.Thread, User: id.User, Backend: id.Backend, Template: id.Template,
		State: string(state.StateActive), Outcome: string(outcome),
		URL: rt.sandboxURL(c, id.SandboxID), SandboxURL: capURL, CreatedAt: id.CreatedAt.UTC(),
	}, nil
}

// getThread is GET /threads/{thread}/sandbox: the record, or 404.
func (rt *Router) getThread(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	rec, ok, err := rt.pool.Record(ctx, identity.SandboxID(p.User, thread))
	if err != nil {
		return err
	}
	if !ok || rec.State == state.StateDestroying {
		return pool.ErrNotFound
	}
	if rec.User != p.User || rec.Thread != thread {
		return rt.identityConflict(ctx, rec, p.User, thread)
	}
	capURL, err := rt.capabilityURL(ctx, c, rec.SandboxID, rec.Capability)
	if err != nil {
		return err
	}
	opts, err := rt.pool.Options(ctx, rec.SandboxID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.Sandbox{
		SandboxID: rec.SandboxID, Thread: rec.Thread, User: rec.User, Backend: rec.Backend, Template: rec.Template,
		State: string(rec.State), URL: rt.sandboxURL(c, rec.SandboxID), SandboxURL: capURL,
		CreatedAt: rec.CreatedAt.UTC(), Frozen: !rec.Frozen.IsZero(), Data: rt.threadData(ctx, rec.User, rec.Thread),
		Metadata: opts.Metadata,
	})
}

// releaseThread is DELETE /threads/{thread}/sandbox: park it warm, or with
// ?destroy=true destroy it now.
func (rt *Router) releaseThread(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	ctx, user := c.Request().Context(), p.User
	switch c.QueryParam("destroy") {
	case "", "false", "0":
		err = rt.pool.Release(ctx, user, thread)
	case "true", "1":
		err = rt.pool.DestroyThread(ctx, user, thread, pool.ReasonClient)
	default:
		return echo.NewHTTPError(http.StatusBadRequest)
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// identityConflict logs a record at the caller's sandbox id that is not
// theirs and refuses it (409 identity_conflict); it is never served.
func (rt *Router) identityConflict(ctx context.Context, rec state.Record, user, thread string) error {
	rt.log.WarnContext(ctx, "sandbox identity conflict: not served", "sandbox_id", rec.SandboxID,
		"user", user, "thread", thread, "record_user", rec.User, "record_thread", rec.Thread)
	return fmt.Errorf("%w: sandbox %s", pool.ErrIdentityConflict, rec.SandboxID)
}

// sandboxURL is the gateway's own URL of a sandbox by id (it needs the
// caller's credential): clients never see the sandbox's real address.
func (rt *Router) sandboxURL(c echo.Context, sid string) string {
	return rt.baseURL(c) + "/sandboxes/" + sid
}
