package router

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Preview links (internal/preview): POST /threads/{t}/previews signs a
// link to one port of the thread's sandbox; whoever holds it reaches that
// port with no other credential, as {link}.{preview_suffix}/... (host
// form) or {sandbox_origin}/preview/{link}/... (path form), until it
// expires, is revoked (DELETE) or the sandbox is recreated. The link is
// cut out of the request before any middleware runs, as a capability is:
// logs and spans see previewPrefix or previewHost instead. A link that is
// unknown, expired, revoked, forged or for a sandbox since recreated is
// the same JSON 404.
//
// Origins: the host form is a separate origin per link, and sandbox_origin
// is meant to be one of its own; neither ever sees a cookie of the
// gateway's, and their scripts cannot read the gateway's pages. Without a
// sandbox_origin the path form is served on the gateway's origin, and then
// every response carries previewCSP, which makes the page an opaque
// origin of its own.

const (
	previewRoot = "/preview/"
	// previewPrefix replaces "/preview/{the link}" in the request path.
	previewPrefix = "/preview/{link}"
	// previewPathRoute and previewHostRoute name preview requests in
	// traces and logs.
	previewPathRoute = previewPrefix + "/*"
	previewHostRoute = "{link}.{preview_suffix}/*"
	// previewCSP confines sandbox content served on the gateway's origin.
	previewCSP = "sandbox allow-scripts allow-forms allow-popups"
)

var (
	errNoPreview        = errors.New("no such preview link: unknown, expired or revoked")
	errBadPreviewBody   = errors.New(`request body must be {"port": 1-65535, "ttl": "1h"}`)
	errBadSandboxOrigin = errors.New("sandbox_origin: want scheme://host[:port] (http or https, no path)")
	previewParam        = []string{"link"}
	noCSP               = []string{}
)

// previewKind is what previewRequest found.
type previewKind int

const (
	notPreview previewKind = iota
	previewHost
	previewPath
	// previewElsewhere: a 404 without echo's router (nor its logging of
	// the path): any other path on the sandbox origin, which serves
	// nothing but links (not the API, not the status page), or the path
	// form on another host while sandbox_origin is set.
	previewElsewhere
)

// previewRequest tells a preview request by its Host (a name under
// preview_suffix, or sandbox_origin's) and path.
func (rt *Router) previewRequest(r *http.Request) (previewKind, string) {
	if rt.previewSuffix != "" {
		if link, ok := previewHostLabel(r.Host, rt.previewSuffix); ok {
			return previewHost, link
		}
	}
	onPath := strings.HasPrefix(r.URL.Path, previewRoot)
	if rt.sandboxOrigin == nil {
		if onPath {
			return previewPath, ""
		}
		return notPreview, ""
	}
	switch onOrigin := sameHost(r.Host, rt.sandboxOrigin); {
	case onOrigin && onPath:
		return previewPath, ""
	case onOrigin || onPath: // the path form is served on the sandbox origin only
		return previewElsewhere, ""
	}
	return notPreview, ""
}

// previewHostLabel is the first label of host when the rest is suffix.
func previewHostLabel(host, suffix string) (string, bool) {
	host = hostName(host)
	n := len(host) - len(suffix)
	if n < 2 || host[n-1] != '.' || !strings.EqualFold(host[n:], suffix) || strings.IndexByte(host[:n-1], '.') >= 0 {
		return "", false
	}
	return host[:n-1], true
}

// sameHost: host (a Host header) names origin's host, with its port when
// the origin has one.
func sameHost(host string, origin *url.URL) bool {
	if origin.Port() != "" {
		return strings.EqualFold(host, origin.Host)
	}
	return strings.EqualFold(hostName(host), origin.Hostname())
}

// splitPreview cuts a /preview/... path into the link and what follows.
func splitPreview(path string) (link, rest string) {
	s := path[len(previewRoot):]
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// servePreview runs a preview request through tracing and panic recovery
// (not the origin check: the origin is the sandbox's, and the link is the
// credential) outside echo's router, on a copy whose path and Host no
// longer hold the link.
func (rt *Router) servePreview(w http.ResponseWriter, r *http.Request, kind previewKind, link string) {
	redacted := new(http.Request)
	*redacted = *r
	u := *r.URL
	route := previewHostRoute
	if kind == previewHost {
		// Middleware (spans) sees the redacted Host; the real one rides in
		// the URL copy, which nothing logs, until previewProxy puts it back:
		// the sandbox's server checks a page's Origin against it
		// (X-Forwarded-Host).
		redacted.Host, u.Host = rt.previewHost, r.Host
	} else if strings.HasPrefix(r.URL.Path, previewRoot) {
		var rest string
		link, rest = splitPreview(r.URL.Path)
		route = previewPathRoute
		u.Path, u.RawPath = previewPrefix+rest, ""
		if strings.HasPrefix(r.URL.RawPath, previewRoot) {
			if _, raw := splitPreview(r.URL.RawPath); raw != "" {
				u.RawPath = previewPrefix + raw
			}
		}
		if kind == previewPath && rest == "" { // relative URLs of the page need the slash
			target := r.URL.Path + "/"
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, target, http.StatusPermanentRedirect)
			return
		}
		if rt.sandboxOrigin == nil {
			w.Header().Set("Content-Security-Policy", previewCSP)
		}
	}
	redacted.URL = &u
	redacted.RequestURI = u.Path
	if kind == previewElsewhere {
		rt.writeError(w, redacted, errNoPreview)
		return
	}

	rt.serveLink(w, redacted, rt.previewChain, route, previewParam, link)
}

// previewPlane is the data plane of preview links: no credential but the
// link.
func (rt *Router) previewPlane(c echo.Context) error {
	return rt.linkPlane(c, telemetry.RoutePreview, rt.previewProxy, errNoPreview)
}

func (rt *Router) previewProxy(c echo.Context) (proxied, error) {
	r := c.Request()
	route, port, outcome, err := rt.pool.PreviewRoute(r.Context(), c.Param("link"))
	if err != nil {
		return proxied{}, err
	}
	path, raw := r.URL.Path, r.URL.RawPath
	if r.URL.Host != "" {
		r.Host = r.URL.Host // servePreview's redaction undone for the sandbox
	}
	if c.Path() == previewPathRoute {
		path, raw = upstreamPath(path, raw, len(previewPrefix))
	}
	user := route.Identity().User
	res := proxied{route: route, outcome: outcome, user: user}
	slot, err := rt.limits.beginUser(user)
	if err != nil {
		return res, err
	}
	defer rt.limits.end(slot)
	// The proxy adds no policy of its own (noCSP): the sandbox origin and
	// the host form are origins of their own, and on the gateway's origin
	// servePreview already set previewCSP on the response.
	res.bytesIn = rt.serveCSP(c, route, path, raw, port, noCSP, nil) // a port's app: no command log
	return res, nil
}

// createPreview is POST /threads/{thread}/previews {"port", "ttl"}: the
// thread's sandbox (provisioned if need be) gets a link to port.
func (rt *Router) createPreview(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	var req api.CreatePreview
	if err := decodeOptional(c, &req); err != nil {
		if errors.Is(err, errBadCheckpointBody) {
			err = fmt.Errorf("%w: %w", errBadPreviewBody, err)
		}
		return err
	}
	var ttl time.Duration
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil {
			return fmt.Errorf("%w: ttl %q is not a duration such as 30m or 2h", pool.ErrBadPreview, req.TTL)
		}
	}
	ctx := c.Request().Context()
	route, _, err := rt.acquire(ctx, p, p.User, thread)
	if err != nil {
		return err
	}
	id := route.Identity()
	tok, rec, err := rt.pool.CreatePreview(ctx, id, req.Port, ttl)
	if err != nil {
		return err
	}
	rt.log.InfoContext(ctx, "preview link created", "user", p.User, "thread", thread, "sandbox_id", id.SandboxID,
		"link_id", rec.ID, "port", rec.Port, "expires", rec.Expires)
	return c.JSON(http.StatusCreated, rt.previewView(c, tok, rec))
}

// listPreviews is GET /threads/{thread}/previews: the live links of the
// thread's current sandbox, with their URLs (for their owner only).
func (rt *Router) listPreviews(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	out := api.PreviewList{Previews: []api.Preview{}}
	rec, ok, err := rt.pool.Record(ctx, identity.SandboxID(p.User, thread))
	if err != nil {
		return err
	}
	if !ok || rec.State == state.StateDestroying {
		return c.JSON(http.StatusOK, out)
	}
	list, err := rt.pool.Previews(ctx, pool.Identity{SandboxID: rec.SandboxID, Incarnation: rec.Incarnation})
	if err != nil {
		return err
	}
	for _, l := range list {
		out.Previews = append(out.Previews, rt.previewView(c, l.Token, l.Preview))
	}
	return c.JSON(http.StatusOK, out)
}

// deletePreview is DELETE /threads/{thread}/previews/{id}: revoked on
// every replica within a second.
func (rt *Router) deletePreview(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	sid := identity.SandboxID(p.User, thread)
	if err := rt.pool.RevokePreview(ctx, sid, c.Param("id")); err != nil {
		if errors.Is(err, pool.ErrNotFound) {
			return errNoPreview
		}
		return err
	}
	rt.log.InfoContext(ctx, "preview link revoked", "user", p.User, "thread", thread, "sandbox_id", sid, "link_id", c.Param("id"))
	return c.NoContent(http.StatusNoContent)
}

// adminRotatePreviewKey is POST /admin/v1/preview-keys: a new fleet key
// signs new links; the previous one verifies until its links expired.
func (rt *Router) adminRotatePreviewKey(c echo.Context, p *auth.Principal) error {
	ctx := c.Request().Context()
	id, retires, err := rt.pool.RotatePreviewKey(ctx)
	if err != nil {
		return err
	}
	rt.log.InfoContext(ctx, "preview key rotated", "admin", p.User, "key_id", id, "previous_verifies_until", retires)
	return c.JSON(http.StatusOK, api.PreviewKey{KeyID: int(id), PreviousVerifiesUntil: retires.UTC()})
}

// previewView is a link as the API shows it: url is the host form when
// preview_suffix is set, else the path form (path_url, always given).
func (rt *Router) previewView(c echo.Context, tok string, rec state.Preview) api.Preview {
	base := rt.baseURL(c)
	if rt.sandboxOrigin != nil {
		base = rt.sandboxOrigin.String()
	}
	v := api.Preview{ID: rec.ID, Port: rec.Port, ExpiresAt: rec.Expires.UTC(), PathURL: base + previewRoot + tok + "/"}
	v.URL = v.PathURL
	if rt.previewSuffix != "" {
		scheme, port := "http", ""
		if u, err := url.Parse(rt.baseURL(c)); err == nil {
			scheme, port = u.Scheme, u.Port()
		}
		v.URL = scheme + "://" + tok + "." + rt.previewSuffix
		if port != "" {
			v.URL += ":" + port
		}
		v.URL += "/"
	}
	return v
}

// NormalizeSandboxOrigin checks a sandbox_origin and gives its form
// (scheme://host[:port]); "" stays off.
func NormalizeSandboxOrigin(s string) (*url.URL, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "/")
	if s == "" {
		return nil, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errBadSandboxOrigin
	}
	return &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host)}, nil
}
