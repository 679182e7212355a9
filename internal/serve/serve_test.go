package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// start serves h on a loopback port for the test and returns its address.
func start(t *testing.T, h http.Handler) (*Server, string) {
	t.Helper()
	return startWith(t, func(*Server) {}, h)
}

// startWith is start with the server's settings changed by set first.
func startWith(t *testing.T, set func(*Server), h http.Handler) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 4 << 10}
	set(s)
	serveOn(t, s, l)
	return s, l.Addr().String()
}

// serveOn runs s on l until the test ends.
func serveOn(t *testing.T, s *Server, l net.Listener) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func send(t *testing.T, c net.Conn, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
}

// readResponse reads one response and its whole body.
func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return res, string(b)
}

// expectClosed asserts the server closed the connection (nothing more is
// answered).
func expectClosed(t *testing.T, br *bufio.Reader) {
	t.Helper()
	if b, err := br.ReadByte(); err == nil {
		t.Fatalf("connection still open: read %q", b)
	}
}

// echo answers the method, path and the request body it read.
func echo(calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	})
}

// Heads two parsers could read differently, or that are plainly broken,
// get a status and a closed connection, and never reach the handler.
func TestRefusesBadHeads(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	_, addr := start(t, echo(&calls))
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"content-length and transfer-encoding", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"transfer-encoding and content-length", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
		{"differing content-lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
		{"content-length list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello", 400},
		{"signed content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400},
		{"huge content-length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"repeated transfer-encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"transfer-encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello", 400},
		{"bare LF in a header", "GET / HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n", 400},
		{"bare LF head", "GET / HTTP/1.1\nHost: x\n\n", 400},
		{"CR inside a line", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400},
		{"header too large", "GET / HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 9<<10) + "\r\n\r\n", 431},
		{"many headers too large", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 300) + "\r\n", 431},
		{"missing host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
		{"bad host", "GET / HTTP/1.1\r\nHost: x y\r\n\r\n", 400},
		{"HTTP/2", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
		{"garbage version", "GET / HTTX/1.1\r\nHost: x\r\n\r\n", 400},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"bad method", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"control in target", "GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"unsupported expect", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, br := dial(t, addr)
			// A second, valid request behind it must not be served.
			send(t, c, tc.raw+"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
			res, body := readResponse(t, br, http.MethodGet)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || res.Header.Get("Content-Type") != "application/json" ||
				e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("refusal is not the gateway's JSON error: %q (%s) %v", body, res.Header.Get("Content-Type"), err)
			}
			expectClosed(t, br)
		})
	}
	t.Cleanup(func() {
		if n := calls.Load(); n != 0 {
			t.Errorf("the handler ran %d times for refused heads", n)
		}
	})
}

// A chunked body that breaks its framing fails the handler's read and ends
// the connection: whatever follows is never read as a request.
func TestBadChunkedBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body string }{
		{"not hex", "zz\r\nhello\r\n0\r\n\r\n"},
		{"no CRLF after data", "5\r\nhelloX\r\n0\r\n\r\n"},
		{"size overflow", "10000000000000005\r\nhello\r\n0\r\n\r\n"},
		{"negative size", "-5\r\nhello\r\n0\r\n\r\n"},
		{"bare LF size line", "5\nhello\r\n0\r\n\r\n"},
		{"junk after size", "5 x\r\nhello\r\n0\r\n\r\n"},
		{"bare LF trailer", "5\r\nhello\r\n0\r\nX-T: a\n\r\n"},
		{"trailer too large", "5\r\nhello\r\n0\r\n" + strings.Repeat("X-T: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 300) + "\r\n"},
		{"truncated", "5\r\nhel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			_, addr := start(t, echo(&calls))
			c, br := dial(t, addr)
			send(t, c, "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+tc.body+
				"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
			if tc.name == "truncated" {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			res, body := readResponse(t, br, http.MethodPost)
			if res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, "body: ") {
				t.Fatalf("got %d %q, want the handler's 400 for the body error", res.StatusCode, body)
			}
			expectClosed(t, br)
			if n := calls.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1 (no smuggled request)", n)
			}
		})
	}
}

// Pipelined requests, with Content-Length and chunked bodies and one the
// handler leaves unread, are answered in order on one connection.
func TestPipelined(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/unread" {
			calls.Add(1)
			_, _ = io.WriteString(w, "ignored the body")
			return
		}
		echo(&calls).ServeHTTP(w, r)
	}))
	c, br := dial(t, addr)
	send(t, c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"+
		"POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"+
		"POST /3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"+
		"\r\nGET /4 HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"GET /1 ", "POST /2 hello", "ignored the body", "POST /3 abcde", "GET /4 "} {
		res, body := readResponse(t, br, http.MethodGet)
		if res.StatusCode != http.StatusOK || body != want {
			t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, want)
		}
		if res.ContentLength != int64(len(want)) {
			t.Fatalf("Content-Length %d, want %d", res.ContentLength, len(want))
		}
	}
	if n := calls.Load(); n != 5 {
		t.Fatalf("handler ran %d times, want 5", n)
	}
}

// Expect: 100-continue: the 100 goes out when the handler reads the body;
// a handler that never reads it gets no 100 and the connection closes.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/deny" {
			calls.Add(1)
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		echo(&calls).ServeHTTP(w, r)
	}))
	c, br := dial(t, addr)
	send(t, c, "POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	res, _ := readResponse(t, br, http.MethodPost)
	if res.StatusCode != http.StatusContinue {
		t.Fatalf("status %d, want 100", res.StatusCode)
	}
	send(t, c, "hello")
	if res, body := readResponse(t, br, http.MethodPost); res.StatusCode != 200 || body != "POST /up hello" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}

	c2, br2 := dial(t, addr)
	send(t, c2, "POST /deny HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	res, _ = readResponse(t, br2, http.MethodPost)
	if res.StatusCode != http.StatusForbidden || !res.Close {
		t.Fatalf("status %d close %v, want 403 and Connection: close", res.StatusCode, res.Close)
	}
	expectClosed(t, br2)
}

// A client that hangs up while a long request runs cancels its context.
func TestHangUpCancelsContext(t *testing.T) {
	t.Parallel()
	started, canceled := make(chan struct{}), make(chan struct{})
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(canceled)
		case <-time.After(10 * time.Second):
		}
	}))
	for _, raw := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n"} {
		c, _ := dial(t, addr)
		send(t, c, raw)
		<-started
		_ = c.Close()
		select {
		case <-canceled:
		case <-time.After(5 * time.Second):
			t.Fatal("the request's context was not canceled when the client hung up")
		}
	}
}

// A request still reading its body when the watch would start is watched
// once the body ends; a pipelined request is not taken for a hang-up.
func TestWatchAfterBodyAndPipelined(t *testing.T) {
	t.Parallel()
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "canceled", http.StatusInternalServerError)
			return
		case <-time.After(3 * hangupAfter):
		}
		_, _ = fmt.Fprintf(w, "%s %s", r.URL.Path, b)
	}))
	c, br := dial(t, addr)
	send(t, c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
	time.Sleep(2 * hangupAfter) // past the timer, the body not ended
	send(t, c, "cd")
	time.Sleep(hangupAfter) // the watch reads now; the next request arrives during it
	send(t, c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"/slow abcd", "/next "} {
		if res, body := readResponse(t, br, http.MethodGet); res.StatusCode != 200 || body != want {
			t.Fatalf("got %d %q, want %q", res.StatusCode, body, want)
		}
	}
}

// Shutdown closes idle connections, waits for the request in flight (which
// gets its response, with Connection: close) and refuses new connections.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	release, started := make(chan struct{}), make(chan struct{})
	s, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	idle, idleBR := dial(t, addr)
	send(t, idle, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
	readResponse(t, idleBR, http.MethodGet)
	busy, busyBR := dial(t, addr)
	send(t, busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	expectClosed(t, idleBR)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a new connection was accepted after Shutdown")
	}
	close(release)
	res, body := readResponse(t, busyBR, http.MethodGet)
	if body != "/slow" || !res.Close {
		t.Fatalf("in-flight request got %q close=%v, want /slow with Connection: close", body, res.Close)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	expectClosed(t, busyBR)
}

// Shutdown gives up when its context ends.
func TestShutdownTimesOut(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	s, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}))
	defer close(release)
	c, _ := dial(t, addr)
	send(t, c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the context's deadline", err)
	}
}

// A client still sending an oversized head when the server refuses it
// reads the 431: the server drains before closing, so the close is not a
// reset that fails the client's write (as net/http's transport reports it).
func TestRefusalOutlivesTheClientsWrite(t *testing.T) {
	t.Parallel()
	_, addr := start(t, echo(new(atomic.Int32)))
	c, br := dial(t, addr)
	send(t, c, "GET / HTTP/1.1\r\nHost: x\r\nX-A: "+strings.Repeat("a", 8<<10))
	// The refusal is on its way; the rest of the head follows it.
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 16; i++ {
		send(t, c, strings.Repeat("a", 8<<10))
	}
	res, _ := readResponse(t, br, http.MethodGet)
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", res.StatusCode)
	}
	expectClosed(t, br)
}
