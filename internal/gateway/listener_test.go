package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveWaiting runs h behind waitingListener on a real loopback socket.
func serveWaiting(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.Serve(waitingListener{l}) }()
	t.Cleanup(func() { _ = s.Close() })
	return l.Addr().String()
}

// A client that hangs up while its request runs cancels the request's
// context: the background read, waiting for readiness, still sees the close.
func TestWaitingListenerSeesAHangUp(t *testing.T) {
	t.Parallel()
	canceled := make(chan struct{})
	started := make(chan struct{})
	addr := serveWaiting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(canceled)
		case <-time.After(10 * time.Second):
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-started
	time.Sleep(50 * time.Millisecond) // the background read is waiting by now
	_ = c.Close()
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the request's context was not canceled when the client hung up")
	}
}

// Keep-alive and pipelined requests: every one is answered in order, on one
// connection, whether it arrives after the response or during the request.
func TestWaitingListenerServesKeepAliveAndPipelined(t *testing.T) {
	t.Parallel()
	addr := serveWaiting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(10 * time.Millisecond) // the pipelined request arrives meanwhile
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.URL.Path+":"+string(body))
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	read := func(want string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(got) != want {
			t.Fatalf("status %d body %q, want %q", resp.StatusCode, got, want)
		}
	}
	for _, p := range []string{"/a", "/b"} {
		if _, err := io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		read(p + ":")
	}
	pipelined := "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi" + "GET /d HTTP/1.1\r\nHost: x\r\n\r\n" +
		strings.Repeat("GET /e HTTP/1.1\r\nHost: x\r\n\r\n", 3)
	if _, err := io.WriteString(c, pipelined); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/c:hi", "/d:", "/e:", "/e:", "/e:"} {
		read(want)
	}
}

// A one-byte read under a deadline (not net/http's background read) reads
// at once: data that arrived before it is not left waiting for readiness.
func TestWaitingConnReadsAtOnceUnderADeadline(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wl := waitingListener{l}
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := wl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*waitingConn); !ok {
		t.Fatalf("accepted %T, want *waitingConn", c)
	}
	if _, err := io.WriteString(client, "abc"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the bytes, and the poller's event, are in
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	for _, want := range "abc" {
		if n, err := c.Read(b[:]); n != 1 || err != nil || rune(b[0]) != want {
			t.Fatalf("read %d %q %v, want %q", n, b[:n], err, want)
		}
	}
}
