package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// bigHeadSandbox answers every request on loopback with a response head of
// size bytes (then nothing).
func bigHeadSandbox(t *testing.T, size int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// One buffer, written again and again: the sandbox's side allocates
	// nothing per line, so the measurement below is the gateway's.
	line := []byte("X-Big: " + strings.Repeat("a", 8<<10) + "\r\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"); err != nil {
					return
				}
				for n := 0; n < size; n += len(line) {
					if _, err := c.Write(line); err != nil {
						return // the gateway gave up: expected
					}
				}
				_, _ = io.WriteString(c, "\r\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A sandbox sending 10 MB of headers gets 502, and the gateway reads (and
// allocates) about the limit, not the 10 MB. Not parallel: it measures the
// process's allocations.
func TestResponseHeadersOverTheLimit(t *testing.T) {
	const limit = 256 << 10
	tr := NewTransport(TransportConfig{MaxResponseHeaderBytes: limit})
	t.Cleanup(tr.CloseIdleConnections)
	tg := newTarget(t, bigHeadSandbox(t, 10<<20))
	tg.rt = tr
	var got error
	p := New(Config{}, &fixedResolver{}, func(w http.ResponseWriter, _ *http.Request, err error) {
		got = err
		w.WriteHeader(http.StatusBadGateway)
	}, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, err := gw.Client().Get(gw.URL + "/v1/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusBadGateway || !errors.Is(got, ErrResponseHeadersTooLarge) {
		t.Fatalf("status %d, error %v; want 502 and ErrResponseHeadersTooLarge", resp.StatusCode, got)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB for a 10 MiB head with a %d KiB limit", alloc>>10, limit>>10)
	if alloc > 4<<20 {
		t.Errorf("the gateway allocated %d KiB reading the head, over 4 MiB", alloc>>10)
	}
}

func TestHeadLimitDefault(t *testing.T) {
	t.Parallel()
	if got := NewTransport(TransportConfig{}).cfg.MaxResponseHeaderBytes; got != DefaultMaxResponseHeaderBytes {
		t.Errorf("default MaxResponseHeaderBytes %d, want %d", got, DefaultMaxResponseHeaderBytes)
	}
}
