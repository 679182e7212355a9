package router

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Host routing (host_suffix): {sandbox_id}.{suffix} proxies the whole
// sandbox, any path, so browser UIs that use absolute paths (noVNC's
// /websockify, code-server) work; {port}-{sandbox_id}.{suffix} reaches that
// port inside the sandbox, any path, through the sandbox server's bridge
// (sandboxspec.PortPrefix), as /threads/{t}/ports/{port} does. Like
// /sandboxes/{id}, it never provisions and only the owner (or an admin)
// gets through.

// hostRoutePath names host-routed requests in traces and logs.
const hostRoutePath = "{sandbox_id}.{host_suffix}/*"

// hostRoute splits a Host header under suffix (lowercase, no dots at the
// ends). match is false for any other host, the API's own name included;
// a host under the suffix with a bad first label is a match with errBadHost.
// It allocates nothing for a lowercase host.
func hostRoute(host, suffix string) (sid, port string, match bool, err error) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host, ']') < 0 {
		host = host[:i] // the gateway's own port
	}
	host = strings.TrimSuffix(host, ".")
	n := len(host) - len(suffix)
	if n < 2 || host[n-1] != '.' || !strings.EqualFold(host[n:], suffix) {
		return "", "", false, nil
	}
	label := host[:n-1]
	if i := strings.IndexByte(label, '-'); i >= 0 {
		port, label = label[:i], label[i+1:]
		if !sandboxspec.ValidPort(port) {
			return "", "", true, errBadHost
		}
	}
	sid = strings.ToLower(label) // hosts are case-insensitive; no copy when already lowercase
	if !identity.ValidSandboxID(sid) {
		return "", "", true, errBadHost
	}
	return sid, port, true, nil
}

// NormalizeHostSuffix lowercases a host_suffix and trims its dots; "" stays
// off. It refuses what cannot be a DNS suffix.
func NormalizeHostSuffix(s string) (string, error) {
	s = strings.Trim(strings.ToLower(strings.TrimSpace(s)), ".")
	if s == "" {
		return "", nil
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return "", errors.New("host_suffix: want a DNS name such as sandbox.example.com")
		}
	}
	return s, nil
}

// hostProxy serves a host-routed request: the whole path goes to the
// sandbox's API, or with a port to that port inside it.
func (rt *Router) hostProxy(c echo.Context, p *auth.Principal) (proxied, error) {
	r := c.Request()
	sid, port, _, err := hostRoute(r.Host, rt.hostSuffix)
	if err != nil {
		return proxied{}, err
	}
	route, outcome, err := rt.pool.Route(r.Context(), sid, p)
	if err != nil {
		return proxied{}, err
	}
	if port == "" { // another port is another app, not the sandbox API
		if err := rt.checkQuota(route, r.URL.Path); err != nil {
			return proxied{route: route, outcome: outcome}, err
		}
	}
	n := rt.serve(c, route, r.URL.Path, r.URL.RawPath, port, p.Caller())
	return proxied{route: route, outcome: outcome, bytesIn: n}, nil
}

// serveHost runs a host-routed request through the same middleware as the
// API's routes (tracing, panic recovery, origin check), outside echo's
// router: the path belongs to the sandbox.
func (rt *Router) serveHost(w http.ResponseWriter, r *http.Request) {
	c := rt.echo.AcquireContext()
	defer rt.echo.ReleaseContext(c)
	c.Reset(r, w)
	c.SetPath(hostRoutePath)
	if err := rt.hostChain(c); err != nil {
		rt.echo.HTTPErrorHandler(err, c)
	}
}
