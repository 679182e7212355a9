package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

// BenchmarkDownload1MiB downloads 1 MiB from a loopback server directly, as
// a forwarded http:// request, and through a CONNECT tunnel (plain HTTP
// inside, so the tunnel and not TLS is measured). Connections are kept
// alive, as a package manager's are: a run measures the byte path, not setup.
func BenchmarkDownload1MiB(b *testing.B) {
	w := newWorld(b)
	fx := newFixture(b, w, backend.Egress{Allow: []string{"allowed.test"}}, func(c *Config) {
		c.Log = slog.New(slog.DiscardHandler)
	})
	path := fmt.Sprintf("allowed.test:%d/download", w.port)
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", &http.Client{Transport: &http.Transport{}}, fmt.Sprintf("http://127.0.0.2:%d/download", w.port)},
		{"forward", fx.client(nil), "http://" + path},
		{"connect", &http.Client{Transport: &http.Transport{DialContext: fx.dialTunnel}}, "http://" + path},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(download)))
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.client.Get(c.url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != int64(len(download)) || resp.StatusCode != 200 {
					b.Fatalf("%d: %d bytes, %v", resp.StatusCode, n, err)
				}
			}
			c.client.CloseIdleConnections()
		})
	}
}

// dialTunnel opens a CONNECT tunnel to addr through the fixture's socket.
func (f *fixture) dialTunnel(ctx context.Context, _, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", f.socket)
	if err != nil {
		return nil, err
	}
	io.WriteString(c, connect(addr))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %v %v", addr, resp, err)
	}
	return &bufferedConn{Conn: c, r: br}, nil
}

// bufferedConn reads what the CONNECT response's reader already buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
