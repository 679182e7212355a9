// Package serve is the gateway's HTTP/1.1 server: one goroutine per
// connection that reads a request head, runs the handler and writes the
// response, with no goroutine and as few syscalls as it can per request.
//
// net/http's server spends, per request on a keep-alive connection, a
// background-read goroutine (to notice a client that hangs up), a head
// write and a body write when the body outgrows its buffer, and several
// allocations for its connection state; at the gateway's small proxied
// requests these made its CPU per request twice nginx's (bench
// proxy-throughput, docs/BENCHMARKS.md). Here a response whose body fits
// the buffer leaves in one write(2) at the end of the handler, a hang-up is
// watched for only once a handler has run for hangupAfter, and the
// connection's buffers and response state are reused from request to
// request. It serves what the gateway needs of HTTP/1.1 (keep-alive and
// pipelining, Content-Length and chunked bodies both ways, Expect:
// 100-continue, http.Flusher, http.Hijacker and the deadlines of
// http.ResponseController) and refuses, with a status and a closed
// connection, any head two parsers could read differently.
package serve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.1 on listeners.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request head; IdleTimeout the wait
	// for the next request on a keep-alive connection (ReadHeaderTimeout
	// when zero).
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// BodyTimeout bounds reading a request body, from the end of its head:
	// a client that stalls there would otherwise hold its connection (and a
	// descriptor) for ever. A handler that streams a body may move the
	// read deadline itself (http.ResponseController), as the proxy does to
	// cut only a body that stops making progress. 0 = no bound.
	BodyTimeout time.Duration
	// MaxHeaderBytes bounds a request head (net/http's 1 MiB when zero;
	// like net/http, 4 KiB of slack on top); a larger one gets 431.
	MaxHeaderBytes int
	Log            *slog.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	shutdown  atomic.Bool
}

// DefaultBodyTimeout is the gateway's documented Server.BodyTimeout: the
// bodies it reads itself are small forms and JSON.
const DefaultBodyTimeout = 30 * time.Second

// ErrServerClosed is what Serve returns after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

// Serve accepts connections on l until it fails or the server shuts down.
func (s *Server) Serve(l net.Listener) error {
	if !s.track(l) {
		_ = l.Close()
		return ErrServerClosed
	}
	defer s.untrack(l)
	base := context.WithValue(context.Background(), http.LocalAddrContextKey, l.Addr())
	var delay time.Duration
	for {
		rwc, err := l.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return ErrServerClosed
			}
			// EMFILE and the like: wait and retry, as net/http does.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, rwc, base)
		if !s.add(c) {
			_ = rwc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

// Shutdown stops accepting, closes idle connections and waits for the
// others to finish their request, until ctx ends (then its error). Like
// net/http's, it leaves hijacked connections alone.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	s.closeListeners()
	tick := time.Millisecond
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tick):
		}
		tick = min(2*tick, 500*time.Millisecond)
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.shutdown.Store(true)
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.rwc.Close()
		delete(s.conns, c)
	}
	return nil
}

func (s *Server) track(l net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *Server) untrack(l net.Listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.listeners {
		_ = l.Close()
		delete(s.listeners, l)
	}
}

func (s *Server) add(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			_ = c.rwc.Close()
			delete(s.conns, c)
		}
	}
	return len(s.conns) == 0
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}
