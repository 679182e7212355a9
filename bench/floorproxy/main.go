// Command floorproxy is the proxy throughput suite's floor: Go's net/http
// server and httputil.ReverseProxy with nothing else (no router, no
// authentication, no accounting, no tracing), forwarding a path prefix to
// one sandbox over a pool of kept-alive connections, as nginx does in the
// same suite. With -server sandgate it is ReverseProxy configured as the
// gateway's (its pooled copy buffers, its starting GOGC) on the gateway's
// own HTTP/1.1 server and sandbox transport (internal/serve,
// internal/proxy's Transport): the floor of ReverseProxy as the gateway
// runs it. With -server sandgate-echo, echo routes the requests to that
// ReverseProxy: the floor of what the design requires (echo and
// ReverseProxy) on the gateway's server. What the gateway spends per
// request beyond that is Sandgate's own; what it spends below nginx is
// Go's and ReverseProxy's.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	sgproxy "github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/serve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := flag.String("upstream", "", "the sandbox's base URL, http://host:port")
	prefix := flag.String("prefix", "", "path prefix stripped before forwarding")
	server := flag.String("server", "net/http", "the HTTP server and transport: net/http, sandgate (the gateway's own) or sandgate-echo (echo in front of the proxy)")
	flag.Parse()
	if err := run(*listen, *upstream, *prefix, *server); err != nil {
		fmt.Fprintln(os.Stderr, "floorproxy:", err)
		os.Exit(1)
	}
}

func run(listen, upstream, prefix, server string) error {
	h, err := handler(upstream, prefix, server)
	if err != nil {
		return err
	}
	if server == "net/http" {
		srv := &http.Server{Addr: listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
		return srv.ListenAndServe()
	}
	// The GOGC the gateway's GC tuner starts at.
	debug.SetGCPercent(400)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// The gateway's server as its defaults configure it: its connection
	// cap and timeouts (internal/gateway newServer).
	srv := &serve.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BodyTimeout: serve.DefaultBodyTimeout,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	return srv.Serve(serve.LimitListener(ln, serve.ConnLimits{}))
}

// handler is the floor server serves: ReverseProxy forwarding what follows
// prefix to upstream, with echo in front of it for sandgate-echo.
func handler(upstream, prefix, server string) (http.Handler, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: want http://host:port", upstream)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.Host = u.Scheme, u.Host, u.Host
			r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, prefix)
			r.Out.URL.RawPath = ""
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
	}
	switch server {
	case "net/http":
		return proxy, nil
	case "sandgate", "sandgate-echo":
		// ReverseProxy on the gateway's sandbox transport, its copy
		// buffers pooled as the gateway's are.
		proxy.Transport, proxy.BufferPool = sgproxy.NewTransport(sgproxy.TransportConfig{}), sgproxy.BufferPool{}
		if server == "sandgate" {
			return proxy, nil
		}
		// The gateway's data-plane route, its one handler the proxy.
		e := echo.New()
		e.Any("/threads/:thread/v1/*", echo.WrapHandler(proxy))
		return e, nil
	default:
		return nil, fmt.Errorf("-server %q: want net/http, sandgate or sandgate-echo", server)
	}
}
