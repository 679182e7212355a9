package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Each way a sandbox or a client can break an exchange reaches the error
// writer as a type the error table classifies (no unclassified 500), and the
// gateway goes on serving.
func TestBrokenExchangesAreClassified(t *testing.T) {
	t.Parallel()
	hijack := func(answer string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprint(brw, answer)
			brw.Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}
	cases := []struct {
		name    string
		sandbox http.HandlerFunc
		request string // raw HTTP/1.1 request head and body, sent to the gateway
		want    func(error) bool
	}{
		{"101 to a plain request",
			hijack("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
			"GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n", is[*BadResponseError]},
		{"101 to another protocol",
			hijack("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"),
			"GET /v1/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", is[*BadResponseError]},
		{"sandbox gone while the body streams", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.CopyN(io.Discard, r.Body, 64<<10)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "POST /v1/file/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n" + strings.Repeat("x", 32<<20),
			is[*ExchangeError]},
		{"chunked body with bare line feeds", func(_ http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}, "POST /v1/shell/exec HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n", is[*BodyReadError]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			broken := newTarget(t, newUpstream(t, c.sandbox).URL)
			healthy := newTarget(t, newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprint(w, "ok")
			})).URL)
			errs := make(chan error, 4)
			p := New(Config{}, &fixedResolver{}, func(w http.ResponseWriter, _ *http.Request, err error) {
				errs <- err
				w.WriteHeader(http.StatusBadGateway)
			}, nil)
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				up := broken
				if r.URL.Path == "/v1/healthy" {
					up = healthy
				}
				p.Serve(w, r, up, r.URL.Path, "", "")
			}))
			t.Cleanup(gw.Close)

			status := rawRequest(t, gw, c.request)
			select {
			case err := <-errs:
				if !c.want(err) {
					t.Fatalf("error %T %v: not the expected class", err, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no error reported (status %d)", status)
			}
			if status != http.StatusBadGateway && status != 0 {
				t.Fatalf("status %d, want the error writer's", status)
			}
			resp, err := gw.Client().Get(gw.URL + "/v1/healthy")
			if err != nil {
				t.Fatalf("after the broken exchange: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("after the broken exchange: %d %s", resp.StatusCode, b)
			}
		})
	}
}

func is[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// rawRequest writes req as is to gw and returns the answer's status, 0 when
// the connection broke before one (the gateway may stop reading a body the
// sandbox refused and close).
func rawRequest(t *testing.T, gw *httptest.Server, req string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(conn, req) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
