package egress

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

// BenchmarkDownload1MiB downloads 1 MiB from a loopback server directly, as
// a forwarded http:// request, and as https:// through a CONNECT tunnel
// (a tunnel must carry TLS for its name; direct-tls is the same download
// without the proxy, so connect minus direct-tls is the tunnel's cost).
// Connections are kept alive, as a package manager's are: a run measures
// the byte path, not setup.
func BenchmarkDownload1MiB(b *testing.B) {
	w := newWorld(b)
	fx := newFixture(b, w, backend.Egress{Allow: []string{"allowed.test"}}, func(c *Config) {
		c.Log = slog.New(slog.DiscardHandler)
	})
	path := fmt.Sprintf("allowed.test:%d/download", w.port)
	direct := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.roots, ServerName: "allowed.test"}}
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", &http.Client{Transport: &http.Transport{}}, fmt.Sprintf("http://127.0.0.2:%d/download", w.port)},
		{"direct-tls", &http.Client{Transport: direct}, fmt.Sprintf("https://127.0.0.2:%d/download", w.tlsPort)},
		{"forward", fx.client(nil), "http://" + path},
		{"connect", fx.client(w.roots), fmt.Sprintf("https://allowed.test:%d/download", w.tlsPort)},
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
