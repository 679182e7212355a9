package testutil

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// Trap is a loopback HTTP server that counts the connections made to it,
// for an address the code under test must never reach: it answers every
// request 200 with a sandbox server's JSON, so reaching it would also look
// like success to the caller.
type Trap struct {
	URL   string // http://127.0.0.1:{port}
	Port  string
	conns atomic.Int64
}

// NewTrap starts a Trap, closed when the test ends.
func NewTrap(t testingT) *Trap {
	tr := &Trap{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true,"message":"trap","data":{}}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			tr.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr.URL = srv.URL
	_, tr.Port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return tr
}

// Conns is how many connections reached the trap so far.
func (tr *Trap) Conns() int64 { return tr.conns.Load() }
