package router

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/lease"
	"github.com/sandgate/sandgate/internal/router/status"
)

// StatusSource is what the status page reads of the fleet's state
// (lease.Store).
type StatusSource interface {
	Overview(ctx context.Context, now time.Time) (lease.Overview, error)
	Replicas(ctx context.Context) ([]lease.Replica, error)
}

// Status configures the status page at /; a nil Source turns it off.
type Status struct {
	Source StatusSource
	// MaxSandboxes, HardCap and MaxSandboxesPerUser are the pool's
	// effective quotas, shown against the counts.
	MaxSandboxes        int
	HardCap             bool
	MaxSandboxesPerUser int
	// Heartbeat is the replicas' heartbeat interval: a replica not seen
	// for three is shown as gone.
	Heartbeat time.Duration
}

const (
	// statusCookie carries a browser's credential to the status routes,
	// and only to them: every other route reads the Authorization header.
	statusCookie = "sandgate_status"
	// statusCookieAge bounds a login; a JWT's own expiry still applies.
	statusCookieAge = 8 * time.Hour
	// maxStatusStreams bounds the open event streams of one replica.
	maxStatusStreams = 256
	// statusTimeout bounds the Redis reads of one page.
	statusTimeout = 5 * time.Second
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

var errStatusStreams = errors.New("too many open status event streams; retry later")

// statusPage serves the status routes.
type statusPage struct {
	rt      *Router
	cfg     Status
	bus     *events.Bus // nil: no events
	streams atomic.Int64
}

// routeStatus registers the status page's routes on e.
func (rt *Router) routeStatus(e *echo.Echo, cfg Status, bus *events.Bus) {
	if cfg.Source == nil {
		return
	}
	s := &statusPage{rt: rt, cfg: cfg, bus: bus}
	h := s.headers
	e.GET("/", h(s.page))
	e.GET("/status/sandboxes", h(s.fragment))
	e.GET("/status/events", h(s.stream))
	e.GET("/status/login", h(s.loginForm))
	e.POST("/status/login", h(s.login))
	e.POST("/status/logout", h(s.logout))
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
// (curl) or the login cookie (a browser). Without authentication
// configured every caller is the trusted local principal. Status routes
// are not counted against the per-user request limit: they never reach a
// sandbox.
func (s *statusPage) principal(r *http.Request) (*auth.Principal, error) {
	if s.rt.auth == nil {
		return auth.Local(), nil
	}
	if r.Header.Get("Authorization") == "" {
		if ck, err := r.Cookie(statusCookie); err == nil {
			if cred, err := base64.RawURLEncoding.DecodeString(ck.Value); err == nil {
				r = &http.Request{Header: http.Header{"Authorization": {"Bearer " + string(cred)}}}
			}
		}
	}
	p, err := s.rt.auth.Authenticate(r, false)
	if err != nil {
		return nil, err
	}
	if !p.Has(auth.ScopeThreads) {
		return nil, errScope
	}
	return p, nil
}

// page is GET /: the whole page, or the login form for a browser without
// a credential.
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
// as Server-Sent Events ("lifecycle", JSON data), from now on.
func (s *statusPage) stream(c echo.Context) error {
	p, err := s.principal(c.Request())
	if err != nil {
		return err
	}
	if s.bus == nil {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	if s.streams.Add(1) > maxStatusStreams {
		s.streams.Add(-1)
		return errStatusStreams
	}
	defer s.streams.Add(-1)
	ch, stop := s.bus.Watch(func(e events.Event) bool { return visible(p, e) })
	defer stop()

	w := c.Response()
	openSSE(w)
	if _, err := w.Write([]byte(": live\n\n")); err != nil {
		return nil
	}
	w.Flush()
	// A drain ends the stream; the browser reconnects to a replica that stays.
	s.rt.streams.follow(c.Request().Context(), w, ch, writeLifecycle, func(events.Event) bool { return false })
	return nil
}

// writeLifecycle writes e as the page's "lifecycle" event.
func writeLifecycle(w io.Writer, e events.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return nil // skipped, not fatal to the stream
	}
	_, err = fmt.Fprintf(w, "event: lifecycle\ndata: %s\n\n", data)
	return err
}

// loginForm is GET /status/login.
func (s *statusPage) loginForm(c echo.Context) error {
	if s.rt.auth == nil {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return s.render(c, http.StatusOK, "login", "")
}

// login is POST /status/login: a valid credential with the threads scope
// becomes an HttpOnly, SameSite=Strict cookie the status routes (and no
// other route) accept.
func (s *statusPage) login(c echo.Context) error {
	if s.rt.auth == nil {
		return c.Redirect(http.StatusSeeOther, "/")
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
	http.SetCookie(c.Response(), s.cookie(r, base64.RawURLEncoding.EncodeToString([]byte(cred)), int(statusCookieAge/time.Second)))
	return c.Redirect(http.StatusSeeOther, "/")
}

// logout is POST /status/logout: the cookie is dropped.
func (s *statusPage) logout(c echo.Context) error {
	http.SetCookie(c.Response(), s.cookie(c.Request(), "", -1)) // MaxAge < 0: delete now
	return c.Redirect(http.StatusSeeOther, "/status/login")
}

func (s *statusPage) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: statusCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.HasPrefix(s.rt.public, "https://"),
	}
}

// visible reports whether p may see e: an admin every event, anyone else
// those of its own sandboxes.
func visible(p *auth.Principal, e events.Event) bool {
	if p.Has(auth.ScopeAdmin) {
		return true
	}
	return e.User == p.User && (e.Thread == "" || p.MayOpen(e.Thread))
}
