package router

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// The status page's actions: destroy, freeze, thaw and checkpoint one
// sandbox, an admin any, a user its own. GET /status/sandboxes/{id}/{action}
// is the confirmation (a form; the script shows it inline instead), POST
// does it through the same calls as the API's handlers, then redirects to
// the sandbox's page (or answers JSON to the script).
//
// CSRF: the session cookie is SameSite=Strict; every POST must carry the
// form token derived from the session's secret id (an attacker without the
// cookie cannot compute it, and it is not stored anywhere) and an Origin
// header of the gateway's own origin. A request authenticated by its
// Authorization header carries no ambient credential and needs neither.

// statusActionTimeout bounds one action: a freeze waits for the replicas'
// cached routes to run out, a checkpoint copies a workspace.
const statusActionTimeout = 2 * time.Minute

// statusAction is one action of the page.
type statusAction struct {
	// Verb is the button's word; Done what the page says after it.
	Verb, Done string
	// Warning is the confirmation's explanation.
	Warning string
	run     func(ctx context.Context, rt *Router, p *auth.Principal, rec state.Record, label string) error
}

var statusActions = map[string]statusAction{
	"destroy": {Verb: "Destroy", Done: "destroyed",
		Warning: "Its processes end now; the thread's files stay, and its next request creates a new sandbox.",
		run: func(ctx context.Context, rt *Router, p *auth.Principal, rec state.Record, _ string) error {
			return rt.destroyRecord(ctx, p, rec)
		}},
	"freeze": {Verb: "Freeze", Done: "frozen",
		Warning: "Its processes stop (memory kept, no CPU) until its next request or a thaw. Refused while it runs a command.",
		run: func(ctx context.Context, rt *Router, _ *auth.Principal, rec state.Record, _ string) error {
			return rt.freeze(ctx, rec.User, rec.Thread)
		}},
	"thaw": {Verb: "Thaw", Done: "thawed",
		Warning: "Its processes run again, as its next request would make them.",
		run: func(ctx context.Context, rt *Router, p *auth.Principal, rec state.Record, _ string) error {
			if rec.Frozen.IsZero() {
				return nil // thawed already
			}
			_, _, err := rt.acquire(ctx, p, rec.User, rec.Thread) // an acquire thaws under the lock
			return err
		}},
	"checkpoint": {Verb: "Checkpoint", Done: "checkpointed",
		Warning: "Its workspace is copied, its processes paused meanwhile; restore with `gateway checkpoint restore`.",
		run: func(ctx context.Context, rt *Router, _ *auth.Principal, rec state.Record, label string) error {
			if err := rt.checkpointsHere(); err != nil {
				return err
			}
			_, err := rt.checkpoint(ctx, rec.User, rec.Thread, label)
			return err
		}},
}

// actionsFor lists the actions the page offers on a sandbox shown in st
// ("creating": none; freeze and checkpoint only where this gateway can).
func (s *statusPage) actionsFor(st string) []string {
	var out []string
	switch st {
	case string(state.StateActive):
		if s.rt.holder != nil {
			out = append(out, "freeze")
		}
	case string(state.StateFrozen):
		out = append(out, "thaw")
	case string(state.StateWarm):
	default:
		return nil
	}
	if s.rt.checkpointsHere() == nil {
		out = append(out, "checkpoint")
	}
	return append(out, "destroy")
}

// formToken is the CSRF token of the session (or page id) id.
func formToken(id sessionID) string {
	sum := id.derive("form")
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// formID is the id the page's form token derives from: the login
// session's, or without authentication a random page id in the same
// cookie, set here when missing (no Redis record: it only ties forms to
// this browser). ok is false for a request authenticated by its header.
func (s *statusPage) formID(c echo.Context) (id sessionID, ok bool) {
	r := c.Request()
	if ck, err := r.Cookie(statusCookie); err == nil {
		if id, ok = parseSessionID(ck.Value); ok {
			return id, true
		}
	}
	if s.rt.auth != nil {
		return id, false // principal checked the session; none means the header
	}
	id, err := newSessionID()
	if err != nil {
		return id, false
	}
	http.SetCookie(c.Response(), s.cookie(r, id.String(), int(statusCookieAge/time.Second)))
	return id, true
}

// checkForm is the CSRF check of a status POST (see the top of the file).
func (s *statusPage) checkForm(c echo.Context) error {
	r := c.Request()
	if s.rt.auth != nil && r.Header.Get("Authorization") != "" {
		return nil
	}
	origin, err := url.Parse(r.Header.Get("Origin"))
	if err != nil || origin.Host == "" || origin.Host != r.Host {
		return errStatusForm
	}
	ck, err := r.Cookie(statusCookie)
	if err != nil {
		return errStatusForm
	}
	id, ok := parseSessionID(ck.Value)
	if !ok || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(formToken(id))) != 1 {
		return errStatusForm
	}
	return nil
}

// target is the sandbox {id} of a status route, if p may manage it; a
// sandbox p may not see is not found, as one that does not exist.
func (s *statusPage) target(ctx context.Context, c echo.Context, p *auth.Principal) (state.Record, error) {
	sid := c.Param("id")
	if !identity.ValidSandboxID(sid) {
		return state.Record{}, errBadSandboxID
	}
	rec, ok, err := s.rt.pool.Record(ctx, sid)
	if err != nil {
		return state.Record{}, err
	}
	if !ok || (rec.State != state.StateActive && rec.State != state.StateWarm) || !mayManage(p, rec.User, rec.Thread) {
		return state.Record{}, pool.ErrNotFound
	}
	return rec, nil
}

// confirmView is what the confirmation renders.
type confirmView struct {
	Sandbox sandboxRow
	Action  string
	Form    statusAction
	Token   string
	Error   string
}

// confirm is GET /status/sandboxes/{id}/{action}: the form that does it.
func (s *statusPage) confirm(c echo.Context) error {
	p, err := s.principal(c.Request())
	if err != nil {
		return err
	}
	a, ok := statusActions[c.Param("action")]
	if !ok {
		return errStatusAction
	}
	rec, err := s.target(c.Request().Context(), c, p)
	if err != nil {
		return err
	}
	v := confirmView{Sandbox: rowOf(rec, time.Now()), Action: c.Param("action"), Form: a}
	if id, ok := s.formID(c); ok {
		v.Token = formToken(id)
	}
	return s.render(c, http.StatusOK, "confirm", v)
}

// act is POST /status/sandboxes/{id}/{action}.
func (s *statusPage) act(c echo.Context) error {
	r := c.Request()
	r.Body = http.MaxBytesReader(c.Response(), r.Body, 16<<10)
	p, err := s.principal(r)
	if err != nil {
		return err
	}
	if err := s.checkForm(c); err != nil {
		return err
	}
	name := c.Param("action")
	a, ok := statusActions[name]
	if !ok {
		return errStatusAction
	}
	ctx, cancel := context.WithTimeout(r.Context(), statusActionTimeout)
	defer cancel()
	rec, err := s.target(ctx, c, p)
	if err == nil {
		err = a.run(ctx, s.rt, p, rec, strings.TrimSpace(r.PostFormValue("label")))
	}
	if err == nil {
		s.rt.log.InfoContext(ctx, "status page action", "action", name, "sandbox_id", rec.SandboxID,
			"thread", rec.Thread, "user", rec.User, "by", p.User)
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") { // the script
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]string{"action": name, "sandbox_id": rec.SandboxID, "done": a.Done})
	}
	if err != nil {
		if errors.Is(err, pool.ErrNotFound) || rec.SandboxID == "" {
			return err
		}
		e := statusOf(err)
		v := confirmView{Sandbox: rowOf(rec, time.Now()), Action: name, Form: a, Error: e.message}
		if id, ok := s.formID(c); ok {
			v.Token = formToken(id)
		}
		return s.render(c, e.status, "confirm", v)
	}
	if name == "destroy" {
		return c.Redirect(http.StatusSeeOther, statusPath+"?done="+a.Done)
	}
	return c.Redirect(http.StatusSeeOther, statusPath+"/sandboxes/"+rec.SandboxID+"?done="+a.Done)
}
