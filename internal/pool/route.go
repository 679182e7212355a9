package pool

import (
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Route is a replica's cached handle on one sandbox incarnation: where to send
// requests, with which connection pool, and whether it was used since the
// last touch flush. The request hot path only does atomic operations on it.
type Route struct {
	SandboxID   string
	User        string
	Thread      string
	Incarnation string
	Backend     string
	Template    string
	CreatedAt   time.Time
	url         *url.URL
	transport   http.RoundTripper
	// key is the X-Aio-Api-Key header value of this incarnation's own
	// secret, built once so the proxy sets it without allocating; nil =
	// the sandbox has none (the shared key applies).
	key []string
	// portHost is state.Record.PortHost: "" = ports through the bridge.
	portHost string

	expires  atomic.Int64 // unix nanos after which Redis is consulted again
	touched  atomic.Bool
	inflight atomic.Int32
	gone     atomic.Bool
	closeOne sync.Once
	capRoute *CapRoute    // its capability's cache entry; guarded by the cache's lock
	preview  PreviewRoute // itself, as preview links reach it (newRoute sets it)
}

// BaseURL is the sandbox's scheme://host[:port].
func (r *Route) BaseURL() *url.URL { return r.url }

// RoundTripper is the connection pool of this incarnation only, so a
// replacement sandbox never receives a connection meant for the old one.
func (r *Route) RoundTripper() http.RoundTripper { return r.transport }

// SandboxKey is the header value carrying this incarnation's secret, or nil.
// The slice is shared by every request and must not be modified.
func (r *Route) SandboxKey() []string { return r.key }

// PortHost is where the sandbox's ports are dialled directly; "" = through
// its server's bridge.
func (r *Route) PortHost() string { return r.portHost }

// Begin marks a request in flight: the sandbox keeps being touched until End,
// so a 20-minute command is never reaped as idle.
func (r *Route) Begin() {
	r.inflight.Add(1)
	r.touch()
}

// End undoes Begin.
func (r *Route) End() {
	r.inflight.Add(-1)
	r.touch()
}

// touch marks r used since the toucher's last flush. Reading first keeps
// the line unwritten while it is already marked: the flag is set on every
// request, by whichever core serves it, and cleared once per flush.
func (r *Route) touch() {
	if !r.touched.Load() {
		r.touched.Store(true)
	}
}

// InFlight is the number of requests currently proxied to this route.
func (r *Route) InFlight() int32 { return r.inflight.Load() }

// retire drops the route's idle connections; requests in flight finish.
func (r *Route) retire() {
	r.gone.Store(true)
	r.closeOne.Do(func() {
		if c, ok := r.transport.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	})
}

// CapRoute is a route reached through a capability URL. It is its own type
// so that a dial failure re-resolves the capability (RecheckCapability),
// never the thread: a capability never provisions, and dies with its
// incarnation.
type CapRoute struct {
	*Route
	sum state.CapabilitySum
	// caller is the sandboxspec.CallerHeader value of its requests, built
	// once with the entry (the header's slices are shared, never modified).
	caller []string
}

// Caller is who the capability's requests are for, in the sandbox's
// command log: the capability of the route's user.
func (c *CapRoute) Caller() []string { return c.caller }

// Identity is whose sandbox incarnation a route reaches: what the router
// logs, checks quotas against and shows on the control plane.
type Identity struct {
	SandboxID   string
	User        string
	Thread      string
	Incarnation string
	Backend     string
	Template    string
	CreatedAt   time.Time
}

// Identity returns the route's identity by value (no allocation).
func (r *Route) Identity() Identity {
	return Identity{SandboxID: r.SandboxID, User: r.User, Thread: r.Thread, Incarnation: r.Incarnation,
		Backend: r.Backend, Template: r.Template, CreatedAt: r.CreatedAt}
}

// SpanAttributes describes the route on the proxy's spans.
func (r *Route) SpanAttributes() []attribute.KeyValue {
	return telemetry.SandboxAttrs(r.SandboxID, r.Thread, r.Backend)
}
