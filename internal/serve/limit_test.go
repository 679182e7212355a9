package serve

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// dialFrom connects to addr from the loopback address src (any of 127/8
// is this host, and a source of its own).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedSoon reports whether the server closed c within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestLimitListener(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limits ConnLimits
		// from are the sources of the connections dialled in order; open
		// says which the server must keep.
		from []string
		open []bool
	}{
		{"per source: past it closed, another source served", ConnLimits{Max: 10, PerSource: 2},
			[]string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2"}, []bool{true, true, false, true}},
		{"default per source is a quarter of max", ConnLimits{Max: 8},
			[]string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.3"}, []bool{true, true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := LimitListener(raw, tc.limits)
			t.Cleanup(func() { _ = l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					t.Cleanup(func() { _ = c.Close() })
				}
			}()
			conns := make([]net.Conn, len(tc.from))
			for i, src := range tc.from {
				conns[i] = dialFrom(t, src, raw.Addr().String())
				// Accepted in order: the cap counts the earlier ones.
				time.Sleep(50 * time.Millisecond)
			}
			for i, c := range conns {
				if closed := closedSoon(c, 300*time.Millisecond); closed == tc.open[i] {
					t.Errorf("connection %d from %s: closed %v, want open %v", i, tc.from[i], closed, tc.open[i])
				}
			}
		})
	}
}

// At the global cap Accept waits; a connection closed gives its slot back.
func TestLimitListenerWaitsAtMax(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(raw, ConnLimits{Max: 1, PerSource: 1})
	t.Cleanup(func() { _ = l.Close() })
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dialFrom(t, "127.0.0.1", raw.Addr().String())
	first := <-accepted
	dialFrom(t, "127.0.0.2", raw.Addr().String())
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted at max_connections 1")
	case <-time.After(300 * time.Millisecond):
	}
	_ = first.Close()
	_ = first.Close() // a second Close gives nothing back twice
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted after the first closed")
	}
}

// A client that sends a head and stalls in its body is cut at BodyTimeout;
// a handler that moves the deadline (the proxy's progress deadline) is not.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	read := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		}
		_, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
		}
	}
	_, addr := startWith(t, func(s *Server) { s.BodyTimeout = timeout }, http.HandlerFunc(read))

	c, br := dial(t, addr)
	began := time.Now()
	send(t, c, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	res, _ := readResponse(t, br, http.MethodPost)
	if res.StatusCode != http.StatusRequestTimeout || time.Since(began) < timeout {
		t.Errorf("stalled body: %d after %s, want 408 after %s", res.StatusCode, time.Since(began), timeout)
	}
	expectClosed(t, br)

	c, br = dial(t, addr)
	send(t, c, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nabc")
	time.Sleep(2 * timeout)
	send(t, c, "def")
	if res, _ := readResponse(t, br, http.MethodPost); res.StatusCode != http.StatusOK {
		t.Errorf("a body whose handler lifted the deadline: %d, want 200", res.StatusCode)
	}
}

// A connection that sends nothing is closed after ReadHeaderTimeout, not
// kept for IdleTimeout as a keep-alive connection between requests is.
func TestFirstRequestDueWithinHeaderTimeout(t *testing.T) {
	t.Parallel()
	_, addr := startWith(t, func(s *Server) { s.ReadHeaderTimeout = 200 * time.Millisecond }, http.NotFoundHandler())
	c, _ := dial(t, addr)
	if !closedSoon(c, 3*time.Second) {
		t.Error("a silent new connection was still open after 3s (read_header_timeout 200ms)")
	}
}
