// Package gateway assembles a gateway replica from its configuration: the
// Redis client (or the embedded server), the backend, the pool and its
// loops, the router and the HTTP server, and runs it until drained.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/router"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/serve"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
	"github.com/sandgate/sandgate/internal/webhook"
)

// Gateway is one replica.
type Gateway struct {
	cfg      config.Config
	log      *slog.Logger
	rdb      redis.UniversalClient
	embedded *miniredis.Miniredis
	// layout is ready once Redis holds the key layout this code uses.
	layout *layoutGate
	// events carries lifecycle events between replicas.
	events   *events.Bus
	webhooks *webhook.Service
	pool     *pool.Pool
	sampler  *pool.Sampler
	router   *router.Router
	server   httpServer
	listener net.Listener
	tracing  *telemetry.Tracing
	metrics  *telemetry.Metrics
	egress   *egress.Proxy
	// denials makes the egress proxy's refusals events (set once the
	// event bus exists; the proxy may be asked before).
	denials atomic.Pointer[events.Throttle]
	backend backend.Backend
	// egressListener serves networked sandboxes' proxy (egress_listen).
	egressListener net.Listener
	// images collects the process backend's image store; nil: none.
	images *imageGC
}

// ErrInsecure refuses a non-loopback listener without authentication.
var ErrInsecure = errors.New("listen: refusing a non-loopback address without authentication; configure auth or pass --insecure")

// backendMaker builds the backend and returns it with its name (newBackend;
// a test gives its own).
type backendMaker func(ctx context.Context, cfg config.Config, log *slog.Logger, gate backend.EgressGate) (backend.Backend, string, error)

// backendCloseTimeout bounds closing the backend's clients at stop.
const backendCloseTimeout = 5 * time.Second

// New builds a replica; nothing is served until Run.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*Gateway, error) {
	return newGateway(ctx, cfg, log, newBackend)
}

func newGateway(ctx context.Context, cfg config.Config, log *slog.Logger, makeBackend backendMaker) (*Gateway, error) {
	if !cfg.Loopback() && !cfg.Insecure && !cfg.Auth.Enabled() {
		return nil, ErrInsecure
	}
	if cfg.Pool.Instance == "" {
		host, _ := os.Hostname()
		cfg.Pool.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	g := &Gateway{cfg: cfg, log: log, metrics: telemetry.NewMetrics()}
	tracing, err := telemetry.SetupTracing(ctx, telemetry.Resource{Service: "sandgate", Instance: cfg.Pool.Instance}, log)
	if err != nil {
		log.Warn("tracing off: bad OTEL_* configuration", "err", err)
	}
	g.tracing = tracing
	if err := g.connectRedis(ctx); err != nil {
		g.close()
		return nil, err
	}
	statedb.OnError(g.rdb, g.metrics.RedisError)
	authn, err := newAuthenticator(ctx, cfg.Auth, log)
	if err != nil {
		g.close()
		return nil, err
	}
	hostSuffix, _ := router.NormalizeHostSuffix(cfg.HostSuffix) // validated by Load
	previewSuffix, _ := router.NormalizeHostSuffix(cfg.PreviewSuffix)
	sandboxOrigin, _ := router.NormalizeSandboxOrigin(cfg.SandboxOrigin)
	limits := router.NewLimits(cfg.Limits)
	if g.egress, err = newEgress(cfg, log, g.metrics, g.egressDenied); err != nil {
		g.close()
		return nil, err
	}
	be, name, err := makeBackend(ctx, cfg, log, g.egress)
	if err != nil {
		g.close()
		return nil, err
	}
	g.backend = be
	if name != "process" && cfg.Process.Image != "" {
		log.Warn("process_image is set, but the backend is "+name+": its sandboxes do not use it", "process_image", cfg.Process.Image)
	}
	if name == "process" {
		if err := importTemplateImages(ctx, &cfg, log); err != nil {
			g.close()
			return nil, err
		}
		if g.images, err = newImageGC(cfg, be, log); err != nil {
			g.close()
			return nil, err
		}
	}
	store := statedb.NewStoreBuckets(g.rdb, cfg.RedisPrefix, cfg.RedisBuckets)
	keys := store.Keys()
	g.layout = &layoutGate{store: store, log: log}
	if err := g.layout.migrate(ctx); errors.Is(err, statedb.ErrLayout) {
		g.close()
		return nil, err
	}
	if g.events, err = events.New(g.rdb, events.Config{Stream: keys.Events(), Retention: cfg.EventsRetention,
		Replica: cfg.Pool.Instance, Log: log}); err != nil {
		g.close()
		return nil, err
	}
	if g.webhooks, err = newWebhooks(cfg, g.rdb, keys, log); err != nil {
		g.close()
		return nil, err
	}
	g.denials.Store(events.NewThrottle(g.events, cfg.EgressDeniedEvery))
	g.metrics.WatchPool(func(ctx context.Context) (telemetry.PoolCounts, error) {
		n, err := store.Count(ctx)
		return telemetry.PoolCounts(n), err
	})
	var creates pool.CreateLimiter
	if r := cfg.Limits.EffectiveCreateRate(); r.N > 0 {
		if creates, err = statedb.NewCreateRate(store, r.N, r.Per, nil); err != nil {
			g.close()
			return nil, err
		}
	}
	threads, err := threadCheckpoints(ctx, cfg, name, log)
	if err != nil {
		g.close()
		return nil, err
	}
	var ckpts router.Checkpoints // nil, not a nil *Threads: the routes answer 501
	var newThread func(ctx context.Context, user, thread string) error
	if threads != nil {
		ckpts, newThread = threads, threads.AdmitThread
	}
	cfg.Pool.Solo = g.embedded != nil
	meter := threadMeter(cfg, name, log)
	g.pool, err = pool.New(cfg.Pool, pool.Deps{
		Store:        store,
		Backend:      be,
		BackendName:  name,
		NewTransport: sandboxTransport(name, cfg.TransportImpl),
		Log:          log,
		Tracer:       g.tracing.Tracer(),
		Metrics:      g.metrics,
		Creates:      creates,
		NewThread:    newThread,
		Events:       g.events,
		FailReason:   router.ClientReason,
		Meters:       samplerMeters(meter, g.egress),
	})
	if err != nil {
		g.close()
		return nil, err
	}
	if g.embedded != nil {
		g.adoptPrevious(ctx)
	}
	g.sampler = pool.NewSampler(g.pool)
	g.metrics.WatchSandboxes(g.sampler.Usage, cfg.Pool.MetricsPerSandbox, cfg.Pool.MetricsTopN)
	ready := []router.Pinger{store, g.layout}
	if p, ok := be.(router.Pinger); ok {
		ready = append(ready, p)
	}
	g.router = router.New(router.Deps{Version: cfg.Version, Revision: cfg.Revision, Pool: router.PoolOf(g.pool), Admin: pool.NewAdmin(g.pool), Aliases: store, Ready: ready, Proxy: proxyConfig(cfg),
		Checkpoints: ckpts, Holder: pool.NewHolder(g.pool), Sampler: g.sampler,
		PublicURL: cfg.PublicURL, Log: log, Tracing: g.tracing, Metrics: g.metrics,
		Auth: authn, Limits: limits, HostSuffix: hostSuffix, PreviewSuffix: previewSuffix, SandboxOrigin: sandboxOrigin, AllowedHosts: cfg.AllowedHosts,
		MetricsToken: cfg.MetricsToken, Mounts: mountPoints(cfg), Meter: meter,
		BodyIdleTimeout: cfg.BodyIdleTimeout, Events: g.events, Webhooks: g.webhooks,
		Status: router.Status{Source: store, MaxSandboxes: g.pool.Config().MaxSandboxes, HardCap: cfg.Pool.HardCap,
			MaxSandboxesPerUser: cfg.Pool.MaxSandboxesPerUser, Heartbeat: pool.HeartbeatInterval,
			Sessions: store, PlainLoopback: cfg.Loopback(), Streams: cfg.Limits.Streams}})
	g.server = newServer(cfg, g.router, log)
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		g.close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	g.listener = serve.LimitListener(l, cfg.Conns)
	if g.egressListener, err = g.listenEgress(); err != nil {
		_ = g.listener.Close()
		g.close()
		return nil, err
	}
	return g, nil
}

// Addr is the address the gateway listens on.
func (g *Gateway) Addr() net.Addr { return g.listener.Addr() }

// Run serves until ctx ends, then drains: readiness fails while the
// gateway still serves for drain_delay (cut short when hurry is closed;
// nil: never), then in-flight requests finish (up to shutdown_timeout),
// upgraded connections close, the loops stop and the backend's clients
// close. Sandboxes keep running: the pool belongs to the fleet, not to a
// replica.
func (g *Gateway) Run(ctx context.Context, hurry <-chan struct{}) error {
	defer g.close()
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, run := range []func(context.Context){
		pool.NewToucher(g.pool).Run,
		pool.NewReaper(g.pool).Run,
		pool.NewFreezer(g.pool).Run,
		pool.NewLifetime(g.pool).Run,
		pool.NewHealth(g.pool).Run,
		pool.NewReconciler(g.pool).Run,
		pool.NewPrewarmer(g.pool).Run,
		pool.NewHeartbeat(g.pool).Run,
		pool.NewPreviewWatcher(g.pool).Run,
		pool.NewBucketLeases(g.pool).Run,
		g.sampler.Run,
		pool.NewOOMWatch(g.pool).Run,
		g.layout.Run,
		g.keepEgress,
		g.events.Run,
		g.webhooks.Loop().Run,
		g.images.Run,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); run(loops) }()
	}
	g.logLimits()
	g.log.Info("gateway listening", "addr", g.listener.Addr().String(), "backend", g.cfg.Backend,
		"max_connections", g.cfg.Conns.Effective().String(),
		"instance", g.cfg.Pool.Instance)

	if g.cfg.ServerImpl == config.ImplNetHTTP || g.cfg.TransportImpl == config.ImplNetHTTP {
		g.log.Warn("HTTP fallback in use: the standard library's stack instead of Sandgate's",
			"server_impl", g.cfg.ServerImpl, "transport_impl", g.cfg.TransportImpl)
	}
	if g.egressListener != nil {
		go g.serveEgress(g.egressListener)
	}
	errc := make(chan error, 1)
	go func() { errc <- g.server.Serve(g.listener) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	g.router.Drain()
	if serveErr == nil {
		g.waitDrainDelay(hurry)
	}
	g.log.Info("draining", "timeout", g.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	if err := g.server.Shutdown(sctx); err != nil {
		g.log.Warn("drain incomplete", "err", err)
	}
	if n := g.router.CloseUpgraded(); n > 0 {
		g.log.Info("closed upgraded connections", "count", n)
	}
	// One last flush so this replica's recent activity is not lost.
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = pool.NewToucher(g.pool).Flush(fctx)
	fcancel()
	stopLoops()
	wg.Wait()
	g.pool.Wait()
	g.log.Info("stopped; sandboxes left running for the fleet")
	if errors.Is(serveErr, http.ErrServerClosed) {
		return nil
	}
	return serveErr
}

// waitDrainDelay keeps serving with readiness failing, so that load
// balancers polling /readyz stop sending new requests before the listener
// closes and new connections are refused.
func (g *Gateway) waitDrainDelay(hurry <-chan struct{}) {
	d := g.cfg.EffectiveDrainDelay()
	if d <= 0 {
		return
	}
	g.log.Info("readiness failing; serving until load balancers move away", "drain_delay", d.String())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-hurry:
		g.log.Info("drain delay cut short by a second signal")
	}
}

func (g *Gateway) connectRedis(ctx context.Context) error {
	statedb.SetLogger(g.log) // go-redis's own lines into the JSON log
	if g.cfg.RedisURL == "" {
		m, rdb, err := startEmbedded()
		if err != nil {
			return err
		}
		g.embedded, g.rdb = m, rdb
		g.log.Warn("using the embedded Redis-protocol server: state is not durable and is lost on exit; " +
			"one replica only. Set SANDGATE_REDIS_URL for production.")
		return nil
	}
	rdb, err := statedb.Connect(g.cfg.RedisURL)
	if err != nil {
		return err
	}
	g.rdb = rdb
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		// Not fatal: readiness reports it and requests answer 503 until it is back.
		g.log.Warn("redis not reachable at startup", "err", err)
	}
	return nil
}

// close flushes the spans still buffered, stops the egress proxy, closes
// the backend's clients (nothing uses them once the loops, the pool's work
// and the egress proxy's credential checks have stopped) and Redis.
func (g *Gateway) close() {
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.tracing.Shutdown(fctx); err != nil {
		g.log.Warn("flush traces", "err", err)
	}
	if g.webhooks != nil {
		g.webhooks.Close()
	}
	if g.egress != nil {
		// Sockets stay: the sandboxes keep their paths for the next gateway.
		_ = g.egress.Shutdown(fctx)
	}
	g.closeBackend()
	if g.rdb != nil {
		_ = g.rdb.Close()
	}
	if g.embedded != nil {
		g.embedded.Close()
	}
}

// closeBackend closes a backend that holds clients (docker's API client,
// the kubernetes informer, remote's idle connections), bounded so that a
// stuck one cannot hold the stop past backendCloseTimeout.
func (g *Gateway) closeBackend() {
	c, ok := g.backend.(io.Closer)
	if !ok {
		return
	}
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	t := time.NewTimer(backendCloseTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			g.log.Warn("close backend", "err", err)
		}
	case <-t.C:
		g.log.Warn("close backend: gave up waiting", "timeout", backendCloseTimeout.String())
	}
}

// logLimits says at start-up what bounds each user's share of the fleet
// and each sandbox's life, so an operator sees what "no cap" means here.
func (g *Gateway) logLimits() {
	p := g.cfg.Pool
	capOf := func(n int) string {
		if n <= 0 {
			return "none"
		}
		return strconv.Itoa(n)
	}
	durOf := func(d, dflt time.Duration) string {
		switch {
		case d < 0:
			return "never"
		case d == 0:
			return dflt.String()
		}
		return d.String()
	}
	g.log.Info("sandbox limits", "multi_user", g.cfg.Auth.Enabled(),
		"max_sandboxes_per_user", capOf(p.MaxSandboxesPerUser), "max_creates_per_user", capOf(p.MaxCreatesPerUser),
		"max_lifetime", durOf(p.MaxLifetime, pool.DefaultMaxLifetime),
		"busy_idle_after", durOf(p.BusyIdleAfter, sandboxspec.DefaultBusyIdleAfter))
}
