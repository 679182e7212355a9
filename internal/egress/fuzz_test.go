package egress

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// FuzzProxyRequest sends arbitrary request lines and Host headers through a
// real socket. Whatever arrives, the proxy answers without a 500 and without
// a panic, and dials nothing but the allowed names' checked address.
func FuzzProxyRequest(f *testing.F) {
	w := newWorld(f)
	panics := &logBuffer{} // errors only: the per-request lines would pile up
	fx := newFixture(f, w, backend.Egress{Allow: []string{"allowed.test", "*.wild.test", "private.test", "meta.test:80"}},
		func(c *Config) {
			c.Log = slog.New(slog.NewJSONHandler(panics, &slog.HandlerOptions{Level: slog.LevelError}))
		})
	port := strconv.Itoa(int(w.port))
	checked := 0
	for _, seed := range [][3]string{
		{"GET", "http://allowed.test:" + port + "/", "allowed.test"},
		{"GET", "http://other.test:" + port + "/", "allowed.test"},
		{"CONNECT", "allowed.test:" + port, "allowed.test:" + port},
		{"CONNECT", "meta.test:80", "x"},
		{"CONNECT", "[::1]:443", "[::1]:443"},
		{"GET", "http://[::ffff:127.0.0.2]:" + port + "/", ""},
		{"GET", "http://a.wild.test./x?y#z", "a.wild.test"},
		{"POST", "http://private.test/", "allowed.test"},
		{"GET", "/", "allowed.test"},
		{"GET", "https://allowed.test/", "allowed.test"},
		{"CONNECT", "allowed.test:99999", ""},
		{"GET", "http://allowed.test:" + port + "/\r\nX: y", "allowed.test\r\n\r\nGET / HTTP/1.1"},
		{"PUT", "http://user:pass@allowed.test:" + port + "/", "%00"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, method, target, host string) {
		c, err := net.Dial("unix", fx.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, method+" "+target+" HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 0\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusInternalServerError {
			t.Fatalf("500 for %q %q %q", method, target, host)
		}
		c.Close()
		dials := fx.dials.all()
		for _, d := range dials[checked:] {
			if ap := netip.MustParseAddrPort(d); ap.Addr() != upstreamIP {
				t.Fatalf("dialled %s for %q %q %q", d, method, target, host)
			}
		}
		checked = len(dials)
		if s := panics.String(); strings.Contains(s, "panic") {
			t.Fatalf("panic for %q %q %q: %s", method, target, host, s)
		}
	})
}
