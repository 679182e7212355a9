package router

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Capability URLs: ANY /c/{capability}/v1/{path...} reaches the one sandbox
// incarnation the capability was minted for, with no other credential (an
// unchanged AIO client gets base_url=sandbox_url and sends nothing else). It
// never provisions; an unknown, revoked, truncated or malformed capability
// is the same JSON 404. The capability is cut out of the request before any
// middleware runs, so no log line, span attribute or error message can
// carry it: they all see capabilityPrefix instead.

const (
	capabilityRoot = "/c/"
	// capabilityPrefix replaces "/c/{the capability}" in the request path.
	capabilityPrefix = "/c/{capability}"
	// capabilityRoutePath names capability requests in traces and logs.
	capabilityRoutePath = capabilityPrefix + "/v1/*"
)

var capabilityParam = []string{"capability"}

// splitCapability cuts a /c/... path into the capability and what follows it.
func splitCapability(path string) (capability, rest string) {
	s := path[len(capabilityRoot):]
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// serveCapability runs a /c/... request through the API's middleware
// (tracing, panic recovery, origin check) outside echo's router, on a copy of
// the request whose path no longer holds the capability.
func (rt *Router) serveCapability(w http.ResponseWriter, r *http.Request) {
	capability, rest := splitCapability(r.URL.Path)
	redacted := new(http.Request)
	*redacted = *r
	u := *r.URL
	u.Path = capabilityPrefix + rest
	u.RawPath = ""
	if strings.HasPrefix(r.URL.RawPath, capabilityRoot) {
		if _, raw := splitCapability(r.URL.RawPath); raw != "" {
			u.RawPath = capabilityPrefix + raw
		}
	}
	redacted.URL = &u
	redacted.RequestURI = u.Path // informational on a server request; nothing may keep the original

	rt.serveLink(w, redacted, rt.capabilityChain, capabilityRoutePath, capabilityParam, capability)
}

// serveLink runs chain, the middleware and data plane of a credential-less
// URL (a capability, a preview link), for redacted, the request with the
// secret cut out of its URL: the secret reaches the handler only as the
// route's one parameter, so no log or span records it.
func (rt *Router) serveLink(w http.ResponseWriter, redacted *http.Request, chain echo.HandlerFunc, route string, param []string, secret string) {
	c := rt.echo.AcquireContext()
	defer rt.echo.ReleaseContext(c)
	c.Reset(redacted, w)
	c.SetPath(route)
	c.SetParamNames(param...)
	c.SetParamValues(secret)
	if err := chain(c); err != nil {
		rt.echo.HTTPErrorHandler(err, c)
	}
}

// capabilityPlane is the data plane of capability requests: no credential is
// asked for (the capability is one).
func (rt *Router) capabilityPlane(c echo.Context) error {
	return rt.linkPlane(c, telemetry.RouteCapability, rt.capabilityProxy, pool.ErrNotFound)
}

// linkPlane serves a credential-less URL's request through proxy: the
// request counts against the sandbox owner's limit, then is accounted like
// any proxied request; pool.ErrNotFound answers as notFound.
func (rt *Router) linkPlane(c echo.Context, kind telemetry.RouteKind, proxy func(echo.Context) (proxied, error), notFound error) error {
	start := time.Now()
	var res proxied
	r := c.Request()
	err := rt.proxy.TooLarge(r)
	if err == nil && hasDotSegment(r.URL.Path) {
		err = errDotSegment // as on every data-plane route: the upstream may be a remote Sandgate
	}
	if err == nil {
		res, err = proxy(c)
	}
	if errors.Is(err, pool.ErrNotFound) {
		err = notFound
	}
	if err != nil && !c.Response().Committed {
		rt.writeError(c.Response(), r, err)
	}
	rt.account(c, kind, res, time.Since(start))
	return nil
}

func (rt *Router) capabilityProxy(c echo.Context) (proxied, error) {
	r := c.Request()
	path, raw := upstreamPath(r.URL.Path, r.URL.RawPath, len(capabilityPrefix))
	capability := c.Param("capability")
	// The form is checked before any look-up: a malformed capability costs nothing.
	if !state.ValidCapability(capability) || !strings.HasPrefix(path, "/v1/") {
		return proxied{}, pool.ErrNotFound
	}
	route, outcome, err := rt.pool.CapabilityRoute(r.Context(), capability)
	if err != nil {
		return proxied{}, err
	}
	user := route.Identity().User
	res := proxied{route: route, outcome: outcome, user: user}
	if err := rt.checkQuota(route, path); err != nil {
		return res, err
	}
	slot, err := rt.limits.beginUser(user)
	if err != nil {
		return res, err
	}
	defer rt.limits.end(slot)
	res.bytesIn = rt.serve(c, route, path, raw, "", capabilityCaller(route, user))
	return res, nil
}

// capabilityCaller is the caller header of a capability's requests: the
// pool's cached entry's (no allocation), else built.
func capabilityCaller(route Sandbox, user string) []string {
	if c, ok := route.(interface{ Caller() []string }); ok {
		return c.Caller()
	}
	return []string{sandboxspec.CallerCapability + ":" + user}
}

// capabilityURL is the sandbox_url handed to clients: {public_url or the
// request's origin}/c/{capability}, capability being the record's (if the
// caller read it) or minted on first hand-out.
func (rt *Router) capabilityURL(ctx context.Context, c echo.Context, sid, capability string) (string, error) {
	if capability == "" {
		var err error
		if capability, err = rt.pool.Capability(ctx, sid); err != nil {
			return "", err
		}
	}
	return rt.baseURL(c) + capabilityRoot + capability, nil
}

// baseURL is how clients reach the gateway.
func (rt *Router) baseURL(c echo.Context) string {
	if rt.public != "" {
		return rt.public
	}
	return c.Scheme() + "://" + c.Request().Host
}
