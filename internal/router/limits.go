package router

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/auth"
)

// Requests in flight are counted in each replica's memory: N replicas
// behind a load balancer let a user up to N times the limit. That is the
// trade: the limit keeps one runaway client from exhausting a replica (its
// sockets, its goroutines), which is a per-replica resource anyway, and a
// fleet-wide count would cost a Redis round trip on every proxied request.
// The create rate is a fleet resource and is counted fleet-wide, in Redis
// (statedb.CreateRate), on real creates only.

// Rate is N events per Per, as a token bucket holding up to N.
type Rate struct {
	N   int
	Per time.Duration
}

// ParseRate reads "N/duration" ("60/1m", "5/s"); "0" is no limit (N < 0).
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return Rate{N: -1}, nil
	}
	n, per, ok := strings.Cut(s, "/")
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err != nil || count <= 0 {
		return Rate{}, fmt.Errorf("%q is not N/duration (e.g. 60/1m) or 0", s)
	}
	per = strings.TrimSpace(per)
	if per != "" && (per[0] < '0' || per[0] > '9') {
		per = "1" + per // "5/s"
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return Rate{}, fmt.Errorf("%q is not N/duration (e.g. 60/1m) or 0", s)
	}
	return Rate{N: count, Per: d}, nil
}

func (r Rate) String() string {
	if r.N < 0 {
		return "0"
	}
	return strconv.Itoa(r.N) + "/" + r.Per.String()
}

// LimitsConfig are the per-user limits. The zero value is the documented
// default.
type LimitsConfig struct {
	// MaxRequests caps one user's requests in flight, WebSockets included
	// (429 + Retry-After past it). Admin principals are not limited.
	// 0 = 256; negative = no cap.
	MaxRequests int
	// CreateRate bounds how many sandboxes are created for one user across
	// the fleet: bursts of CreateRate.N, refilled over CreateRate.Per. Only
	// real creates count; admins are exempt. Zero = 60/1m; negative N = no
	// limit. Enforced by the pool (statedb.CreateRate), not by Limits.
	CreateRate Rate
	// Streams shares each replica's event streams (status page,
	// provisioning progress) between users, with a reserve for admins.
	Streams StreamCaps
}

// EffectiveCreateRate is CreateRate with its default applied; N < 0 means
// no limit.
func (c LimitsConfig) EffectiveCreateRate() Rate {
	if c.CreateRate == (Rate{}) {
		return DefaultCreateRate
	}
	return c.CreateRate
}

// Defaults of LimitsConfig.
const DefaultMaxRequestsPerUser = 256

// DefaultCreateRate is the per-user, fleet-wide sandbox create rate.
var DefaultCreateRate = Rate{N: 60, Per: time.Minute}

// maxTrackedUsers bounds the per-user state; idle users are evicted first.
const maxTrackedUsers = 1 << 16

// Limits holds one replica's per-user requests in flight. Idle users are
// evicted, so memory stays bounded.
type Limits struct {
	maxRequests int32
	idleAfter   time.Duration
	now         func() time.Time

	mu    sync.RWMutex
	users map[string]*userState
}

type userState struct {
	inflight atomic.Int32
	seen     atomic.Int64 // unix nanos
}

// NewLimits returns the limits of cfg.
func NewLimits(cfg LimitsConfig) *Limits {
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequestsPerUser
	}
	return &Limits{maxRequests: int32(min(cfg.MaxRequests, math.MaxInt32)), idleAfter: 10 * time.Minute,
		now: time.Now, users: map[string]*userState{}}
}

// begin counts a request of p in flight; end undoes it. Nothing is
// allocated once the user is known.
func (l *Limits) begin(p *auth.Principal) (*userState, error) {
	if p.Has(auth.ScopeAdmin) {
		return nil, nil
	}
	return l.beginUser(p.User)
}

// beginUser counts a request of user in flight (a capability URL's request
// counts against its sandbox's owner).
func (l *Limits) beginUser(user string) (*userState, error) {
	if l == nil || l.maxRequests <= 0 {
		return nil, nil
	}
	st := l.state(user)
	if st.inflight.Add(1) > l.maxRequests {
		st.inflight.Add(-1)
		return nil, errTooManyRequests
	}
	return st, nil
}

func (l *Limits) end(st *userState) {
	if st != nil {
		st.seen.Store(l.now().UnixNano())
		st.inflight.Add(-1)
	}
}

func (l *Limits) state(user string) *userState {
	now := l.now().UnixNano()
	l.mu.RLock()
	st := l.users[user]
	l.mu.RUnlock()
	if st != nil {
		st.seen.Store(now)
		return st
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st = l.users[user]; st == nil {
		if len(l.users) >= maxTrackedUsers {
			l.evictLocked(now)
		}
		st = &userState{}
		l.users[user] = st
	}
	st.seen.Store(now)
	return st
}

// evictLocked forgets users with nothing in flight: first those idle for
// idleAfter, then, if that freed too little, any (forgetting one loses nothing).
func (l *Limits) evictLocked(now int64) {
	cutoff := now - l.idleAfter.Nanoseconds()
	for u, st := range l.users {
		if st.inflight.Load() == 0 && st.seen.Load() < cutoff {
			delete(l.users, u)
		}
	}
	for u, st := range l.users {
		if len(l.users) < maxTrackedUsers*3/4 {
			return
		}
		if st.inflight.Load() == 0 {
			delete(l.users, u)
		}
	}
}
