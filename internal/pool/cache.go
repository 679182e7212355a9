package pool

import (
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
)

type threadKey struct{ user, thread string }

// cache is the replica-local route table. Lookups take a read lock and do
// not allocate: the key is a struct of the caller's strings.
type cache struct {
	mu       sync.RWMutex
	byThread map[threadKey]*Route
	bySID    map[string]*Route
	byCap    map[state.CapabilitySum]*CapRoute
}

func newCache() *cache {
	return &cache{byThread: make(map[threadKey]*Route), bySID: make(map[string]*Route),
		byCap: make(map[state.CapabilitySum]*CapRoute)}
}

// thread returns the live route of (user, thread), or nil.
func (c *cache) thread(user, thread string, now time.Time) *Route {
	c.mu.RLock()
	r := c.byThread[threadKey{user, thread}]
	c.mu.RUnlock()
	if r == nil || now.UnixNano() > r.expires.Load() {
		return nil
	}
	return r
}

// sandbox returns the live route of sid, or nil.
func (c *cache) sandbox(sid string, now time.Time) *Route {
	c.mu.RLock()
	r := c.bySID[sid]
	c.mu.RUnlock()
	if r == nil || now.UnixNano() > r.expires.Load() {
		return nil
	}
	return r
}

// sandboxBytes is sandbox for an id the caller holds as bytes (a
// preview link's): the map look-up converts without allocating.
func (c *cache) sandboxBytes(sid []byte, now time.Time) *Route {
	c.mu.RLock()
	r := c.bySID[string(sid)]
	c.mu.RUnlock()
	if r == nil || now.UnixNano() > r.expires.Load() {
		return nil
	}
	return r
}

// capability returns the live route a capability opens, or nil. The key is
// the capability's SHA-256: the map's timing says nothing about the secret.
func (c *cache) capability(sum state.CapabilitySum, now time.Time) *CapRoute {
	c.mu.RLock()
	cr := c.byCap[sum]
	c.mu.RUnlock()
	if cr == nil || now.UnixNano() > cr.expires.Load() || cr.gone.Load() {
		return nil
	}
	return cr
}

// putCapability caches that sum opens r (a cached route); the entry goes
// when r does.
func (c *cache) putCapability(sum state.CapabilitySum, r *Route) *CapRoute {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cr := r.capRoute; cr != nil && cr.sum == sum {
		return cr
	}
	cr := &CapRoute{Route: r, sum: sum, caller: []string{sandboxspec.CallerCapability + ":" + r.User}}
	if r.gone.Load() { // dropped meanwhile: serve this request, cache nothing
		return cr
	}
	if r.capRoute != nil {
		delete(c.byCap, r.capRoute.sum)
	}
	r.capRoute = cr
	c.byCap[sum] = cr
	return cr
}

// peek returns the route of sid even if expired (in-flight checks).
func (c *cache) peek(sid string) *Route {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.bySID[sid]
}

// put installs r, retiring a route of another incarnation for the same sandbox.
// A route of the same incarnation is kept (its connection pool is warm) and
// only gets a new expiry.
func (c *cache) put(r *Route, expires time.Time) *Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.bySID[r.SandboxID]; old != nil {
		if old.Incarnation == r.Incarnation && !old.gone.Load() {
			old.expires.Store(expires.UnixNano())
			return old
		}
		c.removeLocked(old)
	}
	r.expires.Store(expires.UnixNano())
	c.bySID[r.SandboxID] = r
	c.byThread[threadKey{r.User, r.Thread}] = r
	return r
}

// drop removes sid's route if it is still r (or any route when r is nil).
func (c *cache) drop(sid string, r *Route) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.bySID[sid]; cur != nil && (r == nil || cur == r) {
		c.removeLocked(cur)
	}
}

// dropIncarnation removes sid's route if it leads to that incarnation.
func (c *cache) dropIncarnation(sid, incarnation string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.bySID[sid]; cur != nil && cur.Incarnation == incarnation {
		c.removeLocked(cur)
	}
}

func (c *cache) removeLocked(r *Route) {
	delete(c.bySID, r.SandboxID)
	if r.capRoute != nil {
		delete(c.byCap, r.capRoute.sum)
		r.capRoute = nil
	}
	if c.byThread[threadKey{r.User, r.Thread}] == r {
		delete(c.byThread, threadKey{r.User, r.Thread})
	}
	r.retire()
}

// each calls f for every cached route under the read lock.
func (c *cache) each(f func(*Route)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, r := range c.bySID {
		f(r)
	}
}

// serving: a request to sid is in flight on this replica (the toucher
// renews its activity every touch_interval meanwhile).
func (c *cache) serving(sid string) bool {
	r := c.peek(sid)
	return r != nil && r.InFlight() > 0
}
