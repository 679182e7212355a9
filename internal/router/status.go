package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/router/status"
)

// statusHeaders are set on every status response: no inline script, no
// framing, nothing cached, no referrer to another site.
var statusHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":        "DENY",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "same-origin", // no-referrer would make a form POST's Origin "null"
	"Cache-Control":          "no-store",
}

// routeStatus registers the status page's routes on e.
func (rt *Router) routeStatus(e *echo.Echo, cfg Status, bus *events.Bus) {
	if cfg.Source == nil {
		return
	}
	s := &statusPage{rt: rt, cfg: cfg, bus: bus, streams: newStreamCap(MaxStreamsPerKind, cfg.Streams, errStatusStreams)}
	h := s.headers
	e.GET("/", h(s.root))
	e.GET(statusPath, h(s.page))
	e.GET("/status/sandboxes", h(s.fragment))
	e.GET("/status/sandboxes/:id", h(s.detail))
	e.GET("/status/sandboxes/:id/:action", h(s.confirm))
	e.POST("/status/sandboxes/:id/:action", h(s.act))
	e.GET("/status/events", h(s.stream))
	e.GET("/status/login", h(s.loginForm))
	e.POST("/status/login", h(s.login))
	e.POST("/status/logout", h(s.logout))
	e.DELETE("/status/sessions", h(s.revoke))
	e.DELETE("/status/sessions/:user", h(s.revoke))
	e.GET("/status/static/*", h(echo.WrapHandler(http.StripPrefix("/status/static/", http.FileServerFS(status.Static)))))
}

func (s *statusPage) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		for k, v := range statusHeaders {
			h.Set(k, v)
		}
		return next(c)
	}
}

// principal authenticates a status request: the Authorization header
// (curl) or the session cookie (a browser). Without authentication
// configured every caller is the trusted local principal. Status routes
// are not counted against the per-user request limit: they never reach a
// sandbox.
func (s *statusPage) principal(r *http.Request) (*auth.Principal, error) {
	if s.rt.auth == nil {
		return auth.Local(), nil
	}
	var p *auth.Principal
	var err error
	if r.Header.Get("Authorization") == "" {
		p, _, _, err = s.session(r)
		if p == nil && err == nil {
			err = auth.ErrUnauthenticated
		}
	} else {
		p, err = s.rt.auth.Authenticate(r, false)
	}
	if err != nil {
		return nil, err
	}
	if !p.Has(auth.ScopeThreads) {
		return nil, errScope
	}
	return p, nil
}

// root is GET /: the page for a client that sends its credential (curl);
// a browser goes to /status, where its session cookie is sent.
func (s *statusPage) root(c echo.Context) error {
	if s.rt.auth != nil && c.Request().Header.Get("Authorization") == "" {
		return c.Redirect(http.StatusSeeOther, statusPath)
	}
	return s.page(c)
}

// page is GET /status: the whole page, or the login form for a browser
// without a valid session.
func (s *statusPage) page(c echo.Context) error {
	p, err := s.principal(c.Request())
	if errors.Is(err, auth.ErrUnauthenticated) {
		return c.Redirect(http.StatusSeeOther, "/status/login")
	}
	if err != nil {
		return err
	}
	v, err := s.view(c.Request().Context(), p, true)
	if err != nil {
		return err
	}
	if id, ok := s.formID(c); ok {
		v.Token = formToken(id)
	}
	v.Done = doneOf(c.QueryParam("done"))
	return s.render(c, http.StatusOK, "page", v)
}

// fragment is GET /status/sandboxes: the tables the script re-fetches.
func (s *statusPage) fragment(c echo.Context) error {
	p, err := s.principal(c.Request())
	if err != nil {
		return err
	}
	v, err := s.view(c.Request().Context(), p, false)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, "live", v)
}

func (s *statusPage) render(c echo.Context, code int, name string, data any) error {
	var buf bytes.Buffer
	if err := status.Templates.ExecuteTemplate(&buf, name, data); err != nil {
		return err
	}
	return c.HTMLBlob(code, buf.Bytes())
}

// stream is GET /status/events: the lifecycle events the caller may see,
// as Server-Sent Events ("lifecycle", JSON data, the stream id as id):
// from now on, or after where the client stopped (Last-Event-ID when the
// page's EventSource reconnects, or ?since= an id or an RFC 3339 time),
// whichever replica it reconnects to.
func (s *statusPage) stream(c echo.Context) error {
	p, err := s.principal(c.Request())
	if err != nil {
		return err
	}
	if s.bus == nil {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	from, resume, err := resumeFrom(c.Request())
	if err != nil {
		return err
	}
	release, err := s.streams.acquire(p)
	if err != nil {
		return err
	}
	defer release()
	ctx := c.Request().Context()
	if !resume {
		if from, err = s.bus.Now(ctx); err != nil {
			return nil // the client left first
		}
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := s.bus.Follow(fctx, from, func(e events.Event) bool { return visible(p, e) })

	w := c.Response()
	openSSE(w)
	if _, err := w.Write([]byte(": live\n\n")); err != nil {
		return nil
	}
	w.Flush()
	// A drain ends the stream; the browser reconnects to a replica that stays.
	s.rt.streams.follow(ctx, w, ch, writeLifecycle, func(events.Event) bool { return false })
	return nil
}

// writeLifecycle writes e as the page's "lifecycle" event.
func writeLifecycle(w io.Writer, e events.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return nil // skipped, not fatal to the stream
	}
	_, err = fmt.Fprintf(w, "id: %s\nevent: lifecycle\ndata: %s\n\n", e.ID, data)
	return err
}

// loginForm is GET /status/login.
func (s *statusPage) loginForm(c echo.Context) error {
	if s.rt.auth == nil {
		return c.Redirect(http.StatusSeeOther, statusPath)
	}
	return s.render(c, http.StatusOK, "login", "")
}

// login is POST /status/login: a valid credential with the threads scope
// becomes a session whose cookie the status routes (and no other route)
// accept. Cross-site posts are refused before (sameOrigin).
func (s *statusPage) login(c echo.Context) error {
	if s.rt.auth == nil {
		return c.Redirect(http.StatusSeeOther, statusPath)
	}
	r := c.Request()
	r.Body = http.MaxBytesReader(c.Response(), r.Body, 16<<10)
	cred := strings.TrimSpace(r.PostFormValue("token"))
	probe := &http.Request{Header: http.Header{"Authorization": {"Bearer " + cred}}}
	p, err := s.rt.auth.Authenticate(probe, false)
	switch {
	case cred == "" || err != nil:
		return s.render(c, http.StatusUnauthorized, "login", "That credential is not valid.")
	case !p.Has(auth.ScopeThreads):
		return s.render(c, http.StatusForbidden, "login", "That credential has no threads or admin scope.")
	}
	if err := s.startSession(c, p, cred); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, statusPath)
}

// logout is POST /status/logout: the session is revoked (with
// everywhere=on, every session of its user) and the cookie dropped. The
// cookie is SameSite=Strict and cross-site posts are refused, so another
// site cannot log a user out.
func (s *statusPage) logout(c echo.Context) error {
	r := c.Request()
	if s.rt.auth != nil {
		r.Body = http.MaxBytesReader(c.Response(), r.Body, 1<<10)
		p, id, ok, err := s.session(r)
		if ok && err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
			defer cancel()
			if r.PostFormValue("everywhere") == "on" {
				_, err = s.cfg.Sessions.DropSessions(ctx, p.User)
			} else {
				err = s.cfg.Sessions.DropSession(ctx, id.sum(), p.User)
			}
			if err != nil {
				return stateErr(err) // not logged out: say so rather than drop the cookie only
			}
		}
	}
	http.SetCookie(c.Response(), s.cookie(r, "", -1)) // MaxAge < 0: delete now
	dropLegacyCookie(c.Response())
	return c.Redirect(http.StatusSeeOther, "/status/login")
}

// revoke is DELETE /status/sessions (the caller's own sessions) and
// DELETE /status/sessions/{user} (an admin: anyone's).
func (s *statusPage) revoke(c echo.Context) error {
	p, err := s.principal(c.Request())
	if err != nil {
		return err
	}
	user := p.User
	if u := c.Param("user"); u != "" {
		if err := identity.ValidUser(u); err != nil {
			return err
		}
		if u != p.User && !p.Has(auth.ScopeAdmin) {
			return errOtherUser
		}
		user = u
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), statusTimeout)
	defer cancel()
	n, err := s.cfg.Sessions.DropSessions(ctx, user)
	if err != nil {
		return stateErr(err)
	}
	s.rt.log.Info("status sessions revoked", "user", user, "by", p.User, "count", n)
	return c.JSON(http.StatusOK, api.SessionsRevoked{Revoked: n, User: user})
}
