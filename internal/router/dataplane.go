package router

import (
	"context"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// proxied is what a data-plane handler reports for the access log and
// metrics; route is nil when the request failed before reaching a sandbox.
type proxied struct {
	route   Sandbox
	outcome pool.Outcome
	bytesIn int64
	user    string // the principal; "" when it was refused
}

// threadProxy serves ANY /threads/{thread}/v1/...: get or provision the
// principal's sandbox for the thread (another user's thread of the same
// name is another sandbox), then stream the request to {sandbox}/v1/....
func (rt *Router) threadProxy(c echo.Context, p *auth.Principal) (proxied, error) {
	thread := c.Param("thread")
	route, outcome, err := rt.threadRoute(c, p, thread)
	if err != nil {
		return proxied{}, err
	}
	r := c.Request()
	path, raw := upstreamPath(r.URL.Path, r.URL.RawPath, len("/threads/")+len(thread))
	if err := rt.checkQuota(route, path); err != nil {
		return proxied{route: route, outcome: outcome}, err
	}
	n := rt.serve(c, route, path, raw, "", p.Caller())
	return proxied{route: route, outcome: outcome, bytesIn: n}, nil
}

// threadPortProxy serves ANY /threads/{thread}/ports/{port}/...: the
// thread's sandbox as threadProxy gets it, the rest of the path sent to
// that port inside it (the sandbox server's bridge, sandboxspec.PortPrefix).
// The port is checked before any I/O; another port is another app, not
// the sandbox API, so no quota applies to its paths.
func (rt *Router) threadPortProxy(c echo.Context, p *auth.Principal) (proxied, error) {
	thread, port := c.Param("thread"), c.Param("port")
	if !sandboxspec.ValidPort(port) {
		return proxied{}, errBadPort
	}
	route, outcome, err := rt.threadRoute(c, p, thread)
	if err != nil {
		return proxied{}, err
	}
	r := c.Request()
	path, raw := upstreamPath(r.URL.Path, r.URL.RawPath, portPrefixLen(thread, port))
	n := rt.serve(c, route, path, raw, port, p.Caller())
	return proxied{route: route, outcome: outcome, bytesIn: n}, nil
}

// threadRoute checks thread and that p may open it, then gets or
// provisions p's sandbox for it.
func (rt *Router) threadRoute(c echo.Context, p *auth.Principal, thread string) (Sandbox, pool.Outcome, error) {
	if err := identity.ValidThread(thread); err != nil {
		return nil, "", err
	}
	if err := open(p, thread); err != nil {
		return nil, "", err
	}
	return rt.acquire(c.Request().Context(), p, p.User, thread)
}

// portPrefixLen is the length of /threads/{thread}/ports/{port}, which
// has no escapes (both are validated).
func portPrefixLen(thread, port string) int {
	return len("/threads/") + len(thread) + len("/ports/") + len(port)
}

// sandboxProxy serves ANY /sandboxes/{id}/v1/...: an existing sandbox by
// id; it never provisions. Someone else's sandbox is as unknown as a
// missing one (404), unless the principal is an admin.
func (rt *Router) sandboxProxy(c echo.Context, p *auth.Principal) (proxied, error) {
	sid := c.Param("id")
	if !identity.ValidSandboxID(sid) {
		return proxied{}, errBadSandboxID
	}
	r := c.Request()
	route, outcome, err := rt.pool.Route(r.Context(), sid, p)
	if err != nil {
		return proxied{}, err
	}
	path, raw := upstreamPath(r.URL.Path, r.URL.RawPath, len("/sandboxes/")+len(sid))
	if err := rt.checkQuota(route, path); err != nil {
		return proxied{route: route, outcome: outcome}, err
	}
	n := rt.serve(c, route, path, raw, "", p.Caller())
	return proxied{route: route, outcome: outcome, bytesIn: n}, nil
}

// upstreamPath cuts the gateway prefix (whose length is n and which has no
// escapes: thread ids and sandbox ids are validated) off the request path,
// leaving /v1/...; no allocation.
func upstreamPath(path, rawPath string, n int) (string, string) {
	p := path[n:]
	if rawPath != "" && len(rawPath) >= n && strings.HasPrefix(rawPath[n:], "/") {
		return p, rawPath[n:]
	}
	return p, ""
}

// acquire is the pool's Acquire on behalf of p: an admin is not held to the
// per-user quotas (only its context says so: nothing for anyone else).
func (rt *Router) acquire(ctx context.Context, p *auth.Principal, user, thread string) (Sandbox, pool.Outcome, error) {
	if p.Has(auth.ScopeAdmin) {
		ctx = pool.WithoutUserQuota(ctx)
	}
	return rt.pool.Acquire(ctx, user, thread)
}
