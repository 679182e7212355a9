package testutil

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// TCPFront serves a sandbox that listens on a Unix socket (the process
// backend's unix:// URLs) on a loopback TCP port of its own, for stand-ins
// of services whose sandbox URLs are http:// (a DeerFlow provisioner). The
// front closes when the test ends, or when close is called.
func TCPFront(t testingT, sandboxURL string) (frontURL string, close func()) {
	base, socket := backend.HTTPBase(sandboxURL)
	target, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(target)
	if socket != "" {
		rp.Transport = &http.Transport{Proxy: nil, DialContext: backend.DialUnix(socket, 2*time.Second)}
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL, srv.Close
}

// testingT is what TCPFront needs of a test.
type testingT interface{ Cleanup(func()) }
