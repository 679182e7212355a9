package router

import (
	"context"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// The status page's configuration and what its files (status.go,
// statussession.go, statusview.go) share.

// StatusSource is what the status page reads of the fleet's state
// (statedb.Store).
type StatusSource interface {
	Overview(ctx context.Context, now time.Time) (state.Overview, error)
	Replicas(ctx context.Context) ([]state.Replica, error)
}

// Status configures the status page at /status (and / for curl); a nil
// Source turns it off.
type Status struct {
	Source StatusSource
	// Sessions keeps browser logins; required with authentication.
	Sessions SessionStore
	// PlainLoopback says the gateway listens on a loopback address without
	// TLS: the one case where the session cookie is not marked Secure (a
	// browser would not send it back over http://127.0.0.1).
	PlainLoopback bool
	// Streams shares the replica's event streams of each kind (the status
	// page's, the provisioning-progress ones) between users.
	Streams StreamCaps
	// MaxSandboxes, HardCap and MaxSandboxesPerUser are the pool's
	// effective quotas, shown against the counts.
	MaxSandboxes        int
	HardCap             bool
	MaxSandboxesPerUser int
	// Heartbeat is the replicas' heartbeat interval: a replica not seen
	// for three is shown as gone.
	Heartbeat time.Duration
}

// SessionStore keeps the status page's sessions (statedb.Store).
type SessionStore interface {
	PutSession(ctx context.Context, sumHex, user string, sealed []byte, ttl time.Duration) error
	Session(ctx context.Context, sumHex string) ([]byte, error)
	DropSession(ctx context.Context, sumHex, user string) error
	DropSessions(ctx context.Context, user string) (int, error)
}

const (
	// statusCookie carries a browser's session id to the status routes,
	// and only to them (its Path): every other route reads the
	// Authorization header.
	statusCookie = "sandgate_status"
	statusPath   = "/status"
	// statusCookieAge bounds a login; a JWT's own expiry still applies.
	statusCookieAge = 8 * time.Hour
	// statusTimeout bounds the Redis reads of one page.
	statusTimeout = 5 * time.Second
)

// statusPage serves the status routes.
type statusPage struct {
	rt      *Router
	cfg     Status
	bus     *events.Bus // nil: no events
	streams *streamCap
}

// stateErr marks a failed read or write of the fleet's state.
func stateErr(err error) error { return fmt.Errorf("%w: %w", pool.ErrState, err) }

// visible reports whether p may see e: an admin every event, anyone else
// those of its own sandboxes.
func visible(p *auth.Principal, e events.Event) bool { return mayManage(p, e.User, e.Thread) }

// mayManage reports whether p may see, and act on from the page, a
// sandbox of (user, thread): an admin any, anyone else its own within its
// thread patterns ("" thread: a create not yet bound to one).
func mayManage(p *auth.Principal, user, thread string) bool {
	if p.Has(auth.ScopeAdmin) {
		return true
	}
	return user == p.User && (thread == "" || p.MayOpen(thread))
}
