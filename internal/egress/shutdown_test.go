package egress

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// slowListener's Accept returns only at its second Close, as a Serve
// still blocked in Accept when Shutdown comes can be; every Close after
// the first fails as a real listener's does (net.ErrClosed).
type slowListener struct {
	net.Listener
	accepting chan struct{}
	released  chan struct{}
	mu        sync.Mutex
	closes    int
}

func (l *slowListener) Accept() (net.Conn, error) {
	close(l.accepting)
	<-l.released
	return nil, &net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}
}

func (l *slowListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closes++
	switch l.closes {
	case 1:
		return nil
	case 2:
		close(l.released)
	}
	return &net.OpError{Op: "close", Net: "tcp", Err: net.ErrClosed}
}

// A server's shutdown closes its listener itself (stop), so the close
// http.Server.Shutdown makes after it finds the listener closed: that is
// no error (CI once failed TestServeAuth on "use of closed network
// connection" from Proxy.Shutdown).
func TestShutdownOfAServerStillInAccept(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln := &slowListener{accepting: make(chan struct{}), released: make(chan struct{})}
	s := p.newServer(ln, nil)
	served := make(chan error, 1)
	go func() { served <- s.http.Serve(s.ln) }()
	<-ln.accepting
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	<-served
}
