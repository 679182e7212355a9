package telemetry

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the gateway's Prometheus metrics (served at /metrics). They
// use client_golang directly, not the OTel Prometheus exporter: a request
// records into children bound once at start, so a count is one atomic add and
// a latency one bucket search plus atomic adds, with no attribute set hashed
// or looked up per call (docs/OBSERVABILITY.md). No label names a sandbox,
// a thread or a user. A nil *Metrics records nothing.
type Metrics struct {
	reg *prometheus.Registry

	acquire     [len(outcomes)]prometheus.Observer
	proxy       [len(routeKinds)][len(statusClasses)]prometheus.Counter
	proxyTime   [len(routeKinds)]prometheus.Observer
	creates     *prometheus.CounterVec
	destroys    *prometheus.CounterVec
	evictions   prometheus.Counter
	adoptions   *prometheus.CounterVec
	claims      *prometheus.CounterVec
	reconciled  *prometheus.CounterVec
	dialRetries prometheus.Counter
	redisErrors prometheus.Counter
	egressAllow prometheus.Counter
	egressDeny  [len(egressDenials)]prometheus.Counter
}

// Label values. Every series exists from the start (at 0), so rate() and
// absent-series alerts work before the first event.
var (
	outcomes       = [...]string{"hit", "warm", "cold", "adopted", "prewarm", "thawed", "error"}
	routeKinds     = [...]string{"thread", "sandbox", "capability", "preview"}
	statusClasses  = [...]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}
	createResults  = []string{"ok", "error"}
	destroyReasons = []string{"idle", "evicted", "client", "provisioner_api", "interrupted", "admin", "prewarm_trim", "max_lifetime"}
	adoptSources   = []string{"acquire", "reconciler"}
	claimReasons   = []string{"idle_active", "idle_warm"}
	reconcileActs  = []string{"adopted", "dropped", "finished", "skipped"}
	// egressDenials are internal/egress's deny reasons; "other" catches one
	// added there and not here.
	egressDenials = [...]string{"not_allowed", "mode_none", "ip_literal", "private_address", "resolve_failed",
		"bad_request", "dial_failed", "upstream_failed", "unauthorized", "not_tls", "sni_missing", "sni_mismatch", "other"}
)

// RouteKind is the data-plane route a proxied request came in on.
type RouteKind int

const (
	RouteThread     RouteKind = iota // /threads/{thread}/v1/...
	RouteSandbox                     // /sandboxes/{id}/v1/...
	RouteCapability                  // /c/{capability}/v1/...
	RoutePreview                     // preview links: {link}.{preview_suffix}/..., /preview/{link}/...
)

func (k RouteKind) String() string { return routeKinds[k] }

var (
	acquireBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	proxyBuckets   = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

// NewMetrics registers every metric, the Go runtime's and the process's.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{reg: reg}

	acquire := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sandgate_acquire_duration_seconds", Buckets: acquireBuckets,
		Help: "Time to get a thread's sandbox for a request, by outcome: hit (cached or active), warm (reclaimed), cold (created), adopted (found running), prewarm (a pre-started sandbox claimed), error.",
	}, []string{"outcome"})
	f(acquire)
	for i, o := range outcomes {
		m.acquire[i] = acquire.WithLabelValues(o)
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandgate_proxy_requests_total",
		Help: "Data-plane requests answered, by route (thread | sandbox | capability) and status class (499: client gone counts as 4xx).",
	}, []string{"route", "class"})
	f(requests)
	durations := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sandgate_proxy_request_duration_seconds", Buckets: proxyBuckets,
		Help: "Data-plane request time including acquire, until the response is sent, by route.",
	}, []string{"route"})
	f(durations)
	for k, kind := range routeKinds {
		m.proxyTime[k] = durations.WithLabelValues(kind)
		for c, class := range statusClasses {
			m.proxy[k][c] = requests.WithLabelValues(kind, class)
		}
	}
	m.creates = counterVec(f, "sandgate_sandbox_creates_total", "Backend creates, by result.", "result", createResults)
	m.destroys = counterVec(f, "sandgate_sandbox_destroys_total",
		"Sandboxes destroyed by this replica, by reason: idle (reaper), evicted (capacity), client, provisioner_api, interrupted (a destroy another replica left half done).",
		"reason", destroyReasons)
	m.evictions = counter(f, "sandgate_sandbox_evictions_total", "Warm sandboxes evicted to make room under max_sandboxes.")
	m.adoptions = counterVec(f, "sandgate_sandbox_adoptions_total",
		"Running sandboxes without a record taken into the pool, by source: acquire (discover) or reconciler.", "source", adoptSources)
	m.claims = counterVec(f, "sandgate_reaper_claims_total",
		"Sandboxes the idle reaper claimed for destruction, by reason: idle_active (untouched) or idle_warm (released too long ago).",
		"reason", claimReasons)
	m.reconciled = counterVec(f, "sandgate_reconciler_actions_total",
		"What reconciler passes did, by action.", "action", reconcileActs)
	m.dialRetries = counter(f, "sandgate_upstream_dial_retries_total",
		"Requests retried after a dial-class failure to a sandbox (the sandbox is re-acquired, maybe recreated).")
	m.redisErrors = counter(f, "sandgate_redis_errors_total",
		"Redis commands and pipelines that failed (not counting nil replies or a client that went away).")
	egress := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandgate_egress_requests_total",
		Help: "Egress proxy requests and tunnels, by decision (allow | deny) and reason (ok when allowed).",
	}, []string{"decision", "reason"})
	f(egress)
	m.egressAllow = egress.WithLabelValues("allow", "ok")
	for i, r := range egressDenials {
		m.egressDeny[i] = egress.WithLabelValues("deny", r)
	}
	return m
}

func counter(register func(prometheus.Collector), name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	register(c)
	return c
}

func counterVec(register func(prometheus.Collector), name, help, label string, values []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	register(c)
	for _, v := range values {
		c.WithLabelValues(v)
	}
	return c
}

// Handler serves the Prometheus exposition. A collector that fails (Redis
// down for the pool gauges) leaves its series out; the rest is served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is where the metrics live (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Acquired records one acquire. outcome is hit, warm, cold or adopted;
// anything else counts as error.
func (m *Metrics) Acquired(outcome string, took time.Duration) {
	if m == nil {
		return
	}
	i := len(outcomes) - 1
	switch outcome {
	case "hit":
		i = 0
	case "warm":
		i = 1
	case "cold":
		i = 2
	case "adopted":
		i = 3
	case "prewarm":
		i = 4
	case "thawed":
		i = 5
	}
	m.acquire[i].Observe(took.Seconds())
}

// Proxied records one data-plane request.
func (m *Metrics) Proxied(kind RouteKind, status int, took time.Duration) {
	if m == nil {
		return
	}
	class := status / 100
	if class < 1 || class > 5 {
		class = 0
	}
	m.proxy[kind][class].Inc()
	m.proxyTime[kind].Observe(took.Seconds())
}

// Created counts a backend create.
func (m *Metrics) Created(ok bool) {
	if m == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "error"
	}
	m.creates.WithLabelValues(result).Inc()
}

// Destroyed counts a destroy; reason is one of the destroy reasons.
func (m *Metrics) Destroyed(reason string) {
	if m != nil {
		m.destroys.WithLabelValues(reason).Inc()
	}
}

// Evicted counts a capacity eviction.
func (m *Metrics) Evicted() {
	if m != nil {
		m.evictions.Inc()
	}
}

// Adopted counts an adoption from source (acquire | reconciler).
func (m *Metrics) Adopted(source string) {
	if m != nil {
		m.adoptions.WithLabelValues(source).Inc()
	}
}

// ReaperClaimed counts a reaper claim (idle_active | idle_warm).
func (m *Metrics) ReaperClaimed(reason string) {
	if m != nil {
		m.claims.WithLabelValues(reason).Inc()
	}
}

// Reconciled adds one pass's counts.
func (m *Metrics) Reconciled(adopted, dropped, finished, skipped int) {
	if m == nil {
		return
	}
	for i, n := range []int{adopted, dropped, finished, skipped} {
		if n > 0 {
			m.reconciled.WithLabelValues(reconcileActs[i]).Add(float64(n))
		}
	}
}

// DialRetried counts a retry after a dial failure.
func (m *Metrics) DialRetried() {
	if m != nil {
		m.dialRetries.Inc()
	}
}

// RedisError counts a failed Redis call.
func (m *Metrics) RedisError() {
	if m != nil {
		m.redisErrors.Inc()
	}
}

// EgressDecision counts one egress proxy request or tunnel (egress.Recorder).
func (m *Metrics) EgressDecision(allowed bool, reason string) {
	if m == nil {
		return
	}
	if allowed {
		m.egressAllow.Inc()
		return
	}
	i := slices.Index(egressDenials[:], reason)
	if i < 0 {
		i = len(egressDenials) - 1
	}
	m.egressDeny[i].Inc()
}

// PoolCounts are the fleet-wide pool sizes.
type PoolCounts struct{ Active, Warm, Creating, Prewarm int64 }

// WatchPool exports sandgate_sandboxes{state}, read with count at scrape
// time (one Redis round trip per scrape, none per request). Every replica
// reports the same fleet-wide figure: aggregate with max(), not sum().
func (m *Metrics) WatchPool(count func(context.Context) (PoolCounts, error)) {
	m.reg.MustRegister(&poolCollector{count: count, desc: prometheus.NewDesc("sandgate_sandboxes",
		"Sandboxes in the fleet-wide pool by state (active, warm, creating, prewarm), read from Redis at scrape time; the same on every replica: use max() across replicas.",
		[]string{"state"}, nil)})
}

type poolCollector struct {
	desc  *prometheus.Desc
	count func(context.Context) (PoolCounts, error)
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, s := range []struct {
		state string
		n     int64
	}{{"active", n.Active}, {"warm", n.Warm}, {"creating", n.Creating}, {"prewarm", n.Prewarm}} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.n), s.state)
	}
}
