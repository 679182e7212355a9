package egress

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// Traffic is the bytes one sandbox moved through the proxy since its
// socket opened (or its first authenticated request): Sent is what it
// sent (request lines, headers, bodies, tunnelled bytes up), Received what
// it got back (answers, refusals, tunnelled bytes down). The proxy's own
// upstream traffic is the same payload with other headers.
type Traffic struct{ Sent, Received int64 }

// traffic counts one sandbox's bytes: its connections add to it as they
// read and write, with an atomic add and nothing else.
type traffic struct {
	sent, received atomic.Int64
	// seen is when an authenticated request last named it (unix seconds),
	// for trafficSweepAt; 0 for a socket's, which Close removes.
	seen atomic.Int64
}

const (
	// trafficSweepAt is the count of sandboxes with counters past which
	// the authenticated ones not seen for trafficIdle are dropped: those
	// sandboxes have no socket whose Close would drop them.
	trafficSweepAt = 4096
	trafficIdle    = time.Hour
)

// Traffic is sandboxID's bytes through the proxy; false when the proxy
// serves it nothing (no socket open, no authenticated request seen).
func (p *Proxy) Traffic(sandboxID string) (Traffic, bool) {
	p.mu.Lock()
	t := p.traffic[sandboxID]
	p.mu.Unlock()
	if t == nil {
		return Traffic{}, false
	}
	return Traffic{Sent: t.sent.Load(), Received: t.received.Load()}, true
}

// trafficOf is sandboxID's counters, made on first use; p.mu held.
func (p *Proxy) trafficOf(sandboxID string) *traffic {
	t := p.traffic[sandboxID]
	if t == nil {
		if len(p.traffic) >= trafficSweepAt {
			idle := time.Now().Add(-trafficIdle).Unix()
			for sid, o := range p.traffic {
				if s := o.seen.Load(); s != 0 && s < idle {
					delete(p.traffic, sid)
				}
			}
		}
		t = &traffic{}
		p.traffic[sandboxID] = t
	}
	return t
}

// countAuthed points the connection of an authenticated request of
// sandboxID at that sandbox's counters, with what the connection read
// before (the first request's headers). One connection may carry requests
// naming different sandboxes; a later request's headers, read before its
// credential is checked, count to the one its previous request named (a
// pod's client sends its own credential on each).
func (p *Proxy) countAuthed(ctx context.Context, sandboxID string) {
	c, ok := ctx.Value(connKey{}).(*countedConn)
	if !ok {
		return
	}
	p.mu.Lock()
	t := p.trafficOf(sandboxID)
	p.mu.Unlock()
	t.seen.Store(time.Now().Unix())
	if c.to.Swap(t) == nil {
		t.sent.Add(c.unclaimed.Swap(0))
	}
}

// connKey carries a request's *countedConn (http.Server.ConnContext).
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// countingListener makes each accepted connection count its bytes: to
// fixed (a sandbox's socket) from the start, or to whichever sandbox its
// requests authenticate as (nil: ServeAuth).
type countingListener struct {
	net.Listener
	fixed *traffic
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: c}
	if l.fixed != nil {
		cc.to.Store(l.fixed)
	}
	return cc, nil
}

// countedConn counts what a sandbox's connection to the proxy reads (the
// sandbox sent it) and writes (it received). A CONNECT tunnel hijacks this
// same connection, so its bytes count as they move, not when it ends.
type countedConn struct {
	net.Conn
	to atomic.Pointer[traffic]
	// unclaimed is what was read before to was set (ServeAuth).
	unclaimed atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		if t := c.to.Load(); t != nil {
			t.sent.Add(int64(n))
		} else {
			c.unclaimed.Add(int64(n))
		}
	}
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if t := c.to.Load(); t != nil && n > 0 {
		t.received.Add(int64(n))
	}
	return n, err
}

// CloseWrite half-closes where the connection can (a Unix or TCP one), so
// a tunnel's pipe still ends one direction at a time.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
