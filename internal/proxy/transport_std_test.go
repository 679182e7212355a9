package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
)

// TransportConfig.Standard sends plain requests through net/http's
// http.Transport (which reports GotConn to an httptrace hook; the pool's own
// exchange does not), on the same dial, and closes for good like the pool.
func TestStandardTransport(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+string(b))
	}))
	for _, c := range []struct {
		name     string
		standard bool
	}{{"sandgate", false}, {"net/http", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dialled := 0
			tr := NewTransport(TransportConfig{Standard: c.standard, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dialled++
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}})
			for range 2 {
				viaStd := false
				trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { viaStd = true }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
					http.MethodPost, up.URL+"/x", strings.NewReader("body"))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "POST body" || viaStd != c.standard {
					t.Fatalf("got %q through the standard transport: %v, want %v", b, viaStd, c.standard)
				}
			}
			if dialled != 1 {
				t.Errorf("%d dials for two requests in a row, want 1 (a pooled connection)", dialled)
			}
			tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, up.URL+"/x", nil)
			if _, err := tr.RoundTrip(req); !errors.Is(err, errTransportClosed) || !isDial(err) {
				t.Fatalf("after close: %v, want %v", err, errTransportClosed)
			}
		})
	}
}

// The standard transport's refusal of an oversized response head is
// ErrResponseHeadersTooLarge too (502 sandbox_headers_too_large).
func TestStandardTransportHeadLimit(t *testing.T) {
	t.Parallel()
	tr := NewTransport(TransportConfig{Standard: true, MaxResponseHeaderBytes: 16 << 10})
	t.Cleanup(tr.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodGet, bigHeadSandbox(t, 1<<20)+"/x", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, ErrResponseHeadersTooLarge) {
		t.Fatalf("error %v, want ErrResponseHeadersTooLarge", err)
	}
}
