package serve

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The response's framing: Content-Length when the body fits the buffer or
// the handler declared it, chunked when it streams, none where a status or
// HEAD has no body, the end of the connection for HTTP/1.0.
func TestResponseFraming(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3*writeBufSize+17)
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "small")
		case "/big":
			_, _ = io.WriteString(w, big[:10])
			_, _ = io.WriteString(w, big[10:])
		case "/declared":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = io.WriteString(w, big)
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			if _, err := io.WriteString(w, "x"); err != http.ErrBodyNotAllowed {
				t.Errorf("write to a 204: %v", err)
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, big)
			w.Header().Set("X-Sum", "42")
		case "/inject":
			w.Header().Set("X-A", "a\r\nSet-Cookie: evil=1")
			_, _ = io.WriteString(w, "ok")
		case "/early":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			_, _ = io.WriteString(w, "final")
		}
	}))
	for _, tc := range []struct {
		name, raw, method string
		status            int
		length            int64 // -1: chunked
		body              string
		check             func(*http.Response) string
	}{
		{name: "small", raw: "GET /small HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, length: 5, body: "small"},
		{name: "big streams chunked", raw: "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, length: -1, body: big},
		{name: "declared length", raw: "GET /declared HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, length: int64(len(big)), body: big},
		{name: "HEAD", raw: "HEAD /small HTTP/1.1\r\nHost: x\r\n\r\n", method: http.MethodHead, status: 200, length: 5},
		{name: "204", raw: "GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n", status: 204, length: 0},
		{name: "trailer", raw: "GET /trailer HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, length: -1, body: big,
			check: func(r *http.Response) string {
				if r.Trailer.Get("X-Sum") != "42" {
					return "trailer X-Sum = " + r.Trailer.Get("X-Sum")
				}
				return ""
			}},
		{name: "no header injection", raw: "GET /inject HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, length: 2, body: "ok",
			check: func(r *http.Response) string {
				if r.Header.Get("Set-Cookie") != "" || r.Header.Get("X-A") != "a  Set-Cookie: evil=1" {
					return "X-A " + r.Header.Get("X-A") + ", Set-Cookie " + r.Header.Get("Set-Cookie")
				}
				return ""
			}},
		{name: "HTTP/1.0 keep-alive", raw: "GET /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200, length: 5, body: "small",
			check: func(r *http.Response) string {
				if r.Header.Get("Connection") != "keep-alive" {
					return "Connection: " + r.Header.Get("Connection")
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, br := dial(t, addr)
			// Twice on one connection: the response left it ready for the next.
			for range 2 {
				send(t, c, tc.raw)
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				res, body := readResponse(t, br, method)
				if res.StatusCode != tc.status || res.ContentLength != tc.length || body != tc.body {
					t.Fatalf("got %d, length %d, %d bytes; want %d, %d, %d bytes", res.StatusCode, res.ContentLength,
						len(body), tc.status, tc.length, len(tc.body))
				}
				if res.Header.Get("Date") == "" {
					t.Fatal("no Date header")
				}
				if tc.check != nil {
					if msg := tc.check(res); msg != "" {
						t.Fatal(msg)
					}
				}
			}
		})
	}
	t.Run("1xx before the final status", func(t *testing.T) {
		t.Parallel()
		c, br := dial(t, addr)
		send(t, c, "GET /early HTTP/1.1\r\nHost: x\r\n\r\n")
		if res, _ := readResponse(t, br, http.MethodGet); res.StatusCode != 103 || res.Header.Get("Link") == "" {
			t.Fatalf("got %d %v, want 103 with its Link", res.StatusCode, res.Header)
		}
		if res, body := readResponse(t, br, http.MethodGet); res.StatusCode != 200 || body != "final" || res.Header.Get("Link") != "" {
			t.Fatalf("got %d %q %v", res.StatusCode, body, res.Header)
		}
	})
	t.Run("HTTP/1.0 without keep-alive closes", func(t *testing.T) {
		t.Parallel()
		c, br := dial(t, addr)
		send(t, c, "GET /big HTTP/1.0\r\n\r\n")
		if res, body := readResponse(t, br, http.MethodGet); res.StatusCode != 200 || body != big || res.ContentLength != -1 {
			t.Fatalf("got %d, length %d, %d bytes", res.StatusCode, res.ContentLength, len(body))
		}
		expectClosed(t, br)
	})
}

// Each Flush of a streaming response is on the wire before the handler
// writes the next event (SSE).
func TestFlushStreams(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 3 {
			_, _ = io.WriteString(w, "data: "+strconv.Itoa(i)+"\n\n")
			if err := rc.Flush(); err != nil {
				t.Errorf("flush: %v", err)
			}
			<-next
		}
	}))
	c, br := dial(t, addr)
	send(t, c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	events := bufio.NewReader(res.Body)
	for i := range 3 {
		line, err := events.ReadString('\n')
		if err != nil || line != "data: "+strconv.Itoa(i)+"\n" {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		_, _ = events.ReadString('\n')
		next <- struct{}{}
	}
	if rest, err := io.ReadAll(events); err != nil || len(rest) != 0 {
		t.Fatalf("after the events: %q %v", rest, err)
	}
}

// A hijacked connection is the handler's: raw bytes both ways, including
// what the client sent right behind the head.
func TestHijack(t *testing.T) {
	t.Parallel()
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		line, _ := rw.ReadString('\n')
		_, _ = rw.WriteString("echo " + line)
		_ = rw.Flush()
		if _, err := w.Write([]byte("x")); err != http.ErrHijacked {
			t.Errorf("write after hijack: %v", err)
		}
	}))
	c, br := dial(t, addr)
	send(t, c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nping\n")
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Fatalf("got %q %v", line, err)
	}
	expectClosed(t, br)
}

// A handler's panic ends its connection, not the server; the deadlines of
// http.ResponseController reach the connection.
func TestPanicAndDeadlines(t *testing.T) {
	t.Parallel()
	_, addr := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/deadline":
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
				t.Errorf("SetReadDeadline: %v", err)
			}
			if err := rc.SetWriteDeadline(time.Time{}); err != nil {
				t.Errorf("SetWriteDeadline: %v", err)
			}
			_, err := io.ReadAll(r.Body) // the client never sends it
			http.Error(w, "body: "+err.Error(), http.StatusRequestTimeout)
		default:
			_, _ = io.WriteString(w, "alive")
		}
	}))
	for _, path := range []string{"/panic", "/abort"} {
		c, br := dial(t, addr)
		send(t, c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		expectClosed(t, br)
	}
	c, br := dial(t, addr)
	send(t, c, "POST /deadline HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	res, body := readResponse(t, br, http.MethodPost)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "timeout") || !res.Close {
		t.Fatalf("got %d %q close=%v, want 408 for the read deadline and a closed connection", res.StatusCode, body, res.Close)
	}
	// And net/http's own client works with it, keep-alive included.
	cl := &http.Client{Timeout: 5 * time.Second}
	for range 3 {
		res, err := cl.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if string(b) != "alive" {
			t.Fatalf("got %q", b)
		}
	}
}

// recordingConn records the length of every Write on the connection.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

type recordingListener struct {
	net.Listener
	conns chan *recordingConn
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recordingConn{Conn: c}
	l.conns <- rc
	return rc, nil
}

// A large body goes out as the handler writes it: on a connection without
// writev, one write per non-empty segment (the head, then each chunk), not
// an empty write for the missing head and chunk framing around every chunk
// after the first (a 1 MiB download took 25 writes for 11).
func TestLargeBodyWritesNoEmptySegments(t *testing.T) {
	t.Parallel()
	const chunks, size = 4, 4 * writeBufSize
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := recordingListener{Listener: l, conns: make(chan *recordingConn, 1)}
	serveOn(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(chunks*size))
		for range chunks {
			_, _ = w.Write(make([]byte, size))
		}
	}), ReadHeaderTimeout: 5 * time.Second}, rl)
	c, br := dial(t, l.Addr().String())
	send(t, c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := readResponse(t, br, http.MethodGet); len(body) != chunks*size {
		t.Fatalf("body: %d bytes, want %d", len(body), chunks*size)
	}
	rc := <-rl.conns
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.writes) != chunks+1 || slices.Contains(rc.writes, 0) {
		t.Fatalf("writes of %v bytes, want the head's and then %d of %d", rc.writes, chunks, size)
	}
}

// Behind the connection limit, a response's segments still go out in one
// writev: net.Buffers takes it only on the net package's own connection,
// so the server writes them to the one limitedConn wraps.
func TestLimitedConnWritesVectored(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	raw, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c := newConn(&Server{}, &limitedConn{Conn: raw}, context.Background())
	if tcp, ok := c.vw.(*net.TCPConn); !ok || tcp != raw {
		t.Fatalf("segments written to %T, want the accepted *net.TCPConn", c.vw)
	}
}
