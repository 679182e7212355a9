package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
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
	Pool    Pool
	Aliases Aliases
	Ready   []Pinger
	Proxy   proxy.Config
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
}

// New builds the router.
func New(d Deps) *Router {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	rt := &Router{pool: d.Pool, aliases: d.Aliases, ready: d.Ready, public: strings.TrimRight(d.PublicURL, "/"), log: d.Log, metrics: d.Metrics,
		auth: d.Auth, limits: d.Limits, hostSuffix: d.HostSuffix, mounts: d.Mounts, meter: d.Meter,
		bodyIdle: d.BodyIdleTimeout, admin: d.Admin, events: d.Events, streams: newSSEStreams(),
		progress:    newStreamCap(MaxStreamsPerKind, d.Status.Streams, errProgressStreams),
		checkpoints: d.Checkpoints, holder: d.Holder}
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
	mw = append(mw, recoverJSON(d.Log), sameOrigin)
	e.Use(mw...)

	// Open: probes, and DeerFlow's provisioner health check.
	e.GET("/healthz", rt.healthz)
	e.GET("/readyz", rt.readyz)
	e.GET("/health", rt.provisionerHealth)
	e.GET("/openapi.json", serveOpenAPI)
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
	e.PUT("/threads/:thread/sandbox", rt.need(threads, rt.acquireThread))
	e.GET("/threads/:thread/sandbox", rt.need(threads, rt.getThread))
	e.DELETE("/threads/:thread/sandbox", rt.need(threads, rt.releaseThread))
	e.GET("/threads/:thread/sandbox/events", rt.need(threads, rt.threadEvents))
	e.POST("/threads/:thread/sandbox/freeze", rt.need(threads, rt.freezeThread))
	e.POST("/threads/:thread/checkpoints", rt.need(threads, rt.createCheckpoint))
	e.GET("/threads/:thread/checkpoints", rt.need(threads, rt.listCheckpoints))
	e.GET("/threads/:thread/checkpoints/:id", rt.need(threads, rt.getCheckpoint))
	e.DELETE("/threads/:thread/checkpoints/:id", rt.need(threads, rt.deleteCheckpoint))
	e.POST("/threads/:thread/checkpoints/:id/restore", rt.need(threads, rt.restoreCheckpoint))
	e.POST("/threads/:thread/fork", rt.need(threads, rt.forkThread))

	e.GET("/api/templates", rt.need(provisioner, rt.listTemplates))
	e.GET("/api/capabilities", rt.need(provisioner, rt.provisionerCapabilities))
	e.POST("/api/sandboxes", rt.need(provisioner, rt.provisionerCreate))
	e.GET("/api/sandboxes", rt.need(provisioner, rt.provisionerList))
	e.GET("/api/sandboxes/:id", rt.need(provisioner, rt.provisionerGet))
	e.DELETE("/api/sandboxes/:id", rt.need(provisioner, rt.provisionerDelete))
	rt.routeStatus(e, d.Status, d.Events)
	rt.registerAdmin(e)
	rt.echo = e

	chain := func(h echo.HandlerFunc) echo.HandlerFunc {
		for i := len(mw) - 1; i >= 0; i-- {
			h = mw[i](h)
		}
		return h
	}
	if rt.hostSuffix != "" {
		rt.hostChain = chain(rt.dataPlane(telemetry.RouteSandbox, rt.hostProxy))
	}
	rt.capabilityChain = chain(rt.capabilityPlane)
	return rt
}

// ServeHTTP makes the router an http.Handler.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
