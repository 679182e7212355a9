package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/proxy"
)

// bodyServer serves h with each request body wrapped as rt.serve does.
func bodyServer(tb testing.TB, timeout time.Duration, h func(w http.ResponseWriter, r *http.Request, body io.Reader)) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if timeout > 0 {
			body = &idleBody{rc: r.Body, w: w, timeout: timeout}
		}
		h(w, r, body)
	}))
	tb.Cleanup(s.Close)
	return s
}

func TestIdleBody(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	cases := []struct {
		name string
		// stall before the rest of the body (0 = none); pause after the
		// body is read, before the answer.
		stall, pause time.Duration
		want         int
	}{
		{name: "stalled body is cut", stall: 10 * timeout, want: http.StatusRequestTimeout},
		// net/http clears the deadline at the end of the body: a slow
		// answer after it is not cut (its background read would cancel
		// the request).
		{name: "a whole body, then a slow answer, is not cut", pause: 3 * timeout, want: http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := bodyServer(t, timeout, func(w http.ResponseWriter, r *http.Request, body io.Reader) {
				if _, err := io.Copy(io.Discard, body); err != nil {
					w.WriteHeader(statusOf(err).status)
					return
				}
				time.Sleep(tc.pause)
				if r.Context().Err() != nil { // a deadline left behind cancels the request
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			var body io.Reader = strings.NewReader("whole") // a declared length
			if tc.stall > 0 {
				pr, pw := io.Pipe()
				go func() {
					_, _ = pw.Write([]byte("part"))
					time.Sleep(tc.stall)
					_, _ = pw.Write([]byte("rest"))
					pw.Close()
				}()
				body = pr
			}
			start := time.Now()
			resp, err := s.Client().Post(s.URL, "text/plain", body)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if took := time.Since(start); tc.stall > 0 && took > tc.stall/2 {
				t.Errorf("the stalled body was cut after %s, timeout %s", took, timeout)
			}
		})
	}
}

func TestStatusOfBodyIdle(t *testing.T) {
	t.Parallel()
	// As the proxy reports it: a body error wrapping the timeout.
	err := &proxy.BodyReadError{Err: fmt.Errorf("%w (2s): %w", errBodyIdle, os.ErrDeadlineExceeded)}
	if got := statusOf(err); got.status != http.StatusRequestTimeout || got.code != "body_timeout" {
		t.Errorf("statusOf(body idle) = %d %s, want 408 body_timeout", got.status, got.code)
	}
}

// BenchmarkBodyRead is a keep-alive POST of a 4 KiB body read by the
// handler, without and with the idle timeout: the cost of the deadlines.
func BenchmarkBodyRead(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 4<<10)
	for _, bc := range []struct {
		name    string
		timeout time.Duration
	}{{"off", 0}, {"on", 30 * time.Second}} {
		b.Run(bc.name, func(b *testing.B) {
			s := bodyServer(b, bc.timeout, func(w http.ResponseWriter, _ *http.Request, body io.Reader) {
				_, _ = io.Copy(io.Discard, body)
			})
			c := s.Client()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Post(s.URL, "text/plain", bytes.NewReader(payload))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if !strings.HasPrefix(resp.Status, "200") {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
