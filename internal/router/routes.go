package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// The route table: New wires the collaborators into a Router and
// registers every route; ServeHTTP picks the plane a request is for.

// Deps are the router's collaborators.
type Deps struct {
	// Version and Revision are the binary's build, on /healthz.
	Version, Revision string
	Pool              Pool
	Aliases           Aliases
	Ready             []Pinger
	Proxy             proxy.Config
	// PublicURL is how clients reach the gateway; "" = from each request.
	PublicURL string
	Log       *slog.Logger
	// Tracing, when on, makes every request but health checks and scrapes a
	// server span (otelecho) continuing the client's W3C trace context.
	Tracing *telemetry.Tracing
	// Metrics are served at /metrics and record every data-plane request.
	Metrics *telemetry.Metrics
	// Auth authenticates clients; nil = no authentication: every request
	// is the trusted local principal "default" (auth.Local).
	Auth Authenticator
	// Limits are the per-user limits; nil = none.
	Limits *Limits
	// HostSuffix turns on host routing ({sandbox_id}.{suffix}); "" = off.
	// NormalizeHostSuffix gives its form.
	HostSuffix string
	// PreviewSuffix serves preview links as {link}.{suffix} ("" = off;
	// NormalizeHostSuffix gives its form).
	PreviewSuffix string
	// SandboxOrigin is where the path form of preview links is served
	// (NormalizeSandboxOrigin); nil = the gateway's own origin, with a
	// Content-Security-Policy sandbox on every response.
	SandboxOrigin *url.URL
	// AllowedHosts are host names served without authentication besides
	// the loopback names, PublicURL's host and HostSuffix ("*": any; the
	// DNS-rebinding check is off). Ignored when Auth is set.
	AllowedHosts []string
	// MetricsToken, when set, is a bearer token that opens /metrics (and
	// nothing else), so a Prometheus scrape needs no user credential.
	MetricsToken string
	// Mounts are the paths every sandbox has mounted (skills, ACP
	// workspace, configured extra mounts), which DeerFlow's extra_mounts
	// are resolved against.
	Mounts []MountPoint
	// Meter measures thread data kept on the gateway host, for the sandbox
	// view and thread_data_quota; nil = the backend keeps it elsewhere.
	Meter Meter
	// BodyIdleTimeout cuts a proxied request whose body makes no progress
	// this long (408); 0 or negative = never.
	BodyIdleTimeout time.Duration
	// Events are the fleet's lifecycle events (status page, provisioning
	// progress); nil = none published or watched.
	Events *events.Bus
	// Status configures the status page at / (status.go); no Source = off.
	Status Status
	// Admin serves the operator API's logs, stats and prune (admin.go);
	// nil = those answer 501.
	Admin Admin
	// Checkpoints keeps threads' workspace checkpoints and forks
	// (checkpoints.go); nil = those answer 501.
	Checkpoints Checkpoints
	// Holder stops a thread's sandbox around checkpoint work and freezes it
	// on demand (the pool); nil = freeze and checkpoints answer 501.
	Holder Holder
	// Sampler keeps the sandboxes' resource samples (metrics.go); nil =
	// /threads/{thread}/sandbox/metrics answers 501.
	Sampler MetricsSampler
	// Webhooks registers webhook endpoints (webhooks.go); nil = those
	// routes answer 501.
	Webhooks Webhooks
}

// New builds the router.
func New(d Deps) *Router {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	rt := &Router{version: d.Version, revision: d.Revision, pool: d.Pool, aliases: d.Aliases, ready: d.Ready, public: strings.TrimRight(d.PublicURL, "/"), log: d.Log, metrics: d.Metrics,
		auth: d.Auth, limits: d.Limits, hostSuffix: d.HostSuffix, previewSuffix: d.PreviewSuffix, sandboxOrigin: d.SandboxOrigin, mounts: d.Mounts, meter: d.Meter,
		bodyIdle: d.BodyIdleTimeout, admin: d.Admin, events: d.Events, streams: newSSEStreams(),
		progress:    newStreamCap(MaxStreamsPerKind, d.Status.Streams, errProgressStreams),
		checkpoints: d.Checkpoints, holder: d.Holder, sampler: d.Sampler, webhooks: d.Webhooks}
	rt.proxy = proxy.New(d.Proxy, resolver{d.Pool, d.Metrics}, rt.writeError, d.Log)
	if d.Auth == nil {
		rt.hosts = newHostCheck(d.PublicURL, d.HostSuffix, d.AllowedHosts)
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		rt.writeError(c.Response(), c.Request(), err)
	}
	var mw []echo.MiddlewareFunc
	if d.Tracing != nil {
		mw = append(mw, otelecho.Middleware("sandgate", otelecho.WithTracerProvider(d.Tracing.TracerProvider()),
			otelecho.WithPropagators(d.Tracing.Propagator()), otelecho.WithSkipper(untraced)))
	}
	own := []echo.MiddlewareFunc{recoverJSON(d.Log), sameOrigin}
	// Echo wraps its global middleware around the matched route's handler
	// on every request: a closure per middleware per request. The gateway's
	// own are chained once, around a call of the matched handler
	// (c.Handler()), and installed as the innermost middleware, which
	// ignores next: next is that handler.
	routed := chain(own, func(c echo.Context) error { return c.Handler()(c) })
	e.Use(append(slices.Clip(mw), func(echo.HandlerFunc) echo.HandlerFunc { return routed })...)
	mw = append(mw, own...)

	// Open: probes, and DeerFlow's provisioner health check.
	e.GET("/healthz", rt.healthz)
	e.GET("/readyz", rt.readyz)
	e.GET("/health", rt.provisionerHealth)
	e.GET("/openapi.json", serveOpenAPI)
	e.GET("/v1/openapi.json", serveSandboxOpenAPI)
	if d.Metrics != nil {
		// Any authenticated principal, even one without scopes (a scraper's
		// key), or the metrics token.
		metrics := echo.WrapHandler(d.Metrics.Handler())
		e.GET("/metrics", metricsToken(d.MetricsToken, metrics,
			rt.need(anyone, func(c echo.Context, _ *auth.Principal) error { return metrics(c) })))
	}

	e.Any("/threads/:thread/v1/*", rt.dataPlane(telemetry.RouteThread, rt.threadProxy))
	e.Any("/threads/:thread/ports/:port/*", rt.dataPlane(telemetry.RouteThread, rt.threadPortProxy))
	e.Any("/sandboxes/:id/v1/*", rt.dataPlane(telemetry.RouteSandbox, rt.sandboxProxy))

	rt.mcpRoutes(e)
	e.PUT("/threads/:thread/sandbox", rt.need(threads, forUser(rt.acquireThread)))
	e.GET("/threads/:thread/sandbox", rt.need(threads, forUser(rt.getThread)))
	e.DELETE("/threads/:thread/sandbox", rt.need(threads, forUser(rt.releaseThread)))
	e.GET("/threads/:thread/sandbox/events", rt.need(threads, rt.threadEvents))
	e.POST("/threads/:thread/sandbox/freeze", rt.need(threads, forUser(rt.freezeThread)))
	e.GET("/threads/:thread/sandbox/metrics", rt.need(threads, rt.threadMetrics))
	e.POST("/threads/:thread/checkpoints", rt.need(threads, forUser(rt.createCheckpoint)))
	e.GET("/threads/:thread/checkpoints", rt.need(threads, forUser(rt.listCheckpoints)))
	e.GET("/threads/:thread/checkpoints/:id", rt.need(threads, forUser(rt.getCheckpoint)))
	e.DELETE("/threads/:thread/checkpoints/:id", rt.need(threads, forUser(rt.deleteCheckpoint)))
	e.POST("/threads/:thread/checkpoints/:id/restore", rt.need(threads, forUser(rt.restoreCheckpoint)))
	e.POST("/threads/:thread/fork", rt.need(threads, forUser(rt.forkThread)))
	e.POST("/threads/:thread/previews", rt.need(threads, rt.createPreview))
	e.GET("/threads/:thread/previews", rt.need(threads, rt.listPreviews))
	e.DELETE("/threads/:thread/previews/:id", rt.need(threads, rt.deletePreview))

	e.GET("/api/templates", rt.need(provisioner, rt.listTemplates))
	e.GET("/api/capabilities", rt.need(provisioner, rt.provisionerCapabilities))
	e.POST("/api/sandboxes", rt.need(provisioner, rt.provisionerCreate))
	e.GET("/api/sandboxes", rt.need(provisioner, rt.provisionerList))
	e.GET("/api/sandboxes/:id", rt.need(provisioner, rt.provisionerGet))
	e.DELETE("/api/sandboxes/:id", rt.need(provisioner, rt.provisionerDelete))
	rt.routeStatus(e, d.Status, d.Events)
	rt.registerAdmin(e)
	rt.registerWebhooks(e)
	rt.echo = e

	if rt.hostSuffix != "" {
		rt.hostChain = chain(mw, rt.dataPlane(telemetry.RouteSandbox, rt.hostProxy))
	}
	rt.capabilityChain = chain(mw, rt.capabilityPlane)
	// sameOrigin (last) left out: a preview's origin is the sandbox's,
	// and its link is the credential (preview.go).
	rt.previewChain = chain(mw[:len(mw)-1], rt.previewPlane)
	rt.previewHost = "{link}." + rt.previewSuffix
	return rt
}

// chain wraps h in mw, the first outermost (echo's order), once.
func chain(mw []echo.MiddlewareFunc, h echo.HandlerFunc) echo.HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// ServeHTTP makes the router an http.Handler.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Before the DNS-rebinding check: a preview request carries its own
	// credential, and opens nothing of the gateway's.
	if kind, link := rt.previewRequest(r); kind != notPreview {
		rt.servePreview(w, r, kind, link)
		return
	}
	if rt.hosts != nil && !rt.hosts.allows(r) {
		rt.writeError(w, r, errMisdirectedHost) // before any work
		return
	}
	if rt.hostSuffix != "" {
		if _, _, match, _ := hostRoute(r.Host, rt.hostSuffix); match {
			rt.serveHost(w, r)
			return
		}
	}
	if strings.HasPrefix(r.URL.Path, capabilityRoot) {
		rt.serveCapability(w, r)
		return
	}
	rt.echo.ServeHTTP(w, r)
}

// untraced are the requests that make no span: probes and scrapes, which
// would drown the traces that matter.
func untraced(c echo.Context) bool {
	switch c.Path() {
	case "/healthz", "/readyz", "/metrics", "/health":
		return true
	}
	return false
}

// resolver adapts the pool to the proxy's Resolver; every Retry is one
// upstream dial retry.
type resolver struct {
	routes  Routes
	metrics *telemetry.Metrics
}

func (r resolver) Retry(ctx context.Context, failed proxy.Upstream) (proxy.Upstream, error) {
	sb, ok := failed.(Sandbox) // the router hands the proxy nothing else
	if !ok {
		return nil, fmt.Errorf("unexpected upstream %T", failed)
	}
	r.metrics.DialRetried()
	next, err := r.routes.Reacquire(ctx, sb)
	if err != nil {
		return nil, err
	}
	return next, nil
}
