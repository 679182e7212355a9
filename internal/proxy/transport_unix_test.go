package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// With Dial set, every request goes where it dials (a Unix socket), whatever
// its host.
func TestTransportUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "via socket "+r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	tr := NewTransport(TransportConfig{Dial: dial})
	defer tr.CloseIdleConnections()
	for range 3 { // the second and third reuse the pooled connection
		req, _ := http.NewRequest(http.MethodGet, "http://sandbox/v1/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(b) != "via socket /v1/x" {
			t.Fatalf("body %q", b)
		}
	}
	_ = ln.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/v1/x", nil)
	if _, err := NewTransport(TransportConfig{Dial: dial}).RoundTrip(req); err == nil {
		t.Fatal("dialled the URL's host instead of the closed socket")
	}
}
