package proxy

import (
	"bufio"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// upgrades tracks hijacked (WebSocket) connections: it caps how many are
// open, closes one that is idle or too old, and lets a draining gateway close
// them all (http.Server.Shutdown leaves hijacked connections alone). Request
// timeouts never apply to them.
type upgrades struct {
	max      int64         // <= 0: no cap
	idle     time.Duration // <= 0: never
	lifetime time.Duration // <= 0: never
	log      *slog.Logger

	active atomic.Int64 // upgrade requests being proxied, open connections included

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newUpgrades(max int, idle, lifetime time.Duration, log *slog.Logger) *upgrades {
	return &upgrades{max: int64(max), idle: idle, lifetime: lifetime, log: log, conns: make(map[net.Conn]struct{})}
}

// admit takes a slot for an upgrade request; false past the cap.
func (u *upgrades) admit() bool {
	if n := u.active.Add(1); u.max > 0 && n > u.max {
		u.active.Add(-1)
		return false
	}
	return true
}

// leave gives back admit's slot once the request (and its connection) ended.
func (u *upgrades) leave() { u.active.Add(-1) }

func (u *upgrades) track(w http.ResponseWriter) http.ResponseWriter {
	return &hijackTracker{ResponseWriter: w, u: u}
}

func (u *upgrades) closeAll() int {
	u.mu.Lock()
	conns := make([]net.Conn, 0, len(u.conns))
	for c := range u.conns {
		conns = append(conns, c)
	}
	u.mu.Unlock()
	for _, c := range conns { // Close takes u.mu to untrack itself
		_ = c.Close()
	}
	return len(conns)
}

func (u *upgrades) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.conns)
}

type hijackTracker struct {
	http.ResponseWriter
	u *upgrades
}

func (h *hijackTracker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h *hijackTracker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	tc := &trackedConn{Conn: conn, u: h.u}
	tc.last.Store(time.Now().UnixNano())
	// Timers are made stopped and armed once the connection is tracked, so
	// no callback or Close sees a field still unset.
	if h.u.idle > 0 {
		tc.idle = time.AfterFunc(math.MaxInt64, tc.checkIdle)
	}
	if h.u.lifetime > 0 {
		tc.life = time.AfterFunc(math.MaxInt64, func() { tc.expire("max lifetime reached") })
	}
	h.u.mu.Lock()
	h.u.conns[tc] = struct{}{}
	h.u.mu.Unlock()
	if tc.idle != nil {
		tc.idle.Reset(h.u.idle)
	}
	if tc.life != nil {
		tc.life.Reset(h.u.lifetime)
	}
	return tc, rw, nil
}

// trackedConn is the client side of an upgraded connection. Closing it ends
// both directions: the ReverseProxy's copy loop then closes the sandbox side.
type trackedConn struct {
	net.Conn
	u          *upgrades
	last       atomic.Int64 // unix nanos of the last byte either way
	idle, life *time.Timer
	once       sync.Once
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.idle != nil {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 && c.idle != nil {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// checkIdle closes the connection when it has been quiet for the idle
// timeout, else re-arms for the rest of it.
func (c *trackedConn) checkIdle() {
	quiet := time.Since(time.Unix(0, c.last.Load()))
	if quiet >= c.u.idle {
		c.expire("idle timeout")
		return
	}
	c.idle.Reset(c.u.idle - quiet)
}

func (c *trackedConn) expire(why string) {
	c.u.log.Info("closing upgraded connection", "reason", why, "remote", c.RemoteAddr().String())
	_ = c.Close()
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.u.mu.Lock()
		delete(c.u.conns, c)
		c.u.mu.Unlock()
		if c.idle != nil {
			c.idle.Stop()
		}
		if c.life != nil {
			c.life.Stop()
		}
	})
	return c.Conn.Close()
}
