package router

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/lease"
	"github.com/sandgate/sandgate/internal/pool"
)

// sandboxView is the control plane's JSON for one sandbox.
type sandboxView struct {
	SandboxID string    `json:"sandbox_id"`
	Thread    string    `json:"thread"`
	User      string    `json:"user"`
	Backend   string    `json:"backend"`
	State     string    `json:"state"`
	Outcome   string    `json:"outcome,omitempty"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
}

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
	route, outcome, err := rt.pool.Acquire(c.Request().Context(), p.User, thread)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sandboxView{
		SandboxID: route.SandboxID, Thread: route.Thread, User: route.User, Backend: route.Backend,
		State: string(lease.StateActive), Outcome: string(outcome),
		URL: rt.sandboxURL(c, route.SandboxID), CreatedAt: route.CreatedAt.UTC(),
	})
}

// getThread is GET /threads/{thread}/sandbox: the record, or 404.
func (rt *Router) getThread(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	rec, ok, err := rt.pool.Record(c.Request().Context(), identity.SandboxID(p.User, thread))
	if err != nil {
		return err
	}
	if !ok || rec.State == lease.StateDestroying {
		return pool.ErrNotFound
	}
	return c.JSON(http.StatusOK, rt.view(c, rec))
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
		err = rt.pool.Destroy(ctx, identity.SandboxID(user, thread), pool.ReasonClient)
	default:
		return echo.NewHTTPError(http.StatusBadRequest)
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (rt *Router) view(c echo.Context, rec lease.Record) sandboxView {
	return sandboxView{
		SandboxID: rec.SandboxID, Thread: rec.Thread, User: rec.User, Backend: rec.Backend,
		State: string(rec.State), URL: rt.sandboxURL(c, rec.SandboxID), CreatedAt: rec.CreatedAt.UTC(),
	}
}

// sandboxURL is the gateway's own URL of a sandbox: clients never see the
// sandbox's real address.
func (rt *Router) sandboxURL(c echo.Context, sid string) string {
	base := rt.public
	if base == "" {
		base = c.Scheme() + "://" + c.Request().Host
	}
	return base + "/sandboxes/" + sid
}
