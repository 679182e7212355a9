// Package proxy streams requests to sandboxes. It is generic: the target of
// each request (an Upstream) travels in the request context, and a Resolver
// replaces a target that stopped answering. It knows neither Redis nor any
// backend.
package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
)

// Upstream is one sandbox incarnation as the proxy sees it.
type Upstream interface {
	BaseURL() *url.URL
	// RoundTripper is the connection pool dedicated to this incarnation.
	RoundTripper() http.RoundTripper
	// Begin and End bracket a request in flight (keeps the sandbox alive).
	Begin()
	End()
}

// Resolver replaces an upstream after a dial-class failure.
type Resolver interface {
	// Retry drops failed and returns a fresh upstream for the same sandbox,
	// which may be a newly created one.
	Retry(ctx context.Context, failed Upstream) (Upstream, error)
}

// ErrorWriter writes an error response (the router's JSON error table).
type ErrorWriter func(w http.ResponseWriter, r *http.Request, err error)

// Config of the proxy. The zero value is the documented default.
type Config struct {
	// SandboxAPIKey, when set, is sent to every sandbox as SandboxAPIKeyHeader;
	// clients can neither set nor read it.
	SandboxAPIKey string
	// MaxRetries after dial-class failures. 0 = 2; negative = none.
	MaxRetries int
}

// SandboxAPIKeyHeader carries the sandbox's own API key (all-in-one sandbox's name).
const SandboxAPIKeyHeader = "X-Aio-Api-Key"

// Proxy is the one ReverseProxy every data-plane request goes through.
type Proxy struct {
	rp       *httputil.ReverseProxy
	cfg      Config
	resolver Resolver
	writeErr ErrorWriter
	upgrades *upgrades
	log      *slog.Logger
}

// New returns a Proxy.
func New(cfg Config, resolver Resolver, writeErr ErrorWriter, log *slog.Logger) *Proxy {
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 2
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Proxy{cfg: cfg, resolver: resolver, writeErr: writeErr, upgrades: newUpgrades(), log: log}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: &dispatch{p: p},
		// 0, not -1: ReverseProxy already flushes every write of a streaming
		// response (text/event-stream, or no Content-Length: exec output,
		// chunked bodies), so SSE events arrive as written; a response of
		// known length goes out in as few writes as the buffer allows instead
		// of one flush (one syscall) per copy.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
		ErrorHandler:  p.handleError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		// The sandbox key is between the gateway and the sandbox only.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(SandboxAPIKeyHeader)
			return nil
		},
	}
	return p
}

type stateKey struct{}

// state is what one request carries through the ReverseProxy.
type state struct {
	up      Upstream
	path    string
	rawPath string
	body    *guardedBody // the request body as sent upstream; nil without one
}

// Serve proxies r to up at path (the upstream path, e.g. /v1/shell/exec;
// rawPath is its escaped form when it differs, else "") and returns how
// many request body bytes were sent upstream (for the access log).
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, up Upstream, path, rawPath string) (bytesIn int64) {
	st := &state{up: up, path: path, rawPath: rawPath}
	up.Begin()
	defer func() { st.up.End() }()
	if r.Header.Get("Upgrade") != "" {
		w = p.upgrades.track(w)
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	if st.body != nil {
		bytesIn = st.body.n.Load()
	}
	return bytesIn
}

// CloseUpgraded closes every upgraded (WebSocket) connection; used on drain,
// since http.Server.Shutdown does not touch hijacked connections.
func (p *Proxy) CloseUpgraded() int { return p.upgrades.closeAll() }

// Upgraded is the number of upgraded connections open now.
func (p *Proxy) Upgraded() int { return p.upgrades.count() }

func stateOf(ctx context.Context) *state {
	st, _ := ctx.Value(stateKey{}).(*state)
	return st
}

// bufferPool recycles the 32 KiB copy buffers of response bodies.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
