package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// DeerFlow's provisioner API, field for field, so its RemoteSandboxBackend
// works unchanged with provisioner_url pointed at the gateway. The
// sandbox_url handed out is the sandbox's capability URL on the gateway
// ({public_url}/c/{capability}): DeerFlow's AioSandbox calls it with no
// credential, and clients never learn where a sandbox really runs.

// mountContractVersion 2: user data is mounted per user and thread
// ({data_dir}/users/{user}/threads/{thread}/user-data), which is what
// DeerFlow requires before it creates sandboxes for authenticated users.
const mountContractVersion = 2

// Pod phases DeerFlow reads.
const (
	phaseRunning = "Running"
	phaseFailed  = "Failed"
)

func (rt *Router) provisionerHealth(c echo.Context) error {
	return c.JSON(http.StatusOK, api.Health{Status: "ok"})
}

// provisionerCapabilities answers DeerFlow's probe: its lark_cli keys say
// whether this provisioner supplies the lark-cli init and broker images
// (Sandgate does not, so DeerFlow mounts the runtime itself).
func (rt *Router) provisionerCapabilities(c echo.Context, _ *auth.Principal) error {
	return c.JSON(http.StatusOK, api.ProvisionerCapabilities{MountContractVersion: mountContractVersion})
}

// maxProvisionerBody bounds a create request's JSON (it is decoded whole).
const maxProvisionerBody = 64 << 10

// provisionerCreate is POST /api/sandboxes: idempotent; the sandbox is
// usable when it answers (status Running). user_id other than the caller's
// own needs the admin scope (DeerFlow creates for all of its users).
func (rt *Router) provisionerCreate(c echo.Context, p *auth.Principal) error {
	var req api.ProvisionerCreate
	r := c.Request()
	r.Body = http.MaxBytesReader(c.Response(), r.Body, maxProvisionerBody)
	if err := c.Bind(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return tooLarge
		}
		return echo.NewHTTPError(http.StatusBadRequest)
	}
	if identity.ValidThread(req.SandboxID) != nil {
		return errBadProvisionerID
	}
	thread := req.ThreadID
	if thread == "" {
		thread = req.SandboxID // DeerFlow: effective thread id = thread_id or sandbox_id
	}
	if err := identity.ValidThread(thread); err != nil {
		return err
	}
	user := req.UserID
	if user == "" {
		user = p.User
	}
	if err := identity.ValidUser(user); err != nil {
		return err
	}
	if user != p.User && !p.Has(auth.ScopeAdmin) {
		return errOtherUser
	}
	if err := open(p, thread); err != nil {
		return err
	}
	if req.RequiredVersion != nil && *req.RequiredVersion != mountContractVersion {
		return c.JSON(http.StatusConflict, api.ProvisionerDetail{
			Error: api.ErrorDetail{Code: "conflict", Message: fmt.Sprintf("required_mount_contract_version %d is not this gateway's (%d)",
				*req.RequiredVersion, mountContractVersion)},
			Detail: api.MountContractChanged{Actual: mountContractVersion, Code: "mount_contract_changed", Expected: *req.RequiredVersion},
		})
	}
	ctx := r.Context()
	sid := identity.SandboxID(user, thread)
	if req.SandboxID != sid && identity.ValidSandboxID(req.SandboxID) {
		return errReservedID
	}
	if err := rt.setEgress(ctx, p, sid, req.Egress); err != nil {
		return err
	}
	if name := rt.provisionerTemplate(req); name != "" {
		o, err := rt.pool.Options(ctx, sid)
		if err != nil {
			return err
		}
		o.Template = name
		if err := rt.pool.SetOptions(ctx, user, thread, o); err != nil {
			return err
		}
	}
	route, _, err := rt.acquire(ctx, p, user, thread)
	if err != nil {
		return err
	}
	created := route.Identity().SandboxID
	// Always recorded, even when the client id is the sandbox id: the
	// alias table is what marks a sandbox as the provisioner API's.
	if err := rt.aliases.SetAlias(ctx, p.User, req.SandboxID, created); err != nil {
		return errors.Join(pool.ErrState, err)
	}
	capURL, err := rt.capabilityURL(ctx, c, created, "")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.ProvisionerSandbox{
		SandboxID: req.SandboxID, SandboxURL: capURL, Status: phaseRunning,
		UserID: user, ThreadID: thread, MountContractVersion: mountContractVersion,
		ExtraMounts: rt.resolveExtraMounts(ctx, created, req.ExtraMounts),
	})
}

// setEgress applies an admin's egress override: stored first, so the
// create below (or any later one) uses it; a running sandbox made under
// another policy is destroyed to be created again with this one (its
// files stay; its processes do not).
func (rt *Router) setEgress(ctx context.Context, p *auth.Principal, sid string, req *api.Egress) error {
	if req == nil {
		return nil
	}
	e := backend.Egress{Mode: backend.EgressMode(req.Mode), Allow: req.Allow}
	if !p.Has(auth.ScopeAdmin) {
		return errEgressAdmin
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errBadEgress, err)
	}
	changed, err := rt.aliases.SetEgress(ctx, sid, e)
	if err != nil {
		return errors.Join(pool.ErrState, err)
	}
	if !changed {
		return nil
	}
	rt.log.InfoContext(ctx, "sandbox egress policy set by an admin", "sandbox_id", sid, "admin", p.User,
		"mode", e.EffectiveMode(), "allow", e.Allow)
	if err := rt.pool.Destroy(ctx, sid, pool.ReasonProvisioner); err != nil && !errors.Is(err, pool.ErrNotFound) {
		return err
	}
	return nil
}

// provisionerGet is GET /api/sandboxes/{id}: 404 unknown (or another
// user's, to a non-admin); Running only when the sandbox is alive.
func (rt *Router) provisionerGet(c echo.Context, p *auth.Principal) error {
	id := c.Param("id")
	ctx := c.Request().Context()
	rec, ok, err := rt.owned(ctx, p, id)
	if err != nil {
		return err
	}
	if !ok {
		return notFound(c, id)
	}
	alive, err := rt.pool.Alive(ctx, rec)
	if err != nil {
		return err
	}
	status := phaseFailed
	if alive {
		status = phaseRunning
	}
	view, err := rt.provisionerView(ctx, c, id, rec, status)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// provisionerDelete is DELETE /api/sandboxes/{id}: destroy now; unknown ids
// succeed too (DeerFlow treats delete as best effort), and so, to a
// non-admin, does another user's, which is left alone: the answer never
// tells whether someone else's sandbox exists.
func (rt *Router) provisionerDelete(c echo.Context, p *auth.Principal) error {
	id := c.Param("id")
	ctx := c.Request().Context()
	rec, ok, err := rt.owned(ctx, p, id)
	if err != nil {
		return err
	}
	if ok {
		if err := rt.pool.Destroy(ctx, rec.SandboxID, pool.ReasonProvisioner); err != nil && !errors.Is(err, pool.ErrNotFound) {
			return err
		}
	}
	if err := rt.aliases.DeleteAlias(ctx, p.User, id); err != nil {
		return errors.Join(pool.ErrState, err)
	}
	return c.JSON(http.StatusOK, api.ProvisionerDeleted{OK: true, SandboxID: id})
}

func notFound(c echo.Context, id string) error {
	msg := "Sandbox '" + id + "' not found"
	return c.JSON(http.StatusNotFound, api.ProvisionerDetail{Error: api.ErrorDetail{Code: "not_found", Message: msg}, Detail: msg})
}

// provisionerList is GET /api/sandboxes: the caller's sandboxes made
// through this API (an admin's: every user's); sandboxes made through
// /threads are not listed, as DeerFlow destroys listed sandboxes it does
// not know at shutdown.
func (rt *Router) provisionerList(c echo.Context, p *auth.Principal) error {
	ctx := c.Request().Context()
	recs, err := rt.pool.Records(ctx)
	if err != nil {
		return err
	}
	aliasesOf := p.User
	if p.Has(auth.ScopeAdmin) {
		aliasesOf = "" // every user's: an admin lists every sandbox the API made
	}
	aliases, err := rt.aliases.AliasesBySandbox(ctx, aliasesOf)
	if err != nil {
		return errors.Join(pool.ErrState, err)
	}
	out := make([]api.ProvisionerSandbox, 0, len(recs))
	for _, rec := range recs {
		id, viaAPI := aliases[rec.SandboxID]
		if !viaAPI || !p.Owns(rec.User, rec.Thread) {
			continue
		}
		view, err := rt.provisionerView(ctx, c, id, rec, phaseRunning)
		if errors.Is(err, pool.ErrNotFound) {
			continue // destroyed since it was listed
		}
		if err != nil {
			return err
		}
		out = append(out, view)
	}
	return c.JSON(http.StatusOK, api.ProvisionerList{Count: len(out), Sandboxes: out})
}

// owned is lookup limited to what p owns.
func (rt *Router) owned(ctx context.Context, p *auth.Principal, id string) (state.Record, bool, error) {
	rec, ok, err := rt.lookup(ctx, p, id)
	if err != nil || !ok || !p.Owns(rec.User, rec.Thread) {
		return state.Record{SandboxID: rec.SandboxID}, false, err
	}
	return rec, true, nil
}

// lookup resolves a client id (one of p's aliases, or a sandbox id) to its
// record.
func (rt *Router) lookup(ctx context.Context, p *auth.Principal, id string) (state.Record, bool, error) {
	if identity.ValidThread(id) != nil {
		return state.Record{}, false, errBadProvisionerID
	}
	sid := id
	if alias, ok, err := rt.aliases.Alias(ctx, p.User, id); err != nil {
		return state.Record{}, false, errors.Join(pool.ErrState, err)
	} else if ok {
		sid = alias
	}
	if !identity.ValidSandboxID(sid) {
		return state.Record{SandboxID: sid}, false, nil
	}
	rec, ok, err := rt.pool.Record(ctx, sid)
	if err != nil || !ok || rec.State == state.StateDestroying {
		return state.Record{SandboxID: sid}, false, err
	}
	return rec, true, nil
}

func (rt *Router) provisionerView(ctx context.Context, c echo.Context, id string, rec state.Record, status string) (api.ProvisionerSandbox, error) {
	capURL, err := rt.capabilityURL(ctx, c, rec.SandboxID, rec.Capability)
	if err != nil {
		return api.ProvisionerSandbox{}, err
	}
	return api.ProvisionerSandbox{
		SandboxID: id, SandboxURL: capURL, Status: status,
		UserID: rec.User, ThreadID: rec.Thread, MountContractVersion: mountContractVersion,
	}, nil
}
