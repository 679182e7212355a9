package proxy

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// upgrades tracks hijacked (WebSocket) connections so a draining gateway can
// close them: http.Server.Shutdown leaves hijacked connections alone.
type upgrades struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newUpgrades() *upgrades { return &upgrades{conns: make(map[net.Conn]struct{})} }

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
	h.u.mu.Lock()
	h.u.conns[tc] = struct{}{}
	h.u.mu.Unlock()
	return tc, rw, nil
}

type trackedConn struct {
	net.Conn
	u    *upgrades
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.u.mu.Lock()
		delete(c.u.conns, c)
		c.u.mu.Unlock()
	})
	return c.Conn.Close()
}
