// Command floorproxy is the proxy throughput suite's floor: Go's net/http
// server and httputil.ReverseProxy with nothing else (no router, no
// authentication, no accounting, no tracing), forwarding a path prefix to
// one sandbox over a pool of kept-alive connections, as nginx does in the
// same suite. With -server sandgate it is ReverseProxy configured as the
// gateway's (its pooled copy buffers, its starting GOGC) on the gateway's
// own HTTP/1.1 server and sandbox transport (internal/serve,
// internal/proxy's Transport): the floor of ReverseProxy as the gateway
// runs it. What the gateway spends per request beyond that is Sandgate's
// own (and echo's); what it spends below nginx is Go's and ReverseProxy's.
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

	sgproxy "github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/serve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := flag.String("upstream", "", "the sandbox's base URL, http://host:port")
	prefix := flag.String("prefix", "", "path prefix stripped before forwarding")
	server := flag.String("server", "net/http", "the HTTP server and transport: net/http, or sandgate (the gateway's own)")
	flag.Parse()
	if err := run(*listen, *upstream, *prefix, *server); err != nil {
		fmt.Fprintln(os.Stderr, "floorproxy:", err)
		os.Exit(1)
	}
}

func run(listen, upstream, prefix, server string) error {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("upstream %q: want http://host:port", upstream)
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
		srv := &http.Server{Addr: listen, Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
		return srv.ListenAndServe()
	case "sandgate":
		// ReverseProxy as the gateway configures it: its copy buffers
		// pooled, and the GOGC its GC tuner starts at.
		proxy.Transport, proxy.BufferPool = sgproxy.NewTransport(sgproxy.TransportConfig{}), sgproxy.BufferPool{}
		debug.SetGCPercent(400)
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		// The gateway's server as its defaults configure it: its
		// connection cap and timeouts (internal/gateway newServer).
		srv := &serve.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second, BodyTimeout: serve.DefaultBodyTimeout,
			IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
		return srv.Serve(serve.LimitListener(ln, serve.ConnLimits{}))
	default:
		return fmt.Errorf("-server %q: want net/http or sandgate", server)
	}
}
