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
	"time"
)

// Upstream is one sandbox incarnation as the proxy sees it.
type Upstream interface {
	BaseURL() *url.URL
	// RoundTripper is the connection pool dedicated to this incarnation.
	RoundTripper() http.RoundTripper
	// SandboxKey is the sandboxspec.SecretHeader value of this incarnation's own
	// secret, as a header value shared by every request (never modified),
	// or nil: the sandbox has none, and Config.SandboxAPIKey is sent.
	SandboxKey() []string
	// PortHost is where the sandbox's own ports are dialled directly (an
	// image without Sandgate's server); "" = through the sandbox server's
	// bridge (sandboxspec.PortPrefix) on BaseURL.
	PortHost() string
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
	// SandboxAPIKey, when set, is sent as sandboxspec.SecretHeader to every
	// sandbox without a secret of its own (Upstream.SandboxKey): one key
	// shared by all of them, for third-party sandbox images. Clients can
	// neither set nor read it.
	SandboxAPIKey string
	// MaxRetries after dial-class failures. 0 = 2; negative = none.
	MaxRetries int
	// MaxBodyBytes bounds a request body, counted as it streams to the
	// sandbox (never buffered); past it the request fails with 413.
	// 0 = 1 GiB; negative = no limit.
	MaxBodyBytes int64
	// WSIdleTimeout closes an upgraded (WebSocket) connection after this
	// long without a byte in either direction; ping frames count, since the
	// gateway does not parse frames. 0 = 10m; negative = never.
	WSIdleTimeout time.Duration
	// WSMaxLifetime closes an upgraded connection this long after it opened,
	// busy or not. 0 = 24h; negative = never.
	WSMaxLifetime time.Duration
	// MaxUpgraded caps the upgraded connections open at once (503 past it).
	// 0 = 1024; negative = no cap.
	MaxUpgraded int
	// GatewayOrigin (scheme://host[:port]) and GatewayKey: requests to
	// upstreams on that origin carry "Authorization: Bearer GatewayKey". It
	// is the remote backend's provisioner when that is another Sandgate,
	// whose /sandboxes/{id} URLs are the upstreams; no other upstream (a
	// sandbox, which runs untrusted code) ever sees the key.
	GatewayOrigin string
	GatewayKey    string
	// ForwardCookies passes the client's Cookie headers to sandboxes and
	// their Set-Cookie back (an app in a sandbox that keeps a login). Off,
	// the default, neither crosses: a sandbox's tenant controls its
	// responses, which are served on the gateway's origin (headers.go).
	ForwardCookies bool
}

// Defaults of Config.
const (
	DefaultMaxBodyBytes  = 1 << 30
	DefaultWSIdleTimeout = 10 * time.Minute
	DefaultWSMaxLifetime = 24 * time.Hour
	DefaultMaxUpgraded   = 1024
)

func (c Config) withDefaults() Config {
	if c.MaxRetries == 0 {
		c.MaxRetries = 2
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.WSIdleTimeout == 0 {
		c.WSIdleTimeout = DefaultWSIdleTimeout
	}
	if c.WSMaxLifetime == 0 {
		c.WSMaxLifetime = DefaultWSMaxLifetime
	}
	if c.MaxUpgraded == 0 {
		c.MaxUpgraded = DefaultMaxUpgraded
	}
	return c
}

// ProxyPortHeader is the all-in-one sandbox's header naming the port its
// internal forwarder sends a request to (its API key header is
// sandboxspec.SecretHeader); a client's is stripped, and the gateway sends
// none: it reaches ports through the sandbox server's bridge.
const ProxyPortHeader = "X-Aio-Proxy-Port"

// Proxy is the one ReverseProxy every data-plane request goes through.
type Proxy struct {
	rp       *httputil.ReverseProxy
	cfg      Config
	gateway  *url.URL // GatewayOrigin; nil = none
	gwAuth   string   // "Bearer " + GatewayKey
	apiKey   []string // SandboxAPIKey as a shared header value; nil = none
	resolver Resolver
	writeErr ErrorWriter
	upgrades *upgrades
	log      *slog.Logger
}

// New returns a Proxy.
func New(cfg Config, resolver Resolver, writeErr ErrorWriter, log *slog.Logger) *Proxy {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	p := &Proxy{cfg: cfg, resolver: resolver, writeErr: writeErr, log: log,
		upgrades: newUpgrades(cfg.MaxUpgraded, cfg.WSIdleTimeout, cfg.WSMaxLifetime, log)}
	if cfg.SandboxAPIKey != "" {
		p.apiKey = []string{cfg.SandboxAPIKey}
	}
	if u, err := url.Parse(cfg.GatewayOrigin); err == nil && cfg.GatewayKey != "" && u.Host != "" {
		p.gateway, p.gwAuth = u, "Bearer "+cfg.GatewayKey
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: &dispatch{p: p},
		// 0, not -1: ReverseProxy already flushes every write of a streaming
		// response (text/event-stream, or no Content-Length: exec output,
		// chunked bodies), so SSE events arrive as written; a response of
		// known length goes out in as few writes as the buffer allows instead
		// of one flush (one syscall) per copy.
		FlushInterval: 0,
		BufferPool:    BufferPool{},
		ErrorHandler:  p.handleError,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ModifyResponse: func(resp *http.Response) error {
			st := stateOf(resp.Request.Context())
			p.secureResponse(st.client, resp.Header, st.csp)
			return checkResponse(resp)
		},
	}
	return p
}

type stateKey struct{}

// state is what one request carries through the ReverseProxy. It is the
// request's context too (one allocation where context.WithValue was a
// second): the outbound request's context derives from it.
type state struct {
	context.Context             // the inbound request's
	client          http.Header // the response headers to the client
	up              Upstream
	path            string
	rawPath         string
	port            string       // a port inside the sandbox (sandboxspec.PortPrefix); "" = the sandbox API
	body            *guardedBody // the request body as sent upstream; nil without one
	csp             []string     // documents' Content-Security-Policy (ServeCSP); nil = cspSandbox
	caller          []string     // sandboxspec.CallerHeader's value (ServeCSP); nil = none
}

// Serve proxies r to up at path (the upstream path, e.g. /v1/shell/exec;
// rawPath is its escaped form when it differs, else "") and returns how
// many request body bytes were sent upstream (for the access log). port,
// when set (1-65535, validated by the caller), sends the request to that
// port inside the sandbox through the sandbox server's bridge: path goes
// under sandboxspec.PortPath(port).
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, up Upstream, path, rawPath, port string) (bytesIn int64) {
	return p.ServeCSP(w, r, up, path, rawPath, port, nil, nil)
}

// ServeCSP is Serve with the Content-Security-Policy a document response
// gets: nil = "sandbox" (no script: content on the gateway's origin); an
// empty, non-nil slice = none (content on an origin of its own, a preview
// link's); otherwise that policy. caller, when not nil, is sent as
// sandboxspec.CallerHeader: who the request is for, in the sandbox's
// command log. Both slices are shared, never modified.
func (p *Proxy) ServeCSP(w http.ResponseWriter, r *http.Request, up Upstream, path, rawPath, port string, csp, caller []string) (bytesIn int64) {
	if r.Header.Get("Upgrade") != "" {
		if !p.upgrades.admit() {
			p.writeErr(w, r, ErrUpgradeCapacity)
			return 0
		}
		defer p.upgrades.leave()
		w = p.upgrades.track(w)
	}
	st := &state{Context: r.Context(), client: w.Header(), up: up, path: path, rawPath: rawPath, port: port, csp: csp, caller: caller}
	up.Begin()
	defer func() { st.up.End() }()
	p.rp.ServeHTTP(w, r.WithContext(st))
	if st.body != nil {
		bytesIn = st.body.n.Load()
	}
	return bytesIn
}

// TooLarge refuses a request whose declared length is over the body limit
// before anything is acquired for it; an undeclared (chunked) length is
// counted as it streams.
func (p *Proxy) TooLarge(r *http.Request) error {
	if p.cfg.MaxBodyBytes > 0 && r.ContentLength > p.cfg.MaxBodyBytes {
		return &http.MaxBytesError{Limit: p.cfg.MaxBodyBytes}
	}
	return nil
}

// CloseUpgraded closes every upgraded (WebSocket) connection; used on drain,
// since http.Server.Shutdown does not touch hijacked connections.
func (p *Proxy) CloseUpgraded() int { return p.upgrades.closeAll() }

// Upgraded is the number of upgraded connections open now.
func (p *Proxy) Upgraded() int { return p.upgrades.count() }

// Value is the request context's, and st itself under stateKey.
func (st *state) Value(key any) any {
	if key == (stateKey{}) {
		return st
	}
	return st.Context.Value(key)
}

func stateOf(ctx context.Context) *state {
	st, _ := ctx.Value(stateKey{}).(*state)
	return st
}

// BufferPool recycles the copy buffers of response bodies. A read takes
// what the sandbox's socket holds, up to the buffer, and each read is one
// write to the client: 128 KiB moves a 1 MiB download in ~12 reads and ~10
// writes where 32 KiB took ~37 and ~35 (strace, bench proxy-throughput). A
// buffer is held only while a response streams; a long SSE stream holds one.
type BufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

func (BufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (BufferPool) Put(b []byte) { buffers.Put(&b) }
