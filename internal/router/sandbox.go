package router

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/state"
)

// Sandbox is one sandbox incarnation as the router sees it: the proxy's
// upstream (address, connection pool, secret, in-flight mark) and whose it
// is. The pool's are *pool.Route and *pool.CapRoute; being an interface, a
// test can hand the router a sandbox of its own and exercise the success
// path. Every method is called per request and must not allocate.
type Sandbox interface {
	proxy.Upstream
	Identity() pool.Identity
	// SpanAttributes are only read for a sampled trace.
	SpanAttributes() []attribute.KeyValue
}

// Routes is what the data plane needs of the pool: a sandbox to send a
// request to, and another one when it stopped answering.
type Routes interface {
	// Acquire returns (user, thread)'s sandbox, creating it if needed.
	Acquire(ctx context.Context, user, thread string) (Sandbox, pool.Outcome, error)
	// Route returns an existing sandbox by id, if who owns it; never creates.
	Route(ctx context.Context, sid string, who pool.Owner) (Sandbox, pool.Outcome, error)
	// CapabilityRoute returns the one incarnation a capability opens.
	CapabilityRoute(ctx context.Context, capability string) (Sandbox, pool.Outcome, error)
	// PreviewRoute returns the one incarnation a preview link opens, and
	// the port it opens there (its decimal form, as the proxy takes it).
	PreviewRoute(ctx context.Context, link string) (Sandbox, string, pool.Outcome, error)
	// Reacquire replaces failed, a sandbox from this Routes, after a
	// dial-class failure: its cached route goes and the sandbox is looked
	// up again with its liveness verified. A thread's sandbox is recreated
	// if dead; a capability's never is (the same incarnation or
	// pool.ErrNotFound).
	Reacquire(ctx context.Context, failed Sandbox) (Sandbox, error)
}

// Pool is what the router needs of the sandbox pool (PoolOf(*pool.Pool)).
type Pool interface {
	Routes
	Record(ctx context.Context, sid string) (state.Record, bool, error)
	Release(ctx context.Context, user, thread string) error
	Destroy(ctx context.Context, sid string, reason pool.DestroyReason) error
	DestroyThread(ctx context.Context, user, thread string, reason pool.DestroyReason) error
	Capability(ctx context.Context, sid string) (string, error)
	// CreatePreview, Previews and RevokePreview: preview links (pool.Pool's).
	CreatePreview(ctx context.Context, id pool.Identity, port int, ttl time.Duration) (string, state.Preview, error)
	Previews(ctx context.Context, id pool.Identity) ([]pool.ListedPreview, error)
	RevokePreview(ctx context.Context, sid, id string) error
	RotatePreviewKey(ctx context.Context) (uint16, time.Time, error)
	Records(ctx context.Context) ([]state.Record, error)
	Alive(ctx context.Context, rec state.Record) (bool, error)
	// Templates, CheckOptions, SetOptions and Options: the create
	// options of threads (pool.Options).
	Templates() ([]pool.Template, string)
	CheckOptions(o pool.Options) error
	SetOptions(ctx context.Context, user, thread string, o pool.Options) error
	Options(ctx context.Context, sid string) (pool.Options, error)
}

// Compile-time checks: the pool's routes are the router's sandboxes.
var (
	_ Sandbox = (*pool.Route)(nil)
	_ Sandbox = (*pool.CapRoute)(nil)
	_ Sandbox = (*pool.PreviewRoute)(nil)
	_ Pool    = pooled{}
)

// PoolOf is the router's view of the pool.
func PoolOf(p *pool.Pool) Pool { return pooled{p} }

// pooled adapts *pool.Pool to Pool: its route methods return the concrete
// routes, and Go has no covariant results. A pointer in an interface is
// not an allocation, and a nil route never becomes a non-nil Sandbox.
type pooled struct{ *pool.Pool }

func (p pooled) Acquire(ctx context.Context, user, thread string) (Sandbox, pool.Outcome, error) {
	r, o, err := p.Pool.Acquire(ctx, user, thread)
	if err != nil {
		return nil, o, err
	}
	return r, o, nil
}

func (p pooled) Route(ctx context.Context, sid string, who pool.Owner) (Sandbox, pool.Outcome, error) {
	r, o, err := p.Pool.Route(ctx, sid, who)
	if err != nil {
		return nil, o, err
	}
	return r, o, nil
}

func (p pooled) CapabilityRoute(ctx context.Context, capability string) (Sandbox, pool.Outcome, error) {
	r, o, err := p.Pool.CapabilityRoute(ctx, capability)
	if err != nil {
		return nil, o, err
	}
	return r, o, nil
}

func (p pooled) PreviewRoute(ctx context.Context, link string) (Sandbox, string, pool.Outcome, error) {
	r, l, o, err := p.Pool.PreviewRoute(ctx, link)
	if err != nil {
		return nil, "", o, err
	}
	return r, l.PortString(), o, nil
}

// Reacquire tells a capability's route from a thread's by its type: only
// this adapter hands them out.
func (p pooled) Reacquire(ctx context.Context, failed Sandbox) (Sandbox, error) {
	switch route := failed.(type) {
	case *pool.CapRoute:
		next, err := p.Pool.RecheckCapability(ctx, route)
		if err != nil {
			return nil, err
		}
		return next, nil
	case *pool.PreviewRoute:
		next, err := p.Pool.RecheckPreview(ctx, route)
		if err != nil {
			return nil, err
		}
		return next, nil
	case *pool.Route:
		next, _, err := p.Pool.Reacquire(ctx, route)
		if err != nil {
			return nil, err
		}
		return next, nil
	}
	return nil, fmt.Errorf("reacquire: %T is not the pool's", failed)
}
