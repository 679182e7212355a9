package router

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// The operator API under /admin/v1 (admin scope), which `gateway sandboxes`,
// `threads rm` and `prune` call. Handlers stay thin: the pool and the
// backend's optional capabilities do the work.

var (
	adminOnly = rule{scope: auth.ScopeAdmin}
)

// statsTimeout bounds one sandbox's stats sample.
const statsTimeout = 5 * time.Second

func (rt *Router) registerAdmin(e *echo.Echo) {
	g := e.Group("/admin/v1")
	g.GET("/sandboxes", rt.need(adminOnly, rt.adminList))
	g.GET("/sandboxes/:id", rt.need(adminOnly, rt.adminInspect))
	g.DELETE("/sandboxes/:id", rt.need(adminOnly, rt.adminDestroy))
	g.GET("/sandboxes/:id/logs", rt.need(adminOnly, rt.adminLogs))
	g.GET("/stats", rt.need(adminOnly, rt.adminStats))
	g.DELETE("/users/:user/threads/:thread", rt.need(adminOnly, rt.adminThreadRemove))
	g.GET("/prune", rt.need(adminOnly, rt.adminPrune))
	g.POST("/prune", rt.need(adminOnly, rt.adminPrune))
	g.POST("/preview-keys", rt.need(adminOnly, rt.adminRotatePreviewKey))
}

func viewOf(rec state.Record) api.SandboxRecord {
	return api.SandboxRecord{SandboxID: rec.SandboxID, User: rec.User, Thread: rec.Thread, Backend: rec.Backend, Template: rec.Template,
		State: string(rec.Shown()), CreatedAt: rec.CreatedAt.UTC()}
}

// filtered lists the records matching the user, thread, state and backend
// query parameters (each optional, exact).
func (rt *Router) filtered(c echo.Context) ([]state.Record, error) {
	user, thread, st, be := c.QueryParam("user"), c.QueryParam("thread"), c.QueryParam("state"), c.QueryParam("backend")
	if user != "" && identity.ValidUser(user) != nil {
		return nil, identity.ErrBadUser
	}
	if thread != "" && identity.ValidThread(thread) != nil {
		return nil, identity.ErrBadThread
	}
	if st != "" && st != string(state.StateActive) && st != string(state.StateWarm) && st != string(state.StateFrozen) {
		return nil, errBadFilter
	}
	recs, err := rt.pool.Records(c.Request().Context())
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if (user == "" || r.User == user) && (thread == "" || r.Thread == thread) &&
			(st == "" || string(r.Shown()) == st) && (be == "" || r.Backend == be) {
			out = append(out, r)
		}
	}
	return out, nil
}

// adminList is GET /admin/v1/sandboxes.
func (rt *Router) adminList(c echo.Context, _ *auth.Principal) error {
	recs, err := rt.filtered(c)
	if err != nil {
		return err
	}
	out := make([]api.AdminSandbox, 0, len(recs))
	for _, r := range recs {
		out = append(out, api.AdminSandbox{SandboxRecord: viewOf(r)})
	}
	return c.JSON(http.StatusOK, api.AdminSandboxList{Count: len(out), Fleet: rt.fleet(), Sandboxes: out})
}

func (rt *Router) fleet() string {
	if rt.admin == nil {
		return ""
	}
	return rt.admin.Fleet()
}

// sandboxParam is the {id} of an admin route with its record.
func (rt *Router) sandboxParam(c echo.Context) (state.Record, error) {
	sid := c.Param("id")
	if !identity.ValidSandboxID(sid) {
		return state.Record{}, errBadSandboxID
	}
	rec, ok, err := rt.pool.Record(c.Request().Context(), sid)
	if err != nil {
		return state.Record{}, err
	}
	if !ok || rec.State == state.StateDestroying {
		return state.Record{}, pool.ErrNotFound
	}
	return rec, nil
}

// adminInspect is GET /admin/v1/sandboxes/{id}.
func (rt *Router) adminInspect(c echo.Context, _ *auth.Principal) error {
	rec, err := rt.sandboxParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	alive, err := rt.pool.Alive(ctx, rec)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.AdminSandbox{SandboxRecord: viewOf(rec), Alive: &alive, Data: rt.threadData(ctx, rec.User, rec.Thread)})
}

// adminDestroy is DELETE /admin/v1/sandboxes/{id}: the thread's data stays.
func (rt *Router) adminDestroy(c echo.Context, p *auth.Principal) error {
	rec, err := rt.sandboxParam(c)
	if err != nil {
		return err
	}
	if err := rt.destroyRecord(c.Request().Context(), p, rec); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.AdminDestroyed{Destroyed: true, SandboxID: rec.SandboxID})
}

// destroyRecord destroys rec's sandbox for p (this route and the status
// page's action; the thread's data stays): an admin's destroy is the
// operator's (ReasonAdmin), a user's of its own sandbox the client's.
func (rt *Router) destroyRecord(ctx context.Context, p *auth.Principal, rec state.Record) error {
	reason := pool.ReasonClient
	if p.Has(auth.ScopeAdmin) {
		reason = pool.ReasonAdmin
	}
	if err := rt.pool.Destroy(ctx, rec.SandboxID, reason); err != nil {
		return err
	}
	rt.log.InfoContext(ctx, "sandbox destroyed", "sandbox_id", rec.SandboxID, "thread", rec.Thread, "user", rec.User,
		"by", p.User, "reason", reason)
	return nil
}

// adminStats is GET /admin/v1/stats (the filters of the list): one sample
// of every matching sandbox's resource use; supported false when the
// backend cannot tell.
func (rt *Router) adminStats(c echo.Context, _ *auth.Principal) error {
	recs, err := rt.filtered(c)
	if err != nil {
		return err
	}
	supported := rt.admin != nil && rt.admin.CanStat()
	rows := make([]api.StatsRow, 0, len(recs))
	for _, r := range recs {
		row := api.StatsRow{SandboxRecord: viewOf(r)}
		if supported {
			ctx, cancel := context.WithTimeout(c.Request().Context(), statsTimeout)
			st, err := rt.admin.Stats(ctx, r.SandboxID)
			cancel()
			if err != nil {
				rt.log.DebugContext(ctx, "sandbox stats", "sandbox_id", r.SandboxID, "err", err)
				row.Error = statusOf(err).message
				if statusOf(err).code == "internal" {
					row.Error = "no figures (see the gateway log)"
				}
			} else {
				row.Stats = &api.Stats{CPUSeconds: st.CPUSeconds, MemoryBytes: st.MemoryBytes, PIDs: st.PIDs, At: st.At}
				if rt.sampler != nil { // disk and egress: this replica's sampler's, if it samples the sandbox
					if l, ok := rt.sampler.Latest(r.SandboxID); ok {
						row.DiskEgress = l.DiskEgress
					}
				}
			}
		}
		rows = append(rows, row)
	}
	return c.JSON(http.StatusOK, api.StatsList{Count: len(rows), Sandboxes: rows, Supported: supported})
}

// adminThreadRemove is DELETE /admin/v1/users/{user}/threads/{thread}:
// destroy the thread's sandbox, then delete its data on the gateway host.
func (rt *Router) adminThreadRemove(c echo.Context, p *auth.Principal) error {
	user, thread := c.Param("user"), c.Param("thread")
	if err := identity.ValidUser(user); err != nil {
		return err
	}
	if err := identity.ValidThread(thread); err != nil {
		return err
	}
	ctx := c.Request().Context()
	destroyed := true
	if err := rt.pool.DestroyThread(ctx, user, thread, pool.ReasonAdmin); errors.Is(err, pool.ErrNotFound) {
		destroyed = false
	} else if err != nil {
		return err
	}
	out := api.ThreadRemoved{User: user, Thread: thread, SandboxDestroyed: destroyed, Data: "elsewhere"}
	if rt.meter != nil {
		removed, err := rt.meter.Remove(ctx, user, thread)
		if err != nil {
			return errors.Join(pool.ErrStorage, err)
		}
		out.Data = removedOrNone(removed)
	}
	if rt.checkpoints != nil {
		removed, err := rt.checkpoints.RemoveThread(ctx, user, thread)
		if err != nil {
			return errors.Join(pool.ErrStorage, err)
		}
		out.Checkpoints = removedOrNone(removed)
	}
	rt.log.InfoContext(ctx, "thread removed by an admin", "user", user, "thread", thread, "admin", p.User,
		"sandbox_destroyed", destroyed, "data", out.Data)
	return c.JSON(http.StatusOK, out)
}

// adminPrune is GET (what would go) and POST (remove it) /admin/v1/prune.
func (rt *Router) adminPrune(c echo.Context, p *auth.Principal) error {
	if rt.admin == nil {
		return backend.ErrNotSupported
	}
	dryRun := c.Request().Method == http.MethodGet
	rep, err := rt.admin.Prune(c.Request().Context(), dryRun)
	if err != nil {
		return err
	}
	if !dryRun {
		rt.log.InfoContext(c.Request().Context(), "prune by an admin", "admin", p.User, "fleet", rep.Fleet, "items", len(rep.Items))
	}
	return c.JSON(http.StatusOK, rep)
}

func removedOrNone(removed bool) string {
	if removed {
		return "removed"
	}
	return "none"
}
