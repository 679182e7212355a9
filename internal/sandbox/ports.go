package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// The port bridge (sandboxspec.PortPrefix): the gateway reaches a server a
// command started inside the sandbox through this server, which alone
// shares the sandbox's network namespace. It dials 127.0.0.1 and nothing
// else, so the bridge cannot be turned into a way out of the sandbox (to
// the host, the cluster or the internet); a server that binds 0.0.0.0
// listens on 127.0.0.1 too.

// portDialTimeout bounds the dial to a port: a refused one fails at once,
// and 127.0.0.1 never drops a SYN, so this only guards a stuck backlog.
const portDialTimeout = time.Second

// portStripped are the gateway's credentials and selectors, which no
// application in the sandbox may see (the secret would open this server).
var portStripped = []string{sandboxspec.SecretHeader, "Authorization", "X-Api-Key", "Cookie", "X-Aio-Proxy-Port"}

type portKey struct{}

// portTarget is where one request goes: its port, and its path (escaped
// form too, when it differs) with the bridge's prefix cut off.
type portTarget struct{ port, path, rawPath string }

// newPortProxy is the bridge's one ReverseProxy: the request's context
// carries its portTarget (handlePort).
func (s *Server) newPortProxy() *httputil.ReverseProxy {
	dialer := &net.Dialer{Timeout: portDialTimeout}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			// The URL is built from a validated port only; refuse anything
			// else all the same.
			if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
				return nil, fmt.Errorf("port bridge: refusing to dial %q", addr)
			}
			return dialer.DialContext(ctx, "tcp4", addr)
		},
		// No Proxy: the sandbox's HTTP_PROXY (its egress) is not for loopback.
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // the client's Accept-Encoding goes through as sent
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			to, _ := pr.In.Context().Value(portKey{}).(portTarget)
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", "127.0.0.1:"+to.port
			out.URL.Path, out.URL.RawPath = to.path, to.rawPath
			out.Host = "" // Host: 127.0.0.1:{port}, which dev servers' host checks accept
			for _, h := range portStripped {
				out.Header.Del(h)
			}
			// The gateway's X-Forwarded-* (it holds the secret, so they are
			// its own): the app sees the client's host and scheme.
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[h]; ok {
					out.Header[h] = v
				}
			}
		},
		Transport:     transport,
		FlushInterval: -1, // SSE and any streamed body: every write reaches the client at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			to, _ := r.Context().Value(portKey{}).(portTarget)
			s.writeError(w, r, portError(to.port, err))
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// handlePort serves sandboxspec.PortPrefix: 400 for a bad port, else the
// request goes to 127.0.0.1:{port}. It runs inside api, so an open
// connection (a dev server's WebSocket, an SSE stream) is a request in
// flight and keeps the sandbox from counting as idle.
func (s *Server) handlePort(w http.ResponseWriter, r *http.Request) error {
	// From the escaped path: a port is plain digits, never %33000.
	rest := strings.TrimPrefix(r.URL.EscapedPath(), sandboxspec.PortPrefix)
	port, _, _ := strings.Cut(rest, "/")
	if !sandboxspec.ValidPort(port) {
		return statusErr(http.StatusBadRequest, "port %q: want 1-65535 as in %s3000/", port, sandboxspec.PortPrefix)
	}
	prefix := sandboxspec.PortPath(port)
	to := portTarget{port: port, path: forwardPath(r.URL.Path, prefix)}
	if r.URL.RawPath != "" {
		to.rawPath = forwardPath(r.URL.RawPath, prefix)
	}
	s.ports.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), portKey{}, to)))
	return nil
}

// forwardPath is p without prefix; "/sandgate/port/3000" alone is the
// app's root.
func forwardPath(p, prefix string) string {
	if p = strings.TrimPrefix(p, prefix); p == "" {
		return "/"
	}
	return p
}

// portError names the port in a 502 the client can act on; the cause
// beyond that is logged, not sent.
func portError(port string, err error) error {
	var timeout net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &apiError{status: http.StatusBadGateway, code: "port_closed", msg: sandboxspec.PortClosed(port)}
	case errors.As(err, &timeout) && timeout.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, err: err,
			msg: fmt.Sprintf("port %s in the sandbox did not accept a connection within %s", port, portDialTimeout)}
	case errors.Is(err, context.Canceled):
		return &apiError{status: 499, err: err, msg: "client went away"}
	}
	return &apiError{status: http.StatusBadGateway, err: err,
		msg: fmt.Sprintf("the server on port %s in the sandbox failed to answer", port)}
}
