// Package router is the gateway's HTTP surface on echo: the data plane
// (/threads/{thread}/v1/..., /sandboxes/{id}/v1/...), the control plane
// (/threads/{thread}/sandbox, DeerFlow's provisioner API), health, and the
// error table every failure goes through.
package router

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/checkpoint"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/telemetry"
	"github.com/sandgate/sandgate/internal/usage"
)

// Router serves the gateway's HTTP API.
type Router struct {
	version, revision string // the build, on /healthz
	echo              *echo.Echo
	pool              Pool
	aliases           Aliases
	proxy             *proxy.Proxy
	ready             []Pinger
	public            string
	log               *slog.Logger
	metrics           *telemetry.Metrics
	auth              Authenticator
	limits            *Limits
	hostSuffix        string
	hostChain         echo.HandlerFunc
	// previewSuffix and sandboxOrigin are where preview links are served
	// ("" and nil: the path form on the gateway's origin; preview.go).
	previewSuffix string
	previewHost   string // "{link}.{preview_suffix}": the Host middleware sees
	sandboxOrigin *url.URL
	previewChain  echo.HandlerFunc
	hosts         *hostCheck // nil: every Host is served (auth on, or allowed_hosts *)
	// capabilityChain serves /c/{capability}/v1/... (see capability.go).
	capabilityChain echo.HandlerFunc
	draining        atomic.Bool
	mounts          []MountPoint
	meter           Meter // nil: no thread data here
	bodyIdle        time.Duration
	admin           Admin       // nil: no logs, stats or prune
	checkpoints     Checkpoints // nil: no checkpoints or forks
	holder          Holder      // nil: no freeze on demand
	sampler         MetricsSampler
	webhooks        Webhooks
	events          *events.Bus // nil: no lifecycle events here
	streams         *sseStreams // the open event streams, ended on drain
	progress        *streamCap  // the provisioning-progress streams, shared between users
}

// writeError answers err (errors.go).
func (rt *Router) writeError(w http.ResponseWriter, r *http.Request, err error) {
	writeError(rt.log, w, r, err)
}

// Drain makes /readyz fail so load balancers stop sending new requests,
// and ends the open event streams (their clients reconnect elsewhere).
func (rt *Router) Drain() {
	rt.draining.Store(true)
	rt.streams.drain()
}

// CloseUpgraded closes every proxied WebSocket (on shutdown).
func (rt *Router) CloseUpgraded() int { return rt.proxy.CloseUpgraded() }

// What the router needs of the rest of the gateway (its Deps, routes.go),
// besides the pool (sandbox.go).

// Pinger checks a dependency for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// MountPoint is a path every sandbox has mounted, from the configuration.
type MountPoint struct {
	Path     string // container (virtual) path
	ReadOnly bool
}

// Authenticator turns a request's credential into its principal.
type Authenticator interface {
	// Authenticate reads the bearer credential, or X-API-Key when
	// apiKeyHeader; errors wrap auth.ErrUnauthenticated.
	Authenticate(r *http.Request, apiKeyHeader bool) (*auth.Principal, error)
}

// Aliases stores the sandbox ids provisioner clients choose, per user (the
// principal who chose them): one user's alias never names, shadows or
// reveals another user's sandbox.
type Aliases interface {
	SetAlias(ctx context.Context, user, alias, sid string) error
	Alias(ctx context.Context, user, alias string) (string, bool, error)
	DeleteAlias(ctx context.Context, user, alias string) error
	AliasesBySandbox(ctx context.Context, user string) (map[string]string, error)
	// SetEgress stores an admin's egress policy for a sandbox and says
	// whether it changed.
	SetEgress(ctx context.Context, sid string, e backend.Egress) (bool, error)
}

// Meter measures the thread data a backend keeps on the gateway host
// (internal/usage.Meter).
type Meter interface {
	// Measure is the thread's usage, from a cache fresh for a few seconds
	// or from a walk shared with concurrent callers.
	Measure(ctx context.Context, user, thread string) (usage.Usage, error)
	// Cached never walks: the last measurement, if any (a missing or stale
	// one is refreshed in the background).
	Cached(user, thread string) (usage.Usage, bool)
	// Quota is thread_data_quota in bytes; 0 = none.
	Quota() int64
	// Remove deletes the thread's data (threads rm); false: there was none.
	Remove(ctx context.Context, user, thread string) (bool, error)
}

// Checkpoints keeps threads' workspace checkpoints on the gateway host
// (checkpoint.Threads); nil = the backend keeps thread data where the
// gateway cannot reach it, and the checkpoint and fork routes answer 501.
type Checkpoints interface {
	Method() checkpoint.Method
	Create(ctx context.Context, user, thread, label string, hold checkpoint.Hold) (api.Checkpoint, error)
	List(ctx context.Context, user, thread string) ([]api.Checkpoint, error)
	Get(ctx context.Context, user, thread, id string) (api.Checkpoint, error)
	Delete(ctx context.Context, user, thread, id string) error
	Restore(ctx context.Context, user, thread, id string, hold checkpoint.Hold) error
	Fork(ctx context.Context, user, from, to, id string, holdFrom, holdTo checkpoint.Hold) error
	RemoveThread(ctx context.Context, user, thread string) (bool, error)
	// Unfork removes a fork's thread data again when its sandbox was refused.
	Unfork(ctx context.Context, user, thread string) error
}

// Holder stops a thread's sandbox around work on its files, and freezes it
// on demand (pool.Holder).
type Holder interface {
	Hold(ctx context.Context, user, thread string, force bool, fn func() error) error
	FreezeThread(ctx context.Context, user, thread string) error
}

// Admin is what the operator API needs of the pool beyond Pool.
type Admin interface {
	Fleet() string
	Logs(ctx context.Context, sid string, opts backend.LogOptions) (io.ReadCloser, error)
	Stats(ctx context.Context, sid string) (backend.Stats, error)
	CanStat() bool
	Commands(ctx context.Context, sid string, limit int) (sandboxspec.CommandLog, error)
	Prune(ctx context.Context, dryRun bool) (api.PruneReport, error)
}
